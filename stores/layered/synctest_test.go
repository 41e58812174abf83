package layered_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestSynctestDenyCache checks that the layered store's default clock
// keeps a testing/synctest bubble's time: a cached denial counts down and
// expires on the bubble's clock, and an allotment lapses after its TTL, both
// over time.Sleeps that take no real time.
func TestSynctestDenyCache(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		remote := storetest.NewFaulty(mem)
		s, err := layered.New(remote, layered.Config{
			Allot:        func(core.Request) int64 { return 5 },
			AllotmentTTL: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() }) // closes remote and the memstore
		ctx := context.Background()
		calls := func() int { return len(remote.Calls()) }
		check := func(what string, lim *sluice.Limiter, allowed bool, src core.Source, retry time.Duration, remoteCalls int) {
			t.Helper()
			before := calls()
			d, err := lim.Allow(ctx, "k")
			if err != nil || d.Allowed != allowed || d.Source != src || d.RetryAfter != retry {
				t.Errorf("%s: Allow = %+v, %v; want allowed %v from %v, RetryAfter %v", what, d, err, allowed, src, retry)
			}
			if n := calls() - before; n != remoteCalls {
				t.Errorf("%s: %d calls to the remote, want %d", what, n, remoteCalls)
			}
		}

		// The sliding window log is never allotted: its denials are cached.
		deny, err := sluice.NewLimiter(s, algorithms.SlidingWindowLog, core.PerHour(1))
		if err != nil {
			t.Fatal(err)
		}
		check("first", deny, true, core.SourceStore, 0, 1)
		check("second", deny, false, core.SourceStore, time.Hour, 1)
		check("cached", deny, false, core.SourceCache, time.Hour, 0)
		time.Sleep(30 * time.Minute)
		check("cached, half an hour later", deny, false, core.SourceCache, 30*time.Minute, 0)
		time.Sleep(30 * time.Minute)
		check("an hour later", deny, true, core.SourceStore, 0, 1)

		// A token bucket is allotted: an allotment taken in one call (the
		// request that takes it is answered from it) is spent locally
		// until it lapses, a minute later.
		allotment, err := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerHour(100))
		if err != nil {
			t.Fatal(err)
		}
		check("the allotment's take", allotment, true, core.SourceAllotment, 0, 1)
		for range 3 {
			check("spent from the allotment", allotment, true, core.SourceAllotment, 0, 0)
		}
		time.Sleep(time.Minute + time.Nanosecond)
		check("a new allotment, after the first lapsed", allotment, true, core.SourceAllotment, 0, 1)
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour and a minute in the bubble took %v of real time", real)
	}
}
