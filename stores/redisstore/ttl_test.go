package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// snapshotLua returns, at one instant, the server's clock in µs, key's
// value and its PTTL in ms.
const snapshotLua = `local t = redis.call('TIME')
return {t[1] * 1000000 + t[2], redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`

// TestTTLCoversState charges keys on the server's clock, alone and in
// batches, and checks after each decision that the key outlives its state
// by the margin (1 s) and by no more than the margin and the slack (1 s
// more), and that a key keeps its TTL (SET … KEEPTTL) while it covers the
// state: it gets a TTL about once for each second its state's end moves,
// not on every write.
func TestTTLCoversState(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	ctx := context.Background()
	// Each charge moves the state's end 100 ms on: a TTL is set again
	// about every tenth charge.
	limit := core.PerSecond(10).WithBurst(1000)
	req := func(key string) core.Request {
		return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
	}
	var first, last [2]int64 // each key's state's end, first and last
	// The longest a decision took: a script sets a key's TTL from the
	// clock it read when it began, and Redis counts it from when it sets
	// it, later by as long as Redis waited for a core in between.
	var longest time.Duration
	for i := range 60 {
		began := time.Now()
		if i%2 == 0 {
			if _, err := store.Apply(ctx, req("a")); err != nil {
				t.Fatal(err)
			}
		} else {
			out := make([]core.Decision, 2)
			if err := store.ApplyAll(ctx, []core.Request{req("a"), req("b")}, out); err != nil {
				t.Fatal(err)
			}
		}
		longest = max(longest, time.Since(began))
		for j, key := range []string{"a", "b"} {
			end, ok := checkTTL(t, client, store.Key(key, algorithms.TokenBucket), longest)
			if !ok {
				continue
			}
			if first[j] == 0 {
				first[j] = end
			}
			last[j] = end
		}
	}
	info := redisfaults.Info(t, srv, "commandstats")
	psetex, set := redisfaults.InfoCount(info, "cmdstat_psetex", "calls"), redisfaults.InfoCount(info, "cmdstat_set", "calls")
	// A key gets a TTL at its first write and the next, then each time
	// its end has moved a second (less two milliseconds) beyond the last
	// TTL's; twice if the key expired meanwhile (a stall of a second),
	// which moves its end as far.
	most := int64(0)
	for j := range first {
		most += 2 + 2*(last[j]-first[j])/998_000
	}
	t.Logf("PSETEX %d, SET %d; at most %d PSETEX allowed", psetex, set, most)
	if psetex > most {
		t.Errorf("%d PSETEX for states whose ends moved %v µs: want at most %d", psetex, [2]int64{last[0] - first[0], last[1] - first[1]}, most)
	}
	if psetex+set != 90 {
		t.Errorf("%d PSETEX and %d SET for 90 writes", psetex, set)
	}
}

// checkTTL checks that key, if held, expires from its state's end plus 1 s
// to that plus 2 s (either bound moved by the longest a decision took,
// late, at most), and that its state's X is not after its expiry (but for
// late); it returns the state's end.
func checkTTL(t *testing.T, client *redis.Client, key string, late time.Duration) (end int64, ok bool) {
	t.Helper()
	r, err := client.Eval(context.Background(), snapshotLua, []string{key}).Slice()
	if err != nil {
		t.Fatal(err)
	}
	value, held := r[1].(string)
	if !held {
		return 0, false
	}
	now, pttl := r[0].(int64), r[2].(int64)
	num := func(i int) int64 { return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(value[8*i:])))) }
	end, x := num(4), num(5)
	expiry := now/1000 + pttl // ms, within a ms
	lateMs := (late + time.Millisecond - 1).Milliseconds()
	switch {
	case len(value) != 48:
		t.Fatalf("key %s holds %d bytes, want 48", key, len(value))
	case pttl < 0:
		t.Fatalf("key %s has PTTL %d", key, pttl)
	case expiry < end/1000+1000-1-lateMs:
		// The end is on the clock the script read, the expiry from the
		// script's start: earlier by as long as Redis waited in between.
		t.Errorf("key %s expires at %d ms, before its state's end %d µs plus 1 s (less %v, the longest a decision took)", key, expiry, end, late)
	case expiry > end/1000+2000+2+lateMs:
		t.Errorf("key %s expires at %d ms, after its state's end %d µs plus 2 s (and %v, the longest a decision took)", key, expiry, end, late)
	case x/1000 > expiry+1+lateMs:
		// Redis counts a TTL set in a script from the script's start; X
		// is from the clock the script read (TIME), later by as long as the
		// script ran before it read it, a wait for a core included: at most
		// the decision.
		t.Errorf("key %s expires at %d ms, before its state's X, %d µs (less %v, the longest a decision took)", key, expiry, x, late)
	}
	return end, true
}
