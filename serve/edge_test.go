package serve

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/memstore"
)

// peerWindow is envoyproxy/ratelimit's fixed window for one descriptor,
// as its source decides (limiter/base_limiter.go, GetResponseDescriptorStatus;
// utils.CalculateReset): the window's counter is increased by the hits
// (INCRBY, whether over or not), the descriptor is over its limit when the
// count after exceeds requests_per_unit, and duration_until_reset is the
// unit's seconds minus the Unix second modulo them.
type peerWindow struct {
	limit uint64
	unit  int64 // seconds
	count map[int64]uint64
}

func (p *peerWindow) decide(now time.Time, hits uint64) (rlsv3.RateLimitResponse_Code, uint32, int64) {
	sec := now.Unix()
	p.count[sec/p.unit] += hits
	reset := p.unit - sec%p.unit
	if after := p.count[sec/p.unit]; after > p.limit {
		return rlsv3.RateLimitResponse_OVER_LIMIT, 0, reset
	} else {
		return rlsv3.RateLimitResponse_OK, uint32(p.limit - after), reset
	}
}

// TestLimitsAtTheEdge decides the largest limits the peer accepts (2^32−1
// a second and a year, 1000001 a day, 10000019 an hour, 2^32−1 a minute)
// at the first and last microsecond of a window and at the next one's
// start, on an injected clock, and checks each answer against the peer's
// decision, field by field: its code, limit_remaining and
// duration_until_reset in whole seconds.
func TestLimitsAtTheEdge(t *testing.T) {
	t.Parallel()
	units := map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "year": 365 * 86400}
	for _, tt := range []struct {
		unit  string
		limit uint64
	}{
		{"second", 4294967295},
		{"year", 4294967295},
		{"day", 1000001},
		{"hour", 10000019},
		{"minute", 4294967295},
	} {
		t.Run(fmt.Sprintf("%d a %s", tt.limit, tt.unit), func(t *testing.T) {
			t.Parallel()
			u := units[tt.unit]
			// A window of the unit that starts in 2026, aligned to the
			// Unix epoch as both servers align it.
			start := time.Unix(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC).Unix()/u*u+u, 0)
			var now atomic.Int64
			now.Store(start.UnixMicro())
			clock := func() time.Time { return time.UnixMicro(now.Load()) }
			mem, err := memstore.New(memstore.Config{Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			set, err := limits.Parse(limits.Options{}, limits.File{Name: "edge.yaml", Data: fmt.Appendf(nil,
				"domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: %d}\n", tt.unit, tt.limit)})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := NewService(mem, set)
			if err != nil {
				t.Fatal(err)
			}
			svc.now = clock
			peer := &peerWindow{limit: tt.limit, unit: u, count: map[int64]uint64{}}
			last := start.Add(time.Duration(u)*time.Second - time.Microsecond)
			next := start.Add(time.Duration(u) * time.Second)
			for i, step := range []struct {
				at   time.Time
				hits uint64
			}{
				{start, tt.limit},    // the whole limit at the window's first µs
				{start, 1},           // one more: over
				{last, 1},            // still over at its last µs
				{next, 1},            // the next window's first µs
				{next, tt.limit - 1}, // the rest of it
				{next, 1},            // over again
			} {
				now.Store(step.at.UnixMicro())
				resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
					HitsAddend: wrapperspb.UInt64(step.hits),
				}}})
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				st := resp.Statuses[0]
				code, remaining, reset := peer.decide(step.at, step.hits)
				if st.Code != code || st.LimitRemaining != remaining || st.DurationUntilReset.AsDuration() != time.Duration(reset)*time.Second ||
					st.CurrentLimit.GetRequestsPerUnit() != uint32(tt.limit) {
					t.Errorf("step %d: %d hits at %v: %v remaining %d reset %v, the peer's %v remaining %d reset %ds",
						i+1, step.hits, step.at.UTC().Format(time.RFC3339Nano), st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration(), code, remaining, reset)
				}
			}
		})
	}
}

// TestResetSeconds reports duration_until_reset in whole seconds, as the
// peer (an exact 0.4 s is 1 s, 14.99 s is 15 s), or to the microsecond
// with WithExactReset; and ignores a limit override's unit_multiplier, as
// the peer, unless WithUnitMultiplier.
func TestResetSeconds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 12, 0, 45, 10_000_000, time.UTC) // 14.99 s before the minute ends
	clock := func() time.Time { return at }
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "r.yaml", Data: []byte(
		"domain: r\ndescriptors:\n  - key: s\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: m\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")})
	if err != nil {
		t.Fatal(err)
	}
	multiplied := &ratelimitv3.RateLimitDescriptor{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "o", Value: "v"}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 1, UnitMultiplier: wrapperspb.UInt32(60)},
	}
	zero := &ratelimitv3.RateLimitDescriptor{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "z", Value: "v"}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 1, UnitMultiplier: wrapperspb.UInt32(0)},
	}
	d := func(key string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}
	}
	for _, tt := range []struct {
		name string
		opts []Option
		want []time.Duration // s, m, multiplied, zero
	}{
		{"as the peer", nil, []time.Duration{time.Second, 15 * time.Second, time.Second, time.Second}},
		{"WithExactReset", []Option{WithExactReset()}, []time.Duration{990 * time.Millisecond, 14990 * time.Millisecond, 990 * time.Millisecond, 990 * time.Millisecond}},
		{"WithUnitMultiplier", []Option{WithUnitMultiplier()}, []time.Duration{time.Second, 15 * time.Second, 15 * time.Second, -1}},
	} {
		mem, err := memstore.New(memstore.Config{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		svc, err := NewService(mem, set, tt.opts...)
		if err != nil {
			t.Fatal(err)
		}
		svc.now = clock
		for i, desc := range []*ratelimitv3.RateLimitDescriptor{d("s"), d("m"), multiplied, zero} {
			resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "r", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc}})
			if tt.want[i] < 0 {
				if err == nil {
					t.Errorf("%s: descriptor %d: answered, want InvalidArgument", tt.name, i)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: descriptor %d: %v", tt.name, i, err)
			}
			if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != tt.want[i] {
				t.Errorf("%s: descriptor %d: duration_until_reset %v, want %v", tt.name, i, got, tt.want[i])
			}
		}
	}
}
