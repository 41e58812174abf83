package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/telemetry"
)

// privacyKeys returns n distinct keys of the kinds services limit by: user
// ids, IPv4 and IPv6 addresses.
func privacyKeys(n int) []string {
	keys := make([]string, 0, n)
	for i := 0; len(keys) < n; i++ {
		switch i % 4 {
		case 0, 1:
			keys = append(keys, fmt.Sprintf("user-%d@example.com", i))
		case 2:
			keys = append(keys, fmt.Sprintf("198.%d.%d.%d", 18+i>>16&1, i>>8&255, i&255))
		case 3:
			keys = append(keys, fmt.Sprintf("2001:db8:%x::%x", i>>16, i&0xffff))
		}
	}
	return keys
}

// leakFinder tells whether a string equals or contains one of a set of
// keys.
type leakFinder struct {
	keys     map[string]bool
	min, max int
	checked  map[string]bool // strings already found clean
}

func newLeakFinder(keys []string) *leakFinder {
	f := &leakFinder{keys: make(map[string]bool, len(keys)), min: 1 << 30, checked: map[string]bool{}}
	for _, k := range keys {
		f.keys[k] = true
		f.min, f.max = min(f.min, len(k)), max(f.max, len(k))
	}
	return f
}

// leak returns the key s holds, or "".
func (f *leakFinder) leak(s string) string {
	if f.checked[s] {
		return ""
	}
	for i := range len(s) {
		for j := i + f.min; j <= min(len(s), i+f.max); j++ {
			if f.keys[s[i:j]] {
				return s[i:j]
			}
		}
	}
	f.checked[s] = true
	return ""
}

// values returns the strings an attribute holds.
func values(kv attribute.KeyValue) []string {
	switch kv.Value.Type() {
	case attribute.STRING:
		return []string{kv.Value.AsString()}
	case attribute.STRINGSLICE:
		return kv.Value.AsStringSlice()
	}
	return nil
}

// TestNoKeyLeaks sends 10,000 distinct user ids and IP addresses through
// decorators (by default, and with hashed keys) over a store that also
// fails, quoting the key in its errors, and answers from every source,
// behind a circuit breaker; then it scans every span (name, attributes,
// events, status) and every metric data point (attributes and exemplars)
// for a raw key, and counts the series of each instrument.
func TestNoKeyLeaks(t *testing.T) {
	t.Parallel()
	const n = 10_000
	const maxSeries = 50
	keys := privacyKeys(n)
	if len(keys) != n {
		t.Fatalf("%d keys", len(keys))
	}
	for _, mode := range []struct {
		name string
		opts []telemetry.Option
		raw  bool // the control: spans must hold keys, metrics still none
	}{
		{"default", nil, false},
		{"hashed", []telemetry.Option{telemetry.WithKeyHash([]byte("a long enough secret for HMAC"))}, false},
		{"raw (control)", []telemetry.Option{telemetry.WithRawKey()}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			mem := newMem(t)
			var calls int
			inner := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
				calls++ // the limiter below is used from one goroutine
				switch {
				case calls%50 == 0:
					return core.Decision{}, fmt.Errorf("backend: slot of %s is busy", req.Key)
				case calls%11 == 0:
					src := core.Source(1 + calls%6) // cache ... shadow
					return core.Decision{Allowed: src != core.SourceFailClosed && src != core.SourceCache, Limit: 2, Source: src}, nil
				}
				return mem.Apply(ctx, req)
			})
			breaker := &fakeBreaker{inner: inner, state: "closed"}
			h := newHarness(t, breaker, append(mode.opts, telemetry.WithName("privacy"))...)
			lim, err := sluice.NewLimiter(h.store, algorithms.GCRA, core.PerMinute(2))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, k := range keys {
				if i == n/2 {
					breaker.set("open")
				}
				lim.Allow(ctx, k)
				lim.AllowN(ctx, k, 2) // denied
				if i%10 == 0 {
					lim.Peek(ctx, k)
				}
			}

			find := newLeakFinder(keys)
			spans := h.ended()
			if len(spans) < 2*n {
				t.Fatalf("%d spans, want at least %d", len(spans), 2*n)
			}
			leaks := 0
			report := func(where, key string) {
				if leaks++; leaks <= 10 {
					t.Errorf("%s holds the key %q", where, key)
				}
			}
			var errorsSeen, spanLeaks int
			for _, s := range spans {
				if mode.raw {
					scanSpan(s, find, func(string, string) { spanLeaks++ })
				} else {
					scanSpan(s, find, report)
				}
				if s.Status().Description != "" {
					errorsSeen++
				}
			}
			if errorsSeen == 0 {
				t.Error("no failed decision was traced")
			}
			if mode.raw && spanLeaks < len(spans) {
				t.Errorf("raw keys found in %d of %d spans: the scan misses them", spanLeaks, len(spans))
			}

			for name, m := range h.collect(t) {
				ps := points(t, m)
				if len(ps) > maxSeries {
					t.Errorf("%s: %d series, want at most %d", name, len(ps), maxSeries)
				}
				t.Logf("%s: %d series", name, len(ps))
				for _, p := range ps {
					for _, kv := range p.attrs.ToSlice() {
						for _, v := range values(kv) {
							if k := find.leak(v); k != "" {
								report(name+" attribute "+string(kv.Key), k)
							}
						}
					}
					for _, ex := range p.exemplarAttrs {
						for _, kv := range ex {
							for _, v := range values(kv) {
								if k := find.leak(v); k != "" {
									report(name+" exemplar "+string(kv.Key), k)
								}
							}
						}
					}
				}
			}
			if leaks > 0 {
				t.Errorf("%d leaks", leaks)
			}
		})
	}
}

func scanSpan(s sdktrace.ReadOnlySpan, find *leakFinder, report func(where, key string)) {
	if k := find.leak(s.Name()); k != "" {
		report("span name", k)
	}
	if k := find.leak(s.Status().Description); k != "" {
		report("span status", k)
	}
	for _, kv := range s.Attributes() {
		for _, v := range values(kv) {
			if k := find.leak(v); k != "" {
				report("span attribute "+string(kv.Key), k)
			}
		}
	}
	for _, e := range s.Events() {
		for _, kv := range e.Attributes {
			for _, v := range values(kv) {
				if k := find.leak(v); k != "" {
					report("span event "+e.Name+" attribute "+string(kv.Key), k)
				}
			}
		}
	}
}

// TestNoKeyLeaksThroughMiddleware serves HTTP through httplimit over a
// decorated memory store, as a service deploys it: 5,000 clients, each
// its own address (IPv4 and IPv6) and user id, three requests each under
// two rules of 2 a minute, so that the third is a 429. No span and no
// metric holds an address or an id; each instrument has at most 50
// series; a denial's decision span is INTERNAL with its status Unset.
func TestNoKeyLeaksThroughMiddleware(t *testing.T) {
	t.Parallel()
	const clients = 5_000
	const maxSeries = 50
	h := newHarness(t, newMem(t), telemetry.WithName("api"))
	stack, err := sluice.NewStack(h.store,
		sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(2)},
		sluice.Rule{Name: "per-user", Algorithm: algorithms.GCRA, Limit: core.PerMinute(2)},
	)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(stack, httplimit.WithKey("per-user", httplimit.HeaderKey("X-User")), httplimit.WithIPv6Prefix(128))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	handler := mw.Handler(ok)
	var raw []string // every address and id sent
	answers := map[int]int{}
	for i := range clients {
		addr := fmt.Sprintf("198.%d.%d.%d", 18+i>>16&1, i>>8&255, i&255)
		remote := addr + ":40000"
		if i%2 == 1 {
			addr = fmt.Sprintf("2001:db8:%x::%x", i>>16, i&0xffff)
			remote = "[" + addr + "]:40000"
		}
		user := fmt.Sprintf("user-%d@example.com", i)
		raw = append(raw, addr, user)
		for range 3 {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = remote
			req.Header.Set("X-User", user)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			answers[rec.Code]++
		}
	}
	if answers[http.StatusOK] != 2*clients || answers[http.StatusTooManyRequests] != clients {
		t.Fatalf("answers %v; want %d × 200 and %d × 429", answers, 2*clients, clients)
	}

	find := newLeakFinder(raw)
	leaks := 0
	report := func(where, key string) {
		if leaks++; leaks <= 10 {
			t.Errorf("%s holds %q", where, key)
		}
	}
	spans := h.ended()
	denials := 0
	for _, s := range spans {
		scanSpan(s, find, report)
		if s.SpanKind() != trace.SpanKindInternal {
			t.Fatalf("decision span %q is %v, want INTERNAL", s.Name(), s.SpanKind())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.AllowedKey && !kv.Value.AsBool() {
				denials++
				if s.Status().Code != codes.Unset {
					t.Fatalf("a denial's span has status %v, want Unset", s.Status())
				}
			}
		}
	}
	if denials < clients {
		t.Errorf("%d denied decision spans, want at least %d: the scan misses the denials", denials, clients)
	}
	for name, m := range h.collect(t) {
		ps := points(t, m)
		if len(ps) > maxSeries {
			t.Errorf("%s: %d series, want at most %d", name, len(ps), maxSeries)
		}
		for _, p := range ps {
			for _, kv := range p.attrs.ToSlice() {
				for _, v := range values(kv) {
					if k := find.leak(v); k != "" {
						report(name+" attribute "+string(kv.Key), k)
					}
				}
			}
		}
	}
	if leaks > 0 {
		t.Errorf("%d leaks", leaks)
	}
	t.Logf("%d requests, %d decision spans, %d denials", 3*clients, len(spans), denials)
}

// TestServerSpanOfADenial serves requests through httplimit inside a
// server span, as HTTP instrumentation (otelhttp) starts one around the
// handler, until the limit answers 429: sluice leaves the server span as
// it found it (no status, no error event, none of its attributes), and
// each decision's span is the server span's INTERNAL child, a denial's
// with status Unset. What status a 429 gives the server span is
// the instrumentation's choice: otelhttp leaves a 4xx Unset.
func TestServerSpanOfADenial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newMem(t), telemetry.WithName("api"))
	stack, err := sluice.NewStack(h.store, sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(2)})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(stack)
	if err != nil {
		t.Fatal(err)
	}
	tracer := h.tp.Tracer("instrumentation")
	handler := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	server := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), "GET /", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		handler.ServeHTTP(w, r.WithContext(ctx))
	})
	var codesSeen []int
	for range 3 {
		rec := httptest.NewRecorder()
		server.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		codesSeen = append(codesSeen, rec.Code)
	}
	if want := []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests}; fmt.Sprint(codesSeen) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", codesSeen, want)
	}
	servers := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var decisions []sdktrace.ReadOnlySpan
	for _, s := range h.ended() {
		if s.SpanKind() == trace.SpanKindServer {
			servers[s.SpanContext().SpanID()] = s
		} else {
			decisions = append(decisions, s)
		}
	}
	if len(servers) != 3 || len(decisions) != 3 {
		t.Fatalf("%d server spans and %d others, want 3 and 3", len(servers), len(decisions))
	}
	for _, s := range servers {
		if s.Status().Code != codes.Unset || len(s.Events()) != 0 || len(s.Attributes()) != 0 {
			t.Errorf("server span: status %v, events %v, attributes %v; want them as the instrumentation left them (none)", s.Status(), s.Events(), s.Attributes())
		}
	}
	denials := 0
	for _, d := range decisions {
		if d.SpanKind() != trace.SpanKindInternal {
			t.Errorf("decision span %q is %v, want INTERNAL", d.Name(), d.SpanKind())
		}
		if _, ok := servers[d.Parent().SpanID()]; !ok {
			t.Errorf("decision span %q is not a server span's child", d.Name())
		}
		for _, kv := range d.Attributes() {
			if kv.Key == telemetry.AllowedKey && !kv.Value.AsBool() {
				denials++
				if d.Status().Code != codes.Unset {
					t.Errorf("the denial's decision span has status %v, want Unset", d.Status())
				}
			}
		}
	}
	if denials != 1 {
		t.Errorf("%d denied decision spans, want 1", denials)
	}
}
