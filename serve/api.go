package serve

import (
	"fmt"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request's body.
const maxJSONBody = 1 << 20

// Healthy reports what envoyproxy/ratelimit's /healthcheck reports: false
// once the server is stopping, while no domain is configured if
// [Config.HealthyWithConfig], and while [Config.StoreHealthy] reports
// false; else true. Neither Redis being down nor a rejected configuration
// (the previous one stays in force) makes it false otherwise.
func (s *Server) Healthy() bool {
	if s.draining.Load() || s.peerHealth() != healthpb.HealthCheckResponse_SERVING {
		return false
	}
	return s.cfg.StoreHealthy == nil || s.cfg.StoreHealthy()
}

// peerHealth is the gRPC health of the "ratelimit" service: Healthy but
// for the store.
func (s *Server) peerHealth() healthpb.HealthCheckResponse_ServingStatus {
	if s.cfg.HealthyWithConfig && len(s.svc.Limits().Domains()) == 0 {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// apiHandler serves envoyproxy/ratelimit's HTTP port: /healthcheck and
// /json.
func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Healthy() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.Handle("/json", s.JSONHandler())
	return mux
}

// metricsHandler serves /metrics' text at Config.MetricsPath.
func (s *Server) metricsHandler() http.Handler {
	path := s.cfg.MetricsPath
	if path == "" {
		path = "/metrics"
	}
	mux := http.NewServeMux()
	mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(w)
	})
	return mux
}

// JSONHandler returns the handler of envoyproxy/ratelimit's /json: the
// body is a RateLimitRequest in protobuf's JSON form, such as
// {"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]},
// and the answer its RateLimitResponse as JSON, with status 200 (OK),
// 429 (OVER_LIMIT) or 500 (UNKNOWN). A body that is not such a request
// (or is larger than 1 MiB), and a request the service refuses, are
// answered 400 Bad Request, as the service answers them.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req rlsv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if err != nil {
			s.log.Debug("/json: bad request", "err", err)
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			s.log.Debug("/json: refused", "err", err)
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, fmt.Sprintf("marshaling the response: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.OverallCode {
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
