package memstore_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestSynctestClock checks that a memstore made inside a testing/synctest
// bubble, with its default clock and sweeper, keeps the bubble's time: it
// decides at the bubble's instants, a bucket refills over a time.Sleep
// that takes no real time, and the sweeper removes the expired key on the
// bubble's ticks.
func TestSynctestClock(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{}) // the default clock, a sweep a minute
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() }) // stops the sweeper, inside the bubble
		lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, sluice.PerHour(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Decide a second off the sweeper's ticks, which come a minute
		// apart from New: a sweep at the instant of a decision may run
		// before it or after it.
		time.Sleep(time.Second)
		start := time.Now() // 00:00:01 UTC, 2000-01-01, in every bubble
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || !d.At.Equal(start) {
			t.Fatalf("first Allow = %+v, %v; want allowed at the bubble's instant %v", d, err, start)
		}
		d, err := lim.Allow(ctx, "k")
		if err != nil || d.Allowed || d.RetryAfter != time.Hour {
			t.Fatalf("second Allow = %+v, %v; want denied for exactly 1h", d, err)
		}
		time.Sleep(d.RetryAfter)
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || !d.At.Equal(start.Add(time.Hour)) {
			t.Fatalf("Allow an hour later = %+v, %v; want allowed at %v", d, err, start.Add(time.Hour))
		}
		if st := s.Stats(); st.Keys != 1 {
			t.Fatalf("Stats() = %+v, want 1 key", st)
		}
		// The key is forgotten an hour after its last charge, by the next
		// sweep after that.
		time.Sleep(time.Hour + time.Minute)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 1 {
			t.Fatalf("Stats() = %+v after the horizon and a sweep; want the key expired", st)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("two hours in the bubble took %v of real time", real)
	}
}
