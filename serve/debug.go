package serve

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// debugHandler serves the debug port: /healthz, /metrics, /limits and Go's
// profiles under /debug/pprof/.
func (s *Server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(w)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /limits", func(w http.ResponseWriter, _ *http.Request) {
		set := s.svc.Limits()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "path: %s\nloaded: %s\ndigest: %x\ndomains: %s\nrules: %d\n",
			s.cfg.Limits, s.loadedAt.Load().UTC().Format(time.RFC3339), set.Digest(), strings.Join(set.Domains(), " "), set.Len())
	})
	return mux
}

// writeMetrics writes the server's counters in Prometheus's text format.
func (s *Server) writeMetrics(w http.ResponseWriter) {
	st := s.svc.Stats()
	metric := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	metric("sluice_rls_requests_total", "RLS requests answered, with a response or an error.", st.RPCs.Load())
	metric("sluice_rls_over_limit_total", "RLS responses whose overall code was OVER_LIMIT.", st.OverLimit.Load())
	metric("sluice_rls_invalid_total", "RLS requests refused as invalid.", st.Invalid.Load())
	metric("sluice_rls_store_errors_total", "RLS requests that failed because the store did.", st.StoreErrors.Load())
	metric("sluice_rls_shadow_over_limit_total", "Shadow-mode descriptors that were over their limit, answered OK.", st.ShadowDeny.Load())
	metric("sluice_rls_local_cache_over_limit_total", "Descriptors denied by the local cache of keys over their limit (-local-cache), without asking Redis.", st.LocalCache.Load())
	metric("sluice_rls_store_down_total", "Descriptors decided while the store was down (fail-open, fail-closed or degraded).", st.Unavailable.Load())
	metric("sluice_limits_reloads_total", "Configurations put in force after the first.", s.reloads.Load())
	metric("sluice_limits_rejected_total", "Configurations rejected as invalid; the previous one stayed in force.", s.rejected.Load())
	fmt.Fprintf(w, "# HELP sluice_limits_rules Rules in the configuration in force.\n# TYPE sluice_limits_rules gauge\nsluice_limits_rules %d\n", s.svc.Limits().Len())
	s.svc.dstats.write(w)
}
