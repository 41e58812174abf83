package redisengine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("k", 200)
	for _, tc := range []struct{ prefix, key, alg, want string }{
		{"sluice:", "user:42", "gcra", "sluice:{user:42}:gcra"},
		{"", "a", "token-bucket", "{a}:token-bucket"},
		{"p:", "{same}x1", "gcra", "p:{%7Bsame%7Dx1}:gcra"},
		{"p:", "}", "gcra", "p:{%7D}:gcra"},
		{"p:", "100%", "gcra", "p:{100%25}:gcra"},
		{"p:", "%7B", "gcra", "p:{%257B}:gcra"},
		{"p:", strings.Repeat("x", 128), "gcra", "p:{" + strings.Repeat("x", 128) + "}:gcra"},
		{"p:", strings.Repeat("{", 43), "gcra", "p:{%he2a48ddb548587d7f6bcedfece11859afb6243420e650206c4ae58f53b2c7388}:gcra"},
		{"p:", long, "gcra", "p:{%h" + sha(long) + "}:gcra"},
	} {
		if got := Key(tc.prefix, tc.key, tc.alg); got != tc.want {
			t.Errorf("Key(%q, %q, %q) = %q, want %q", tc.prefix, tc.key, tc.alg, got, tc.want)
		}
	}
}

// TestKeyInjective checks that distinct keys, rich in the escaped bytes,
// never share a Redis key, and that every tag is free of braces.
func TestKeyInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("{}%7BDh25ab")
	seen := map[string]string{}
	for range 200_000 {
		k := make([]byte, 1+rng.IntN(8))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		key := string(k)
		if rng.IntN(20) == 0 {
			key = strings.Repeat(key, 40) // hashed
		}
		got := Key("p:", key, "gcra")
		tag := got[len("p:{") : len(got)-len("}:gcra")]
		if strings.ContainsAny(tag, "{}") {
			t.Fatalf("Key(%q) = %q: the tag holds a brace", key, got)
		}
		if len(got) > len("p:{}:gcra")+maxTag {
			t.Fatalf("Key(%q) is %d bytes", key, len(got))
		}
		if other, ok := seen[got]; ok && other != key {
			t.Fatalf("keys %q and %q share %q", other, key, got)
		}
		seen[got] = key
	}
}

func TestPrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", DefaultPrefix},
		{"sluice:", "sluice:"},
		{"app:limits:", "app:limits:"},
		{strings.Repeat("p", MaxPrefixLen), strings.Repeat("p", MaxPrefixLen)},
	} {
		if got, err := Prefix(tc.in); err != nil || got != tc.want {
			t.Errorf("Prefix(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, p := range []string{"{app}:", "a}", "a{", strings.Repeat("p", MaxPrefixLen+1)} {
		if _, err := Prefix(p); err == nil {
			t.Errorf("Prefix(%q) = nil error, want one", p)
		}
	}
}

func TestAppendArgs(t *testing.T) {
	l := core.PerDay(1_000_000).WithBurst(52_000_000_000)
	now := time.UnixMicro(core.MaxUnits - 1)
	for _, tc := range []struct {
		req  core.Request
		want [10]int64
	}{
		{core.Request{Cost: 3, Op: core.OpPeek, Terms: &core.Terms{Limit: l, Now: now}}, [10]int64{core.MaxUnits - 1, 3, 1, 1_000_000, 86_400_000_000, 52_000_000_000, 86_400, 1, 0, 0}},
		{core.Request{Cost: core.MaxUnits, Terms: &core.Terms{Limit: core.PerSecond(3)}}, [10]int64{-1, core.MaxUnits, 0, 3, 1_000_000, 3, 1_000_000, 3, 0, 0}},
		{core.Request{Cost: 2, Op: core.OpRefund, Terms: &core.Terms{Limit: core.PerSecond(3)}}, [10]int64{-1, 2, 2, 3, 1_000_000, 3, 1_000_000, 3, 0, 0}},
		{core.Request{Cost: 1, Lease: core.MaxUnits, Terms: &core.Terms{Limit: core.PerSecond(3)}}, [10]int64{-1, 1, 0, 3, 1_000_000, 3, 1_000_000, 3, 0, core.MaxUnits}},
		// A reservation's debt is MaxWait × units per µs, at most 2^52
		// less the capacity.
		{core.Request{Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Limit: core.PerSecond(3), MaxWait: 1500 * time.Millisecond}}, [10]int64{-1, 1, 0, 3, 1_000_000, 3, 1_000_000, 3, 4_500_000, 0}},
		{core.Request{Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Limit: core.PerSecond(3), MaxWait: math.MaxInt64}}, [10]int64{-1, 1, 0, 3, 1_000_000, 3, 1_000_000, 3, core.MaxUnits - 3_000_000, 0}},
		// A partial admission is operation 3, which the prelude decides
		// in two passes.
		{core.Request{Cost: 7, Op: core.OpAtMost, Terms: &core.Terms{Limit: core.PerSecond(3)}}, [10]int64{-1, 7, 3, 3, 1_000_000, 3, 1_000_000, 3, 0, 0}},
	} {
		b := AppendArgs([]byte("x"), &tc.req)
		if len(b) != 1+ArgsLen {
			t.Fatalf("AppendArgs appended %d bytes, want %d", len(b)-1, ArgsLen)
		}
		for i, want := range tc.want {
			f := math.Float64frombits(binary.LittleEndian.Uint64(b[1+8*i:]))
			if int64(f) != want || float64(int64(f)) != f {
				t.Errorf("%+v: double %d is %v, want %d", tc.req, i, f, want)
			}
		}
	}
}

func TestDecision(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.UnixMicro()
	good := []struct {
		reply [ReplyLen]int64
		want  core.Decision
	}{
		{[...]int64{1, 10, 9, 0, 100_000, 0, at, 9, 1, 0}, core.Decision{Allowed: true, Limit: 10, Remaining: 9, Level: core.Level{Units: 9, PerToken: 1}, ResetAfter: 100 * time.Millisecond, At: t0}},
		{[...]int64{0, 10, 0, 7, 1_000_000, 0, at, -3, 7, 0}, core.Decision{Limit: 10, Level: core.Level{Units: -3, PerToken: 7}, RetryAfter: 7 * time.Microsecond, ResetAfter: time.Second, At: t0}},
		{[...]int64{0, 10, 3, -1, 5, 0, 0, 0, 0, 0}, core.Decision{Limit: 10, Remaining: 3, RetryAfter: core.RetryNever, ResetAfter: 5 * time.Microsecond, At: time.Unix(0, 0).UTC()}},
		{[...]int64{1, 10, 0, 0, 3_000_000, 250_000, at + 1, -5, 1, 0}, core.Decision{Allowed: true, Limit: 10, Level: core.Level{Units: -5, PerToken: 1}, ResetAfter: 3 * time.Second, Delay: 250 * time.Millisecond, At: t0.Add(time.Microsecond)}},
		{[...]int64{3, 10, 9, 0, 100_000, 0, at, 9, 1, 0}, core.Decision{Allowed: true, Limit: 10, Remaining: 9, Level: core.Level{Units: 9, PerToken: 1}, ResetAfter: 100 * time.Millisecond, At: t0, Healed: true}},
		{[...]int64{2, 10, 10, -1, 0, 0, at, 10, 1, 0}, core.Decision{Limit: 10, Remaining: 10, Level: core.Level{Units: 10, PerToken: 1}, RetryAfter: core.RetryNever, At: t0, Healed: true}},
		{[...]int64{1, 10, 2, 0, 800_000, 0, at, 2, 1, 8}, core.Decision{Allowed: true, Admitted: 8, Limit: 10, Remaining: 2, Level: core.Level{Units: 2, PerToken: 1}, ResetAfter: 800 * time.Millisecond, At: t0}},
	}
	for _, tc := range good {
		if got, err := Decision(tc.reply); err != nil || got != tc.want {
			t.Errorf("Decision(%v) = %+v, %v; want %+v", tc.reply, got, err, tc.want)
		}
	}
	for _, reply := range [][ReplyLen]int64{
		{4, 10, 9, 0, 0, 0, at, 9, 1, 0},
		{2, 10, 9, 0, 0, 5, at, 9, 1, 0},
		{3, 10, 9, 5, 0, 0, at, 9, 1, 0},
		{-1, 10, 9, 0, 0, 0, at, 9, 1, 0},
		{1, -10, 9, 0, 0, 0, at, 9, 1, 0},
		{1, 10, -9, 0, 0, 0, at, 9, 1, 0},
		{0, 10, 9, -2, 0, 0, at, 9, 1, 0},
		{0, 10, 9, 0, -1, 0, at, 9, 1, 0},
		{1, 10, 9, 5, 0, 0, at, 9, 1, 0},
		{0, 10, 9, math.MaxInt64, 0, 0, at, 9, 1, 0},
		{0, 10, 9, 0, math.MaxInt64, 0, at, 9, 1, 0},
		{1, math.MaxInt64, 9, 0, 0, 0, at, 9, 1, 0},
		{1, 10, 9, 0, 0, -1, at, 9, 1, 0},
		{1, 10, 9, 0, 0, math.MaxInt64, at, 9, 1, 0},
		{0, 10, 9, 5, 5, 5, at, 9, 1, 0},
		{1, 10, 9, 0, 0, 0, -1, 9, 1, 0},                 // an instant before 1970
		{1, 10, 9, 0, 0, 0, core.MaxExact + 1, 9, 1, 0},  // or past 2^53 µs
		{1, 10, 9, 0, 0, 0, at, 9, -1, 0},                // a negative unit
		{1, 10, 9, 0, 0, 0, at, 9, 0, 0},                 // a level without its unit
		{1, 10, 9, 0, 0, 0, at, core.MaxExact + 1, 1, 0}, // a level past 2^53
		{1, 10, 9, 0, 0, 0, at, -core.MaxExact - 1, 1, 0},
		{0, 10, 9, 5, 0, 0, at, 9, 1, 3}, // admitted by a denial
		{1, 10, 9, 0, 0, 0, at, 9, 1, -1},
	} {
		if _, err := Decision(reply); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decision(%v) = %v, want ErrMalformed", reply, err)
		}
	}
}

func TestScript(t *testing.T) {
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: plain{algorithms.TokenBucket}, Limit: core.PerSecond(1)}}
	if _, err := Script(&req); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Script(an algorithm with no twin) = %v, want ErrUnsupported", err)
	}
	req.Limit = core.Inf
	if s, err := Script(&req); s != nil || err != nil {
		t.Errorf("Script(a request under Inf) = %v, %v; want nil, nil", s, err)
	}
	req.Key = ""
	if _, err := Script(&req); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Script(an empty key) = %v, want ErrInvalidKey", err)
	}
	req.Key, req.Algorithm, req.Limit = "k", algorithms.GCRA, core.PerSecond(1)
	if s, err := Script(&req); err != nil || s != algorithms.GCRA.(algorithms.Scripted).Script() {
		t.Errorf("Script(GCRA) = %v, %v; want GCRA's twin", s, err)
	}
}

// plain is an algorithm without a Lua twin.
type plain struct{ core.Algorithm }

func (plain) Name() string { return "plain" }

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// pack packs numbers as a script's reply does.
func pack(nums ...float64) string {
	var b []byte
	for _, f := range nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

func TestPlace(t *testing.T) {
	out := make([]core.Decision, 3)
	reply := pack(1, 10, 9, 0, 100, 0, 0, 9, 1, 0, 0, 5, 0, 7, 9, 0, 3, 0, 1, 0)
	if err := Place(reply, []int{0, 2}, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[0].Remaining != 9 || out[2].Allowed || out[2].RetryAfter != 7*time.Microsecond || out[2].At != time.UnixMicro(3).UTC() || out[1] != (core.Decision{}) {
		t.Errorf("Place put %+v", out)
	}
	for _, bad := range []string{
		reply[:ReplySize], // one decision's for two
		reply + "x",       // a byte too many
		reply[:ReplySize] + pack(5, 1, 1, 0, 0, 0, 0, 0, 0, 0),   // flags 5
		reply[:ReplySize] + pack(0, 1, 1, 0.5, 0, 0, 0, 0, 0, 0), // not an integer
		reply[:ReplySize] + pack(0, 1, 1, math.NaN(), 0, 0, 0, 0, 0, 0),
		reply[:ReplySize] + pack(0, 1, 1, math.Inf(1), 0, 0, 0, 0, 0, 0),
		reply[:ReplySize] + pack(0, 1, 1, 1e300, 0, 0, 0, 0, 0, 0),
	} {
		if err := Place(bad, []int{0, 1}, out); !errors.Is(err, ErrMalformed) {
			t.Errorf("Place(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestMerge builds a call of three groups and cuts its reply back into
// the groups' parts.
func TestMerge(t *testing.T) {
	var m Merge
	if p, a, g := m.Args(); p != "" || a != "" || g != "" {
		t.Fatalf("empty merge: %q %q %q", p, a, g)
	}
	sizes := []int{1, 3, 2}
	for i, n := range sizes {
		m.Add(strings.Repeat(string(rune('a'+i)), n*ArgsLen), strings.Repeat(Alg(i+1), n))
	}
	if m.len() != 6 {
		t.Fatalf("Len %d, want 6", m.len())
	}
	packed, algs, groups := m.Args()
	if want := strings.Repeat("a", ArgsLen) + strings.Repeat("b", 3*ArgsLen) + strings.Repeat("c", 2*ArgsLen); packed != want {
		t.Errorf("packed: %d bytes, not the groups' in turn", len(packed))
	}
	if algs != "\x01\x02\x02\x02\x03\x03" {
		t.Errorf("algs %q", algs)
	}
	if groups != "\x01\x01\x00\x00\x01\x00" {
		t.Errorf("groups %q", groups)
	}
	if g := group(3); g != "\x01\x00\x00" {
		t.Errorf("group(3) = %q", g)
	}
	if g := group(200); len(g) != 200 || g[0] != 1 || strings.Count(g, "\x00") != 199 {
		t.Errorf("group(200): %d bytes", len(g))
	}

	if err := check(strings.Repeat("x", 5*ReplySize), m.len()); !errors.Is(err, ErrMalformed) {
		t.Errorf("a reply one decision short: %v, want ErrMalformed", err)
	}
	reply := strings.Repeat("1", ReplySize) + strings.Repeat("2", 3*ReplySize) + strings.Repeat("3", 2*ReplySize)
	if err := check(reply, m.len()); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		var part string
		part, reply = cut(reply, n)
		if want := strings.Repeat(string(rune('1'+i)), n*ReplySize); part != want {
			t.Errorf("group %d: %d bytes of %q", i, len(part), part[:1])
		}
	}
	if reply != "" {
		t.Errorf("%d bytes left over", len(reply))
	}
}
