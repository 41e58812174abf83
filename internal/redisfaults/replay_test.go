package redisfaults

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestReplay checks Replay on decisions the Go model made itself, given in
// a shuffled order (as goroutines report them): it accepts them, and it
// finds one admission too many and a denial's wrong wait.
func TestReplay(t *testing.T) {
	limit := core.PerSecond(10).WithBurst(3)
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			var st core.State
			var recs []Record
			rng := rand.New(rand.NewPCG(1, 2))
			at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			for range 2000 {
				if rng.IntN(3) > 0 { // else the same instant again
					at += 1 + rng.Int64N(30_000)
				}
				for range 1 + rng.IntN(4) {
					d := alg.Transition(&st, core.Step{Now: at, Cost: 1, Limit: limit})
					recs = append(recs, Record{At: at, Allowed: d.Allowed, Remaining: d.Remaining, Retry: d.RetryAfter})
				}
			}
			rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
			if n, err := Replay(alg, limit, recs); err != nil || n != len(recs) {
				t.Fatalf("Replay of the model's own decisions = %d, %v; want %d, nil", n, err, len(recs))
			}
			for i := range recs {
				if !recs[i].Allowed {
					bad := append([]Record(nil), recs...)
					bad[i].Allowed, bad[i].Retry = true, 0
					if _, err := Replay(alg, limit, bad); err == nil || !strings.Contains(err.Error(), "the store said allowed true") {
						t.Errorf("an admission too many: Replay = %v, want it found", err)
					}
					bad[i] = recs[i]
					bad[i].Retry += time.Microsecond
					if _, err := Replay(alg, limit, bad); err == nil {
						t.Error("a denial's wait off by 1 µs: Replay found nothing")
					}
					break
				}
			}
		})
	}
}
