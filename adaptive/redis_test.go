package adaptive_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// Every test closes what it made: no goroutine of sluice, gobreaker or a
// Redis client may outlive them.
func TestMain(m *testing.M) { redistest.Main(m, leakcheck.Check) }

// newRedisStore returns a redisstore on the server at addr, closed with
// the test.
func newRedisStore(t testing.TB, addr string) (*redisstore.Store, *redis.Client) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	store, err := redisstore.New(client, redisstore.Config{Prefix: "adaptive-test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		store.Close()
		client.Close()
	})
	return store, client
}

// TestSharedLimitParity runs random proposals and reads on one key
// against the Go transition (on a state it keeps itself) and against the
// Lua twin in a real redis-server, at explicit instants, and fails at the
// first decision they disagree on. Instants step forward, stay, and step
// back; the interval and TTL change now and then.
func TestSharedLimitParity(t *testing.T) {
	t.Parallel()
	store, _ := newRedisStore(t, redistest.Shared(t).Addr())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(17, 1))
	limits := []core.Limit{
		core.Per(10, 10*time.Second).WithBurst(1),      // 1 s intervals, 10 s TTL
		core.Per(2, 200*time.Millisecond).WithBurst(1), // 100 ms, 2 intervals
		core.Per(7, 7*time.Microsecond).WithBurst(1),   // 1 µs intervals
		core.Per(3, 3*time.Hour).WithBurst(1),
		core.Per(1000, 1000*time.Millisecond),
	}
	for _, l := range limits {
		if err := adaptive.SharedLimit.Validate(l); err != nil {
			t.Fatalf("%v: %v", l, err)
		}
	}
	var state core.State
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	limit := limits[0]
	var written, adopted, absent int
	for i := range 3000 {
		if rng.IntN(40) == 0 {
			limit = limits[rng.IntN(len(limits))]
		}
		interval := limit.PeriodMicros() / limit.Rate()
		switch rng.IntN(8) {
		case 0:
			now -= rng.Int64N(interval + 1)
		case 1:
		case 2:
			now += rng.Int64N(2*limit.PeriodMicros() + 1)
		default:
			now += rng.Int64N(interval + 2)
		}
		req := core.Request{Key: "parity", Cost: 1 + rng.Int64N(1_000_000), Terms: &core.Terms{Algorithm: adaptive.SharedLimit, Limit: limit, Now: time.UnixMicro(now)}}
		switch rng.IntN(6) {
		case 0:
			req.Op = core.OpPeek
		case 1:
			req.Cost = core.MaxUnits
		}
		want := core.Run(&state, &req, 0)
		got, err := store.Apply(ctx, req)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("op %d: %v cost %d at %d under %v:\nLua %+v\nGo  %+v", i, req.Op, req.Cost, now, limit, got, want)
		}
		switch {
		case got.Allowed:
			written++
		case got.Limit > 0:
			adopted++
		default:
			absent++
		}
	}
	t.Logf("3000 operations: %d written, %d adopted, %d without a value", written, adopted, absent)
	if written == 0 || adopted == 0 || absent == 0 {
		t.Errorf("the operations missed a case: %d written, %d adopted, %d absent", written, adopted, absent)
	}
}

// TestSharedLimitUnreadable stores values the Lua twin did not write under
// the shared key (another type, the wrong length, NaN, infinity,
// fractions, values out of range) and checks that a read finds no value
// and a proposal replaces it, as the Go transition does for a zero state.
func TestSharedLimitUnreadable(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	store, client := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	key := "adaptive-test:{unreadable}:adaptive-limit"
	pack := func(vals ...float64) string {
		var b []byte
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return string(b)
	}
	now := float64(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	cases := []struct {
		name string
		set  func() error
	}{
		{"list", func() error { return client.RPush(ctx, key, "x").Err() }},
		{"hash", func() error { return client.HSet(ctx, key, "a", "b").Err() }},
		{"short", func() error { return client.Set(ctx, key, "abc", 0).Err() }},
		{"long", func() error { return client.Set(ctx, key, pack(now, 5000, 1, 0, now+1e9, 0), 0).Err() }},
		{"NaN", func() error { return client.Set(ctx, key, pack(now, math.NaN(), 1, 0, now+1e9), 0).Err() }},
		{"+Inf", func() error { return client.Set(ctx, key, pack(now, math.Inf(1), 1, 0, now+1e9), 0).Err() }},
		{"-Inf time", func() error { return client.Set(ctx, key, pack(math.Inf(-1), 5000, 1, 0, now+1e9), 0).Err() }},
		{"fraction", func() error { return client.Set(ctx, key, pack(now, 5000.5, 1, 0, now+1e9), 0).Err() }},
		{"zero value", func() error { return client.Set(ctx, key, pack(now, 0, 1, 0, now+1e9), 0).Err() }},
		{"negative", func() error { return client.Set(ctx, key, pack(now, -5, 1, 0, now+1e9), 0).Err() }},
		{"huge", func() error { return client.Set(ctx, key, pack(now, 1e300, 1, 0, now+1e9), 0).Err() }},
		{"C set", func() error { return client.Set(ctx, key, pack(now, 5000, 1, 7, now+1e9), 0).Err() }},
	}
	limit := core.Per(10, 10*time.Second).WithBurst(1)
	at := time.UnixMicro(int64(now) + 1000)
	for _, c := range cases {
		client.Del(ctx, key)
		if err := c.set(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d, err := store.Apply(ctx, core.Request{Key: "unreadable", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: adaptive.SharedLimit, Limit: limit, Now: at}})
		if err != nil || d != (core.Decision{At: at.UTC()}) {
			t.Errorf("%s: read = %+v, %v; want no value", c.name, d, err)
		}
		d, err = store.Apply(ctx, core.Request{Key: "unreadable", Cost: 123000, Terms: &core.Terms{Algorithm: adaptive.SharedLimit, Limit: limit, Now: at}})
		want := core.Decision{Allowed: true, Limit: 123000, Remaining: 1, ResetAfter: 10 * time.Second, At: at.UTC()}
		if err != nil || d != want {
			t.Errorf("%s: proposal = %+v, %v; want %+v", c.name, d, err, want)
		}
		if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("%s: the written key has TTL %v", c.name, ttl)
		}
	}
}

// Environment of the fleet test's child processes.
const (
	envChild      = "ADAPTIVE_FLEET_CHILD"
	envRedis      = "ADAPTIVE_FLEET_REDIS"
	envDownstream = "ADAPTIVE_FLEET_DOWNSTREAM"
	envDeadline   = "ADAPTIVE_FLEET_DEADLINE"
	envLaw        = "ADAPTIVE_FLEET_LAW"
)

// liveDownstream is the simulated downstream on the wall clock, served over
// HTTP to the fleet's processes: each call asks for a latency, which the
// fluid queue computes (nobody sleeps), and is counted.
type liveDownstream struct {
	mu     sync.Mutex
	down   downstream
	counts map[int64]int // calls a second, by Unix second
}

func (d *liveDownstream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	now := time.Now()
	latency, ok := d.down.serve(now)
	d.counts[now.Unix()]++
	d.mu.Unlock()
	fmt.Fprintf(w, "%d %t", latency, ok)
}

// TestFleetRedis runs four OS processes (this test binary again, as
// children) sharing one real redis-server: each decides its share of the
// traffic with a limiter on redisstore through its own controller's
// Override, the controllers sharing their limit in the same Redis, and
// reports the latency of each call it makes to one simulated downstream
// of capacity 200/s that the parent serves. Once the traffic has stopped
// and the controllers have settled, the four limits are within 5 % of one
// another; the fleet never admits more than 10 % over 200/s, and not less
// than half of what the limit in force let through of the calls offered.
// How close below the capacity the limit settles is TestConvergence's, in
// virtual time: here a loaded machine stretches the downstream's latency,
// which the laws read as a smaller capacity, and starves the children of
// the calls they would send.
func TestFleetRedis(t *testing.T) {
	if os.Getenv(envChild) != "" {
		fleetChild(t)
		return
	}
	if testing.Short() {
		t.Skip("runs four processes for 14 seconds")
	}
	t.Parallel()
	srv := redistest.Start(t)
	for _, law := range []string{"aimd", "gradient"} {
		t.Run(law, func(t *testing.T) {
			live := &liveDownstream{down: downstream{capacity: simCapacity, base: 20 * time.Millisecond, timeout: time.Second}, counts: map[int64]int{}}
			web := httptest.NewServer(live)
			defer web.Close()
			deadline := time.Now().Add(14 * time.Second)
			var wg sync.WaitGroup
			outs := make([]bytes.Buffer, 4)
			errs := make([]error, 4)
			for i := range 4 {
				cmd := exec.Command(os.Args[0], "-test.run=^TestFleetRedis$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(),
					envChild+"="+strconv.Itoa(i),
					envRedis+"="+srv.Addr(),
					envDownstream+"="+web.URL,
					envDeadline+"="+strconv.FormatInt(deadline.UnixNano(), 10),
					envLaw+"="+law,
				)
				cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = cmd.Wait()
				}()
			}
			wg.Wait()
			var final []float64
			offered := map[int64]int{}    // the children's calls to their limiters, by Unix second
			limits := map[int64][]int64{} // the children's limits, by Unix second
			for i := range 4 {
				if errs[i] != nil {
					t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i].String())
				}
				sc := bufio.NewScanner(bytes.NewReader(outs[i].Bytes()))
				for sc.Scan() {
					line := strings.TrimSpace(sc.Text())
					if f, ok := strings.CutPrefix(line, "FLEET-LIMIT "); ok {
						v, err := strconv.ParseFloat(f, 64)
						if err != nil {
							t.Fatal(err)
						}
						final = append(final, v)
					}
					if f, ok := strings.CutPrefix(line, "FLEET-SECOND "); ok {
						var sec, limit int64
						var n int
						if _, err := fmt.Sscanf(f, "%d %d %d", &sec, &n, &limit); err != nil {
							t.Fatalf("child %d: %q: %v", i, line, err)
						}
						offered[sec] += n
						limits[sec] = append(limits[sec], limit)
					}
				}
			}
			if len(final) != 4 {
				t.Fatalf("got limits %v from the children, want 4", final)
			}
			lo, hi := slicesMin(final), slicesMax(final)
			live.mu.Lock()
			end := deadline.Unix()
			calls, asked, allowed := 0, 0, 0.0
			for s := end - 5; s < end-1; s++ { // the last four whole seconds
				calls += live.counts[s]
				asked += offered[s]
				var sum int64
				for _, l := range limits[s] {
					sum += l
				}
				allowed += float64(sum) / float64(max(len(limits[s]), 1))
			}
			live.mu.Unlock()
			rate, demand, limit := float64(calls)/4, float64(asked)/4, allowed/4
			t.Logf("%s: final limits %v; over its last 4 whole seconds the fleet offered %.1f calls/s under a limit of %.1f/s and admitted %.1f/s", law, final, demand, limit, rate)
			if (hi-lo)/hi > 0.05 {
				t.Errorf("final limits %v differ by more than 5%%", final)
			}
			// Never 10 % over the capacity; and at least half of what the
			// limit in force let through of the calls offered. How close
			// the limit comes to the capacity is TestConvergence's: on a
			// loaded machine the calls arrive in bursts, the downstream's
			// latency stretches, and the laws read a smaller capacity.
			if least := min(limit, demand) / 2; rate > simCapacity*1.10 || rate < least {
				t.Errorf("the fleet admitted %.1f/s of %.1f offered under a limit of %.1f, want at most 10%% over %v and at least %.1f", rate, demand, limit, simCapacity, least)
				for i := range outs {
					t.Logf("child %d:\n%s", i, outs[i].String())
				}
			}
		})
	}
}

func slicesMin(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// fleetChild is one process of TestFleetRedis: it offers 150 calls a
// second until the deadline, decides each with a limiter on redisstore
// through its controller, makes the admitted calls to the downstream and
// reports them, and prints its final limit.
func fleetChild(t *testing.T) {
	deadlineNs, err := strconv.ParseInt(os.Getenv(envDeadline), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	store, _ := newRedisStore(t, os.Getenv(envRedis))
	var law adaptive.Law
	for _, l := range simLaws() {
		if l.name == os.Getenv(envLaw) {
			law = l.law
		}
	}
	initial := core.PerSecond(20).WithBurst(2)
	ctrl, err := adaptive.New(initial, law, adaptive.WithInterval(simInterval), adaptive.WithBounds(1, 10000), adaptive.WithShared(store, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(store, policy.WithOverride(ctrl.Override))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewLimiter(p, algorithms.TokenBucket, initial)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, deadlineNs))
	defer cancel()
	// The controller runs on for settle after the traffic stops, so that
	// the limit each child reports is the fleet's last: without it, a
	// child the loaded machine delayed by an interval at the end reported
	// the step before (limits [196 177 196 196]). An interval without
	// calls proposes nothing and takes the fleet's value.
	const settle = 5 * simInterval
	runCtx, stopRun := context.WithDeadline(context.Background(), time.Unix(0, deadlineNs).Add(settle))
	defer stopRun()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(runCtx)
	}()
	client := &http.Client{Timeout: time.Second}
	url := os.Getenv(envDownstream)
	tick := time.NewTicker(time.Second / 150)
	defer tick.Stop()
	// Calls to the limiter, and the limit at the last, by Unix second: 15
	// or so.
	offered, limits := map[int64]int{}, map[int64]int64{}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		sec := time.Now().Unix()
		offered[sec]++
		limits[sec] = ctrl.Limit().Rate()
		d, err := lim.Allow(ctx, "downstream")
		if err != nil || !d.Allowed {
			continue
		}
		resp, err := client.Get(url)
		if err != nil {
			continue
		}
		var ns int64
		var ok bool
		_, err = fmt.Fscanf(resp.Body, "%d %t", &ns, &ok)
		resp.Body.Close()
		if err != nil {
			t.Errorf("downstream reply: %v", err)
			continue
		}
		o := adaptive.OK
		if !ok {
			o = adaptive.Failed
		}
		if err := ctrl.Report(time.Duration(ns), o); err != nil {
			t.Error(err)
		}
	}
	<-runCtx.Done()
	ctrl.Close()
	<-done
	fmt.Printf("FLEET-LIMIT %d\n", ctrl.Limit().Rate())
	for sec, n := range offered {
		fmt.Printf("FLEET-SECOND %d %d %d\n", sec, n, limits[sec])
	}
	st := ctrl.Stats()
	fmt.Printf("child stats: %+v\n", st)
	// An interval is decided locally when its shared call fails. On a
	// healthy Redis that is the loaded test machine holding a call past
	// its deadline, an interval on the wall clock: a clean-clone CI run
	// saw it once in 144 intervals, a machine at load 16 three times in
	// 127. A fleet whose sharing is broken decides every interval
	// locally; this one must share most of them.
	switch {
	case st.Local > st.Intervals/5:
		t.Errorf("%d of %d intervals decided locally on a healthy Redis, want at most one in 5", st.Local, st.Intervals)
	case st.Local > 0:
		t.Logf("%d of %d intervals decided locally on a healthy Redis (the machine held a call past its deadline)", st.Local, st.Intervals)
	}
}

// TestSharedOutage runs a controller whose shared store is redisstore
// behind policy.NewBreaker (fail-open), kills the redis-server, and checks
// that the controller keeps its last limit and goes on adapting locally,
// then takes the fleet's value again once Redis is back.
func TestSharedOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	store, _ := newRedisStore(t, srv.Addr())
	breaker, err := policy.NewBreaker(store, policy.WithMode(policy.FailOpen), policy.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer breaker.Close() // its stall meter's goroutine ends with it
	var changes []adaptive.Change
	law := adaptive.AIMD(adaptive.LatencyAbove(0.99, 40*time.Millisecond), adaptive.Increase(10))
	ctrl, err := adaptive.New(core.PerSecond(100), law, adaptive.WithInterval(100*time.Millisecond), adaptive.WithShared(breaker, "outage"),
		adaptive.WithOnChange(func(c adaptive.Change) { changes = append(changes, c) }))
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	ctx := context.Background()
	healthy := func() {
		for range 20 {
			ctrl.Report(10*time.Millisecond, adaptive.OK)
		}
	}
	healthy()
	if err := ctrl.Update(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ctrl.Limit().Rate(); got != 110 {
		t.Fatalf("limit %d after a healthy interval, want 110", got)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// While Redis is down each update fails (or the open breaker answers
	// fail-open); either way the controller goes on alone.
	for i := range 5 {
		healthy()
		err := ctrl.Update(ctx)
		want := int64(110 + 10*(i+1))
		if got := ctrl.Limit().Rate(); got != want {
			t.Fatalf("outage update %d (err %v): limit %d, want %d", i, err, got, want)
		}
	}
	if ctrl.Stats().Local != 5 {
		t.Errorf("Stats().Local = %d, want 5", ctrl.Stats().Local)
	}
	if last := changes[len(changes)-1]; !last.Local || last.Reason != adaptive.ReasonHealthy {
		t.Errorf("last change %+v, want a local healthy change", last)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Another instance of the fleet writes 90/s meanwhile, as it would
	// each interval; once the breaker lets calls through again the
	// controller adopts it.
	other, _ := newRedisStore(t, srv.Addr())
	deadline := time.Now().Add(5 * time.Second)
	for ctrl.Limit().Rate() != 90 {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d 5s after Redis came back, want the fleet's 90; stats %+v", ctrl.Limit().Rate(), ctrl.Stats())
		}
		if _, err := other.Apply(ctx, core.Request{Key: "outage", Cost: 90_000, Terms: &core.Terms{Algorithm: adaptive.SharedLimit, Limit: core.Per(10, time.Second).WithBurst(1)}}); err != nil {
			t.Logf("the other instance: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the breaker's open timeout runs on the wall clock
		ctrl.Update(ctx)                  // no samples: a read
	}
	if last := changes[len(changes)-1]; last.Local || last.Reason != adaptive.ReasonFleet {
		t.Errorf("last change %+v, want the fleet's", last)
	}
}
