package redisengine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// roundOf returns a round of one entry a context.
func roundOf(ctxs ...context.Context) []*Entry {
	round := make([]*Entry, len(ctxs))
	for i, ctx := range ctxs {
		round[i] = &Entry{Ctx: ctx}
	}
	return round
}

// TestLastContext checks, in virtual time, when a round's context ends:
// at its callers' last deadline when they all have one, as the last
// caller's context ends when some end without one, and never while any
// caller still waits or when one never ends.
func TestLastContext(t *testing.T) {
	t.Run("deadlines", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, cancelA := context.WithTimeout(t.Context(), 5*time.Millisecond)
			defer cancelA()
			b, cancelB := context.WithTimeout(t.Context(), 9*time.Millisecond)
			defer cancelB()
			start := time.Now()
			ctx, stop := lastContext(roundOf(a, b))
			defer stop()
			<-ctx.Done()
			if took := time.Since(start); took != 9*time.Millisecond {
				t.Errorf("the round ended after %v, want at the last deadline, 9ms", took)
			}
		})
	})
	t.Run("cancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, cancelA := context.WithCancel(t.Context())
			b, cancelB := context.WithCancel(t.Context())
			c, cancelC := context.WithTimeout(t.Context(), 2*time.Millisecond)
			defer cancelC()
			ctx, stop := lastContext(roundOf(a, b, c))
			defer stop()
			cancelA()
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the round ended while a caller waited: %v", ctx.Err())
			}
			cancelB()
			synctest.Wait()
			if ctx.Err() == nil {
				t.Error("the round did not end with its last caller's context")
			}
		})
	})
	t.Run("never", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, cancelA := context.WithCancel(t.Context())
			ctx, stop := lastContext(roundOf(a, context.Background()))
			cancelA()
			time.Sleep(time.Second)
			if ctx.Err() != nil {
				t.Errorf("the round ended though a caller's context never ends: %v", ctx.Err())
			}
			stop()
		})
	})
	t.Run("stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// After stop, the round's entries are the sender's again: no
			// watcher may read them.
			a, cancelA := context.WithCancel(t.Context())
			round := roundOf(a)
			ctx, stop := lastContext(append(round, round[0]))
			stop()
			round[0].Ctx = nil
			cancelA()
			synctest.Wait()
			if ctx.Err() == nil {
				t.Error("stop did not release the round's context")
			}
		})
	})
}
