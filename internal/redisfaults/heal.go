package redisfaults

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// Corruption is a way another client can overwrite a sluice key.
type Corruption struct {
	Name string
	// Apply overwrites key on srv; it may leave the key without a TTL,
	// as another client's write does.
	Apply func(t testing.TB, srv *redistest.Server, key string)
}

// Corruptions are the values [CheckHealing] writes over a key: other
// types (WRONGTYPE for GET), a string of the wrong length, a state of the
// right length whose numbers are +Inf, NaN or beyond 2^53, and, for the
// algorithms with entries, a state whose newest entry is +Inf.
func Corruptions() []Corruption {
	do := func(args ...string) func(testing.TB, *redistest.Server, string) {
		return func(t testing.TB, srv *redistest.Server, key string) {
			t.Helper()
			if _, err := srv.Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Do(append([]string{args[0], key}, args[1:]...)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	packed := func(vs ...float64) string {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return string(b)
	}
	inf, nan := math.Inf(1), math.NaN()
	return []Corruption{
		{"list", do("LPUSH", "x")},
		{"hash", do("HSET", "f", "v")},
		{"string", do("SET", "hello")},
		{"empty", do("SET", "")},
		{"inf", do("SET", packed(inf, inf, inf, inf, inf, inf))},
		{"nan", do("SET", packed(nan, 0, 0, 0, nan, 0))},
		{"huge", do("SET", packed(1, 1e300, 0, 0, 2, 0))},
		{"fraction", do("SET", packed(1.5, 0, 0, 0, 4e15, 0))},
		// A key's expiry (the sixth number) before the epoch.
		{"expiry", do("SET", packed(1, 0, 0, 0, 2, -1000))},
		// The head of an older format: five numbers.
		{"five", do("SET", packed(1, 0, 0, 0, 2))},
		// A well-formed head whose E is far off, then an entry of +Inf.
		{"entry", do("SET", packed(1, 1, 0, 0, 4e15, 0)+packed(inf, 1))},
	}
}

// CheckHealing overwrites keys of every algorithm on srv with each of
// [Corruptions] and checks that store, a Redis store on srv whose keys
// keys names, decides on them as on a key never charged: no error,
// Healed set, the decision a fresh key gets, and afterwards a key with a
// TTL (after a charge) or no key (after a peek or a denial). Then it
// checks the same for a batch of two rules, admitted and denied.
func CheckHealing(t *testing.T, srv *redistest.Server, store core.Store, keys Keyed) {
	ctx := context.Background()
	limit := core.PerMinute(10)
	for _, alg := range []core.Algorithm{
		algorithms.TokenBucket, algorithms.GCRA, algorithms.FixedWindow,
		algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog, algorithms.Concurrency,
	} {
		for _, c := range Corruptions() {
			t.Run(alg.Name()+"/"+c.Name, func(t *testing.T) {
				key := "heal-" + alg.Name() + "-" + c.Name
				rkey := keys.Key(key, alg)
				charge := core.Request{Key: key, Cost: 3, Terms: &core.Terms{Algorithm: alg, Limit: limit}}
				fresh := charge
				fresh.Key = "fresh-" + key

				c.Apply(t, srv, rkey)
				d, err := store.Apply(ctx, charge)
				want, ferr := store.Apply(ctx, fresh)
				if err != nil || ferr != nil {
					t.Fatalf("charge on the corrupted key: %+v, %v (fresh key: %v); want a decision", d, err, ferr)
				}
				if !d.Healed || !d.Allowed || d.Remaining != want.Remaining || d.Limit != want.Limit {
					t.Errorf("charge on the corrupted key = %+v; want healed and as on a fresh key: %+v", d, want)
				}
				if ttl := pttl(t, srv, rkey); ttl <= 0 {
					t.Errorf("after the charge the key's PTTL is %d; want a TTL", ttl)
				}
				if d, err := store.Apply(ctx, charge); err != nil || d.Healed || !d.Allowed || d.Remaining != want.Remaining-3 {
					t.Errorf("the next charge = %+v, %v; want allowed, not healed, %d remaining", d, err, want.Remaining-3)
				}

				// A peek and a denial write nothing: the value goes.
				for _, r := range []core.Request{
					{Key: key, Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: alg, Limit: limit}},
					{Key: key, Cost: 11, Terms: &core.Terms{Algorithm: alg, Limit: limit}},
				} {
					c.Apply(t, srv, rkey)
					d, err := store.Apply(ctx, r)
					f := r
					f.Key = "fresh-" + key + "-" + r.Op.String()
					want, ferr := store.Apply(ctx, f)
					if err != nil || ferr != nil || !d.Healed || d.Allowed != want.Allowed || d.Remaining != want.Remaining {
						t.Errorf("%v of cost %d on the corrupted key = %+v, %v; want healed and as on a fresh key: %+v, %v", r.Op, r.Cost, d, err, want, ferr)
					}
					if ttl := pttl(t, srv, rkey); ttl != -2 {
						t.Errorf("after a %v of cost %d the key's PTTL is %d; want no key (-2)", r.Op, r.Cost, ttl)
					}
				}
			})
		}
	}

	t.Run("batch", func(t *testing.T) {
		corrupt := Corruptions()[0]
		reqs := []core.Request{
			{Key: "heal-batch", Cost: 2, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}},
			{Key: "heal-batch", Cost: 2, Terms: &core.Terms{Algorithm: algorithms.SlidingWindowLog, Limit: limit}},
		}
		rkeys := []string{keys.Key("heal-batch", reqs[0].Algorithm), keys.Key("heal-batch", reqs[1].Algorithm)}
		out := make([]core.Decision, 2)
		for _, k := range rkeys {
			corrupt.Apply(t, srv, k)
		}
		if err := store.ApplyAll(ctx, reqs, out); err != nil {
			t.Fatalf("batch on corrupted keys: %v", err)
		}
		for i, d := range out {
			if !d.Healed || !d.Allowed || d.Remaining != 8 {
				t.Errorf("batch decision %d = %+v; want healed, allowed, 8 remaining", i, d)
			}
			if ttl := pttl(t, srv, rkeys[i]); ttl <= 0 {
				t.Errorf("after the batch key %d's PTTL is %d; want a TTL", i, ttl)
			}
		}
		// A denied batch writes nothing: both values go.
		for _, k := range rkeys {
			corrupt.Apply(t, srv, k)
		}
		reqs[1].Cost = 11
		if err := store.ApplyAll(ctx, reqs, out); err != nil {
			t.Fatalf("denied batch on corrupted keys: %v", err)
		}
		if !out[0].Healed || !out[1].Healed || out[1].Allowed {
			t.Errorf("denied batch = %+v; want both healed, the second denied", out)
		}
		for i, k := range rkeys {
			if ttl := pttl(t, srv, k); ttl != -2 {
				t.Errorf("after the denied batch key %d's PTTL is %d; want no key (-2)", i, ttl)
			}
		}
	})
}

func pttl(t testing.TB, srv *redistest.Server, key string) int64 {
	t.Helper()
	r, err := srv.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
