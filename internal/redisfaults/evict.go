package redisfaults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// The eviction scenario: a server whose memory is far too small
// for the keys written to it, a hot key decided from many goroutines, and
// a flood of distinct keys that forces the server to evict.
const (
	evictHot        = 64 // goroutines deciding for the hot key
	evictHotPause   = 2 * time.Millisecond
	evictFlood      = 100_000 // distinct keys, one decision each
	evictFloodBatch = 50      // keys per ApplyAll of the flood
	evictFlooders   = 8       // goroutines flooding
	evictLead       = 300 * time.Millisecond
)

// Eviction is a scenario of [EvictUnderLoad]: a server's memory and
// eviction policy, and the pace of the flood.
type Eviction struct {
	Name   string
	Policy string // maxmemory-policy
	Memory string // maxmemory, such as "2mb"
	Rate   int    // the flood's keys a second; 0 for as fast as the store decides
	// KeepsHot says that the policy must never evict the hot key: 0
	// losses, 0 over-grant. Otherwise the bound is one burst per loss.
	KeepsHot bool
}

// Evictions returns the scenarios every Redis store runs:
//
//   - lru: allkeys-lru, 12 MB, the flood at 15,000 keys a second: a key
//     stays about 4 s before it is evicted, older than the hot key by
//     more than the LRU clock's second, so the hot key, used all the
//     time, is never the least recently used and must never be evicted;
//   - lru-churn: allkeys-lru, 2 MB, the flood as fast as it goes: the
//     whole memory turns over within the LRU clock's second, every key is
//     as recent as the hot key, and Redis evicts it like any other; each
//     loss admits at most one extra burst;
//   - volatile-ttl: 2 MB, as fast as it goes: the flood's keys expire
//     after the hot key's state, so the hot key is evicted first whenever
//     Redis samples it; each loss admits at most one extra burst, and the
//     scenario must see losses.
func Evictions() []Eviction {
	return []Eviction{
		{Name: "lru", Policy: "allkeys-lru", Memory: "12mb", Rate: 15_000, KeepsHot: true},
		{Name: "lru-churn", Policy: "allkeys-lru", Memory: "2mb"},
		{Name: "volatile-ttl", Policy: "volatile-ttl", Memory: "2mb"},
	}
}

// evictHotLimit is the hot key's limit: 100 a second, burst 100. Its
// state, always near empty under load, lives 2 s (1 s to refill, and the
// scripts' margin of 1 s).
var evictHotLimit = core.PerSecond(100)

// evictFloodLimit is the flood's limit: 10 a minute. A key charged once
// lives 7 s (6 s to refill a token, and the margin), longer than the hot
// key's state, so that volatile-ttl, which evicts the keys nearest their
// expiry first, picks the hot key whenever it samples it: the worst case
// for the bound.
var evictFloodLimit = core.PerMinute(10)

// EvictResult is what [EvictUnderLoad] saw.
type EvictResult struct {
	Eviction                   // the scenario
	Flooded      int64         // distinct keys the flood charged
	Flooding     time.Duration // how long the flood took
	Evicted      int64         // the server's evicted_keys
	Elapsed      time.Duration // from the hot load's start to its last admitted reply
	HotDecisions int64         // decisions for the hot key
	HotAdmitted  int64         // of those, admitted
	Bound        int64         // burst + rate × Elapsed: what a bucket that kept its state admits
	OverGrant    int64         // HotAdmitted − Bound, or 0
	Missing      int           // decisions that found the hot key's state gone: a full bucket it could not have refilled
}

// String returns the line a test logs.
func (r EvictResult) String() string {
	return fmt.Sprintf("%s (%s, %s, flood at %s): %d keys flooded in %v, %d evicted; hot key: %d decisions, %d admitted over %v (bucket bound %d), over-grant %d, state found missing %d times (bound %d × %d = %d)",
		r.Name, r.Policy, r.Memory, r.pace(), r.Flooded, r.Flooding.Round(time.Millisecond), r.Evicted, r.HotDecisions, r.HotAdmitted, r.Elapsed.Round(time.Millisecond),
		r.Bound, r.OverGrant, r.Missing, evictHotLimit.Burst(), r.Missing, evictHotLimit.Burst()*int64(r.Missing))
}

// hotDecision is one decision for the hot key.
type hotDecision struct {
	at, end   time.Time // when its call began and returned
	allowed   bool
	remaining int64
}

// EvictUnderLoad sets srv's maxmemory and policy as e says, then decides
// for a hot key, a token bucket of 100 a second and burst 100, from 64
// goroutines pausing 2 ms between calls, while 8 goroutines charge 100,000
// distinct keys of 10 a minute through store, once each, in batches of 50
// (ApplyAll) and at e's pace, which makes the server evict. No call may
// fail.
//
// It counts the hot key's admissions against a bucket that kept its state
// (burst + rate × elapsed) and the decisions that found the state gone: an
// admission that leaves burst − 1 while the decision before it left too
// little for the time between them to refill the bucket. Each loss admits
// at most one extra burst (docs/redis.md, "What Redis cannot promise"), so
// the over-grant must stay within burst × losses; where e.KeepsHot, there
// must be no loss and no over-grant. The flood must make the server
// evict. srv is a server of the test's own, as CONFIG SET reaches every
// client.
func EvictUnderLoad(t testing.TB, srv *redistest.Server, store core.Store, e Eviction) EvictResult {
	t.Helper()
	for _, kv := range [][2]string{{"maxmemory-policy", e.Policy}, {"maxmemory", e.Memory}} {
		if _, err := srv.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
		}
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hot := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: evictHotLimit}}
	// Load the scripts and open connections before the clock starts.
	if _, err := store.Apply(ctx, core.Request{Key: "warm", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: evictHotLimit}}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}

	var (
		failed   atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		failed.Add(1)
		errOnce.Do(func() { firstErr = err })
	}
	r := EvictResult{Eviction: e}
	stop := make(chan struct{})
	var hotWG sync.WaitGroup
	decided := make([][]hotDecision, evictHot)
	start := time.Now()
	for g := range evictHot {
		hotWG.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				at := time.Now()
				d, err := store.Apply(ctx, hot)
				if err != nil {
					fail(fmt.Errorf("hot key: %w", err))
					return
				}
				decided[g] = append(decided[g], hotDecision{at: at, end: time.Now(), allowed: d.Allowed, remaining: d.Remaining})
				time.Sleep(evictHotPause)
			}
		})
	}

	// The flood starts once the hot key is at its limit.
	time.Sleep(evictLead)
	var next, flooded atomic.Int64
	var floodWG sync.WaitGroup
	floodStart := time.Now()
	for range evictFlooders {
		floodWG.Go(func() {
			reqs := make([]core.Request, evictFloodBatch)
			out := make([]core.Decision, evictFloodBatch)
			for failed.Load() == 0 {
				first := next.Add(evictFloodBatch) - evictFloodBatch
				if first >= evictFlood {
					return
				}
				if e.Rate > 0 {
					time.Sleep(time.Until(floodStart.Add(time.Duration(first) * time.Second / time.Duration(e.Rate))))
				}
				for i := range reqs {
					reqs[i] = core.Request{Key: "flood" + strconv.FormatInt(first+int64(i), 10), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: evictFloodLimit}}
				}
				if err := store.ApplyAll(ctx, reqs, out); err != nil {
					fail(fmt.Errorf("flood: %w", err))
					return
				}
				for i, d := range out {
					if !d.Allowed {
						fail(fmt.Errorf("flood: %s, charged once, denied: %+v", reqs[i].Key, d))
						return
					}
				}
				flooded.Add(evictFloodBatch)
			}
		})
	}
	floodWG.Wait()
	r.Flooding = time.Since(floodStart)
	time.Sleep(evictLead)
	close(stop)
	hotWG.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed, want none; the first: %v", n, firstErr)
	}

	var all []hotDecision
	for _, d := range decided {
		all = append(all, d...)
	}
	var last time.Time
	for _, d := range all {
		if d.allowed {
			r.HotAdmitted++
			if d.end.After(last) {
				last = d.end
			}
		}
	}
	r.Flooded = flooded.Load()
	r.HotDecisions = int64(len(all))
	r.Elapsed = last.Sub(start)
	r.Bound = evictHotLimit.Burst() + int64(float64(evictHotLimit.Rate())*r.Elapsed.Seconds()/evictHotLimit.Period().Seconds())
	r.OverGrant = max(r.HotAdmitted-r.Bound, 0)
	r.Missing = missing(all, evictHotLimit, hot.Cost)
	r.Evicted = infoInt(Info(t, srv, "stats"), "evicted_keys")

	if r.Flooded != evictFlood {
		t.Errorf("the flood charged %d keys, want %d", r.Flooded, evictFlood)
	}
	if r.Evicted == 0 {
		t.Errorf("the server evicted no key: the flood did not fill its %s", e.Memory)
	}
	if r.HotAdmitted < r.Bound/2 {
		t.Errorf("the hot key admitted %d of the %d its bucket allows: the load did not keep it at its limit", r.HotAdmitted, r.Bound)
	}
	burst := evictHotLimit.Burst()
	switch {
	case e.KeepsHot && (r.Missing != 0 || r.OverGrant != 0):
		t.Errorf("%s evicted the hot key, which was in use all the time: its state was found missing %d times, over-grant %d; want 0 and 0",
			e.Policy, r.Missing, r.OverGrant)
	case r.OverGrant > burst*int64(r.Missing):
		t.Errorf("the hot key admitted %d beyond its bucket (%d of at most %d), more than one burst (%d) for each of the %d times its state was lost",
			r.OverGrant, r.HotAdmitted, r.Bound, burst, r.Missing)
	}
	if e.Policy == "volatile-ttl" && r.Missing == 0 {
		t.Errorf("volatile-ttl never evicted the hot key, whose state expires first: the scenario did not test the bound")
	}
	return r
}

// infoInt returns the integer of the line "name:N" of an INFO section, or
// 0 if there is no such line.
func infoInt(info, name string) int64 {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// missing counts the decisions in ds that found the state of a token
// bucket of l gone: an admission of cost that left burst − cost (a full
// bucket before it) while the latest decision known to precede it (its
// call returned before this one's began) left too little for the time
// between them to refill the bucket. A bucket that kept its state holds
// less than what that decision left and one more token, plus the refill
// since that call began; a full bucket beyond that was a missing key's. A refill the load's pauses
// allow is never counted.
func missing(ds []hotDecision, l core.Limit, cost int64) int {
	byStart := slices.Clone(ds)
	slices.SortFunc(byStart, func(a, b hotDecision) int { return a.at.Compare(b.at) })
	byEnd := slices.Clone(ds)
	slices.SortFunc(byEnd, func(a, b hotDecision) int { return a.end.Compare(b.end) })
	burst := l.Burst()
	perSecond := float64(l.Rate()) / l.Period().Seconds()
	n, j := 0, 0
	var before *hotDecision // the latest decision to return before d began
	for _, d := range byStart {
		for j < len(byEnd) && byEnd[j].end.Before(d.at) {
			before = &byEnd[j]
			j++
		}
		if !d.allowed || d.remaining != burst-cost || before == nil {
			continue
		}
		// Remaining is whole tokens: the bucket held less than one more.
		refill := perSecond * d.end.Sub(before.at).Seconds()
		if float64(before.remaining+1)+refill <= float64(burst) {
			n++
		}
	}
	return n
}

// pace describes the flood's rate.
func (e Eviction) pace() string {
	if e.Rate == 0 {
		return "full speed"
	}
	return strconv.Itoa(e.Rate) + " keys/s"
}
