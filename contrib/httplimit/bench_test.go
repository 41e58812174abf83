package httplimit_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
)

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared for each request, so that a benchmark measures the middleware
// and not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// BenchmarkMiddleware measures the cost per request of the middleware on
// memstore, with a stack of one rule, against the bare handler ("none"):
// the difference is the middleware's overhead, store decision included. Every request is
// allowed (the limit is never reached), except under "denied", where every
// request gets a 429 with its problem body.
func BenchmarkMiddleware(b *testing.B) {
	huge := core.PerSecond(1e9) // never exhausted within a benchmark, on a stuck clock
	for _, bc := range []struct {
		name  string
		limit core.Limit
		opts  []httplimit.Option
		keys  int
	}{
		{"none", core.Limit{}, nil, 1},
		{"draft/hot-key", huge, nil, 1},
		{"draft/10k-keys", huge, nil, 10_000},
		{"no-headers/hot-key", huge, []httplimit.Option{httplimit.WithHeaders(httplimit.HeadersNone)}, 1},
		{"all-headers/hot-key", huge, []httplimit.Option{httplimit.WithHeaders(httplimit.HeadersDraft | httplimit.HeadersLegacy | httplimit.HeadersX)}, 1},
		{"denied/hot-key", core.PerHour(1), nil, 1},
	} {
		h := http.Handler(ok)
		if bc.name != "none" {
			stack := oneRule(b, newStore(b), algorithms.TokenBucket, bc.limit)
			h = newMiddleware(b, stack, bc.opts...).Handler(ok)
		}
		reqs := make([]*http.Request, bc.keys)
		for i := range reqs {
			reqs[i] = request("10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":4711")
		}
		b.Run(bc.name, func(b *testing.B) {
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				w := &discard{h: make(http.Header)}
				i := 0
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, reqs[i%len(reqs)])
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					w := &discard{h: make(http.Header)}
					i := 0
					for pb.Next() {
						clear(w.h)
						h.ServeHTTP(w, reqs[i%len(reqs)])
						i++
					}
				})
			})
		})
	}
}

// TestAllowedAllocatesNothing checks that an allowed request through a
// stack of one rule allocates nothing of the middleware's or the stack's
// own when its key needs none: [httplimit.GlobalKey] and no headers.
// (Not parallel: AllocsPerRun counts every goroutine's allocations.)
func TestAllowedAllocatesNothing(t *testing.T) {
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerSecond(1e9))
	h := newMiddleware(t, stack, httplimit.WithKeyFunc(httplimit.GlobalKey), httplimit.WithHeaders(httplimit.HeadersNone)).Handler(ok)
	w := &discard{h: make(http.Header)}
	r := request("192.0.2.7:4711")
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n != 0 {
		t.Errorf("an allowed request by a global key, without headers: %v allocations, want 0", n)
	}
}
