package compare

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/redistest"
)

// TestCompat sends envoyproxy/ratelimit (the peer) and sluice-serve the
// same sequences of requests, one request to each in turn, and checks
// every answer field by field against the table below: overall_code,
// each status's code, current_limit (requests_per_unit, unit, name),
// limit_remaining and duration_until_reset, and the response headers.
// Each server has a redis-server of its own, emptied before every case.
//
// duration_until_reset is checked against the test's clock (the servers
// run on the same machine): both report whole seconds, the window's
// length minus the Unix seconds modulo it, so an answer must be that for
// one of the seconds the call spanned (sluice's -exact-reset reports the
// exact time until the window ends, which must lie within the span). The
// limits are per minute or per hour, so a window rarely ends during a
// case; a case that crossed a minute is run again, once.
//
// Where the two differ by design, a step gives sluice's answer besides
// the peer's, and both are asserted exactly (the case's name in
// brackets):
//
//	                        envoyproxy/ratelimit                  sluice-serve
//	a request of several    increments every descriptor's         decides the descriptors as one atomic
//	descriptors, one over   counter, the allowed ones too         stack: a denial charges none of them
//	its limit [several
//	descriptors, one over
//	its limit; a limit of
//	zero]
//	limit_remaining of a    0                                     what remains, as nothing was charged
//	denied descriptor
//	[hits_addend above the
//	limit]
//	limit_remaining of an   what remains after its increment      what remains, as nothing was charged
//	allowed descriptor in
//	a denied request
//	hits_addend above the   counts the denied hits: later         counts only what it admits: later
//	limit                   requests in the window are denied     requests are decided on that
//	the same descriptor     counts each in turn; each status      charges both as one; each status
//	twice in a request      tells what remained after it          tells what remains after the request
//	is_negative_hits        ignored: the hits are counted         the hits are given back
//	an invalid request      fails with code Unknown               fails with code InvalidArgument
//
// If sluice-serve does not build yet, only the peer's answers are
// checked, and the sluice subtest says why it was skipped.
func TestCompat(t *testing.T) {
	t.Parallel()
	// Build sluice while the peer builds and starts.
	sluiceBuilt := make(chan error, 1)
	go func() {
		_, err := SluiceBinary()
		sluiceBuilt <- err
	}()
	peerRedis := redistest.Start(t)
	sluiceRedis := redistest.Start(t)
	plain := &pair{
		peer: newSide(t, StartPeer(t, PeerConfig{Redis: peerRedis.Addr(), Config: compatConfig}), peerRedis, false),
	}
	sluiceErr := <-sluiceBuilt
	if sluiceErr == nil {
		plain.sluice = newSide(t, StartSluice(t, SluiceConfig{Redis: sluiceRedis.Addr(), Config: compatConfig}), sluiceRedis, false)
	}
	// The servers with RateLimit-* headers on are started for the cases
	// that need them.
	var withHeaders *pair
	headersPair := func(t *testing.T) *pair {
		if withHeaders == nil {
			withHeaders = &pair{peer: newSide(t, StartPeer(t, PeerConfig{
				Redis:  peerRedis.Addr(),
				Config: compatConfig,
				Env:    map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
			}), peerRedis, false)}
			if sluiceErr == nil {
				withHeaders.sluice = newSide(t, StartSluice(t, SluiceConfig{Redis: sluiceRedis.Addr(), Config: compatConfig, Headers: true}), sluiceRedis, false)
			}
		}
		return withHeaders
	}

	for _, c := range compatCases() {
		p := plain
		if c.headers {
			p = headersPair(t)
		}
		t.Run(c.name, func(t *testing.T) {
			problems, crossed := p.run(t, c)
			if crossed {
				t.Logf("a minute ended during the case; running it again")
				problems, crossed = p.run(t, c)
				if crossed {
					t.Fatalf("a minute ended during the case twice")
				}
			}
			for _, pr := range problems {
				t.Error(pr)
			}
		})
	}
	t.Run("sluice", func(t *testing.T) {
		if sluiceErr != nil {
			first, _, _ := strings.Cut(sluiceErr.Error(), "\n")
			t.Skipf("sluice-serve does not build yet, so only the peer's answers were checked: %s", first)
		}
	})
}

// compatDomain is the domain of compatConfig.
const compatDomain = "compat"

// compatConfig holds a limit for every case of TestCompat.
const compatConfig = `domain: compat
descriptors:
  # one descriptor to exhaustion; hits_addend
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  # nested: a limit on the second level only
  - key: org
    value: acme
    descriptors:
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 2
  # nested: a limit on each level
  - key: team
    rate_limit:
      unit: minute
      requests_per_unit: 5
    descriptors:
      - key: env
        value: prod
        rate_limit:
          unit: minute
          requests_per_unit: 1
  # a wildcard value: each matching value counts on its own
  - key: file
    value: img*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  # a default key, and a value with a limit of its own
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: client
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 4
  - key: internal
    rate_limit:
      unlimited: true
  - key: blocked
    rate_limit:
      unit: minute
      requests_per_unit: 0
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  # replaces: a request that matches api_key=gold is not limited by
  # api-general
  - key: api
    rate_limit:
      name: api-general
      unit: minute
      requests_per_unit: 3
  - key: api_key
    value: gold
    rate_limit:
      name: api-gold
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: api-general
`

// The limits of compatConfig as the servers report them.
var (
	limUser     = &lim{3, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limOrgPath  = &lim{2, rlsv3.RateLimitResponse_RateLimit_HOUR, ""}
	limTeam     = &lim{5, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limTeamProd = &lim{1, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limFile     = &lim{2, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limClient   = &lim{2, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limVIP      = &lim{4, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limTrial    = &lim{1, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limAPI      = &lim{3, rlsv3.RateLimitResponse_RateLimit_MINUTE, "api-general"}
	limGold     = &lim{5, rlsv3.RateLimitResponse_RateLimit_MINUTE, "api-gold"}
	limOverride = &lim{1, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	limBlocked  = &lim{0, rlsv3.RateLimitResponse_RateLimit_MINUTE, ""}
	// The override's limit is reported without its unit multiplier.
	limMultiplied = &lim{2, rlsv3.RateLimitResponse_RateLimit_SECOND, ""}
)

// compatCase is a sequence of requests and the answers both servers must
// give, in order.
type compatCase struct {
	name    string
	headers bool // against the servers with RateLimit-* headers on
	steps   []step
}

// step is one request and its expected answers.
type step struct {
	req    *rlsv3.RateLimitRequest
	want   answer  // the peer's answer, and sluice's unless sluice is set
	sluice *answer // sluice's answer where it differs by design
}

// answer is an expected response.
type answer struct {
	fails    bool       // the RPC returns an error, not a response
	code     codes.Code // the error's code
	overall  rlsv3.RateLimitResponse_Code
	statuses []st
	headers  *hdr // the RateLimit-* headers, or nil for none
}

// st is an expected descriptor status. Its duration_until_reset must be
// set if and only if limit is.
type st struct {
	code      rlsv3.RateLimitResponse_Code
	limit     *lim
	remaining uint32
	window    int64 // the window duration_until_reset counts down to, in seconds; 0: limit's unit
}

// lim is an expected current_limit.
type lim struct {
	rpu  uint32
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	name string
}

func (l *lim) String() string {
	if l == nil {
		return "none"
	}
	s := fmt.Sprintf("%d/%v", l.rpu, l.unit)
	if l.name != "" {
		s += " " + l.name
	}
	return s
}

// hdr is the expected RateLimit-Limit and RateLimit-Remaining, and the
// window, in seconds, whose end RateLimit-Reset counts down to.
type hdr struct {
	limit, remaining string
	window           int64
}

const (
	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

func ok(l *lim, remaining uint32) st { return st{code: codeOK, limit: l, remaining: remaining} }
func over(l *lim) st                 { return st{code: codeOver, limit: l} }

var (
	// noLimit is the status of a descriptor that no limit applies to.
	noLimit = st{code: codeOK}
	// unlimited is the status of a descriptor whose limit is unlimited.
	unlimited = st{code: codeOK, remaining: math.MaxUint32}
)

// all is the answer with these statuses: OVER_LIMIT if any is.
func all(statuses ...st) answer {
	a := answer{overall: codeOK, statuses: statuses}
	for _, s := range statuses {
		if s.code == codeOver {
			a.overall = codeOver
		}
	}
	return a
}

func (a answer) withHeaders(h hdr) answer {
	a.headers = &h
	return a
}

// failsWith is the answer of an RPC that fails with code.
func failsWith(code codes.Code) answer { return answer{fails: true, code: code} }

// d returns a descriptor of "key=value" entries.
func d(entries ...string) *rlcommon.RateLimitDescriptor {
	desc := &rlcommon.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return desc
}

// hitsOf sets desc's own hits_addend.
func hitsOf(n uint64, desc *rlcommon.RateLimitDescriptor) *rlcommon.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

// negative marks desc's hits as negative (is_negative_hits).
func negative(desc *rlcommon.RateLimitDescriptor) *rlcommon.RateLimitDescriptor {
	desc.IsNegativeHits = true
	return desc
}

// req returns a request in compatDomain.
func req(descs ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: compatDomain, Descriptors: descs}
}

// reqHits returns a request in compatDomain with hits_addend n.
func reqHits(n uint32, descs ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	r := req(descs...)
	r.HitsAddend = n
	return r
}

// repeat returns n steps of the same request, answered in turn.
func repeat(r *rlsv3.RateLimitRequest, answers ...answer) []step {
	steps := make([]step, len(answers))
	for i, a := range answers {
		steps[i] = step{req: r, want: a}
	}
	return steps
}

func compatCases() []compatCase {
	user := req(d("user=alice"))
	override := d("user=ov")
	override.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	multiplied := d("user=mult")
	multiplied.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(60)}
	// d returns a fresh descriptor each time, so hitsOf never changes
	// another step's.
	return []compatCase{
		{name: "one descriptor to exhaustion", steps: repeat(user,
			all(ok(limUser, 2)), all(ok(limUser, 1)), all(ok(limUser, 0)), all(over(limUser)), all(over(limUser)))},
		{name: "nested", steps: concat(
			repeat(req(d("org=acme", "path=/a")), all(ok(limOrgPath, 1)), all(ok(limOrgPath, 0)), all(over(limOrgPath))),
			[]step{
				{req: req(d("org=acme", "path=/b")), want: all(ok(limOrgPath, 1))},
				{req: req(d("org=acme")), want: all(noLimit)},
				{req: req(d("org=beta", "path=/a")), want: all(noLimit)},
			})},
		{name: "nested with a limit on each level", steps: []step{
			{req: req(d("team=t")), want: all(ok(limTeam, 4))},
			{req: req(d("team=t", "env=prod")), want: all(ok(limTeamProd, 0))},
			{req: req(d("team=t", "env=prod")), want: all(over(limTeamProd))},
			{req: req(d("team=t")), want: all(ok(limTeam, 3))},
			{req: req(d("team=t", "env=dev")), want: all(noLimit)},
		}},
		{name: "wildcard", steps: concat(
			repeat(req(d("file=img1.png")), all(ok(limFile, 1)), all(ok(limFile, 0)), all(over(limFile))),
			[]step{
				{req: req(d("file=img2.png")), want: all(ok(limFile, 1))},
				{req: req(d("file=doc.txt")), want: all(noLimit)},
			})},
		{name: "default key", steps: concat(
			repeat(req(d("client=alice")), all(ok(limClient, 1)), all(ok(limClient, 0)), all(over(limClient))),
			[]step{{req: req(d("client=bob")), want: all(ok(limClient, 1))}},
			repeat(req(d("client=vip")),
				all(ok(limVIP, 3)), all(ok(limVIP, 2)), all(ok(limVIP, 1)), all(ok(limVIP, 0)), all(over(limVIP))))},
		{name: "empty value takes the default key", steps: repeat(req(d("user=")),
			all(ok(limUser, 2)), all(ok(limUser, 1)))},
		{name: "unknown domain", steps: []step{
			{req: &rlsv3.RateLimitRequest{Domain: "nosuch", Descriptors: []*rlcommon.RateLimitDescriptor{d("user=alice")}}, want: all(noLimit)},
			{req: &rlsv3.RateLimitRequest{Domain: "nosuch", Descriptors: []*rlcommon.RateLimitDescriptor{d("user=alice"), d("client=vip")}}, want: all(noLimit, noLimit)},
		}},
		{name: "no matching limit", steps: []step{
			{req: req(d("color=red")), want: all(noLimit)},
			{req: req(d("user=nm", "extra=x")), want: all(noLimit)},
			{req: req(d("color=red"), d("user=nm")), want: all(noLimit, ok(limUser, 2))},
			{req: req(d("user=nm")), want: all(ok(limUser, 1))},
		}},
		{name: "unlimited", steps: concat(
			repeat(req(d("internal=x")), all(unlimited), all(unlimited), all(unlimited), all(unlimited)),
			[]step{{req: req(d("internal=x"), d("user=ul")), want: all(unlimited, ok(limUser, 2))}})},
		{name: "a limit of zero", steps: []step{
			{req: req(d("blocked=x")), want: all(over(limBlocked))},
			// As for any denied request of several descriptors, the
			// peer charges user=z and sluice does not.
			{req: req(d("blocked=x"), d("user=z")), want: all(over(limBlocked), ok(limUser, 2)), sluice: ptr(all(over(limBlocked), ok(limUser, 3)))},
			{req: req(d("user=z")), want: all(ok(limUser, 1)), sluice: ptr(all(ok(limUser, 2)))},
		}},
		{name: "shadow mode", steps: repeat(req(d("trial=s")),
			// Over the limit in shadow mode: the status says OK, with
			// nothing remaining.
			all(ok(limTrial, 0)), all(ok(limTrial, 0)), all(ok(limTrial, 0)))},
		{name: "replaces", steps: []step{
			{req: req(d("api=r")), want: all(ok(limAPI, 2))},
			// api-gold replaces api-general: api=r is neither
			// limited nor counted.
			{req: req(d("api=r"), d("api_key=gold")), want: all(noLimit, ok(limGold, 4))},
			{req: req(d("api=r")), want: all(ok(limAPI, 1))},
			{req: req(d("api_key=gold")), want: all(ok(limGold, 3))},
			{req: req(d("api=r")), want: all(ok(limAPI, 0))},
			{req: req(d("api=r")), want: all(over(limAPI))},
			// Even over its limit, a replaced limit does not deny,
			// and the request is counted against api-gold.
			{req: req(d("api=r"), d("api_key=gold")), want: all(noLimit, ok(limGold, 2))},
			{req: req(d("api_key=gold")), want: all(ok(limGold, 1))},
		}},
		{name: "hits_addend on the request", steps: []step{
			{req: reqHits(2, d("user=h")), want: all(ok(limUser, 1))},
			{req: reqHits(1, d("user=h")), want: all(ok(limUser, 0))},
			{req: reqHits(0, d("user=h")), want: all(over(limUser))}, // 0 means 1
		}},
		{name: "hits_addend on a descriptor", steps: []step{
			{req: req(hitsOf(2, d("user=hd")), d("client=hd")), want: all(ok(limUser, 1), ok(limClient, 1))},
			// 0 on a descriptor checks without counting.
			{req: req(hitsOf(0, d("user=hd"))), want: all(ok(limUser, 1))},
			// A descriptor's own hits_addend wins over the request's.
			{req: reqHits(3, hitsOf(1, d("user=hd"))), want: all(ok(limUser, 0))},
			{req: req(hitsOf(0, d("user=hd"))), want: all(ok(limUser, 0))},
		}},
		{name: "hits_addend up to the limit", steps: []step{
			{req: reqHits(3, d("user=hx")), want: all(ok(limUser, 0))},
			{req: req(d("user=hx")), want: all(over(limUser))},
		}},

		{name: "limit override from Envoy", steps: repeat(req(override),
			all(ok(limOverride, 0)), all(over(limOverride)))},
		// Both ignore unit_multiplier: 2 per SECOND × 60 is 2 a second
		// (sluice-serve's -unit-multiplier honours it).
		{name: "limit override with a unit multiplier", steps: []step{{
			req:  req(multiplied),
			want: all(ok(limMultiplied, 1)),
		}}},
		{name: "invalid requests", steps: []step{
			{req: req(), want: failsWith(codes.Unknown), sluice: ptr(failsWith(codes.InvalidArgument))},
			{
				req:    &rlsv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{d("user=alice")}},
				want:   failsWith(codes.Unknown),
				sluice: ptr(failsWith(codes.InvalidArgument)),
			},
		}},
		{name: "response headers", headers: true, steps: concat(
			repeat(req(d("user=hh")),
				all(ok(limUser, 2)).withHeaders(hdr{"3", "2", 60}),
				all(ok(limUser, 1)).withHeaders(hdr{"3", "1", 60}),
				all(ok(limUser, 0)).withHeaders(hdr{"3", "0", 60}),
				all(over(limUser)).withHeaders(hdr{"3", "0", 60})),
			[]step{
				// The headers describe the status closest to its limit.
				{req: req(d("client=vip"), d("org=acme", "path=/h")), want: all(ok(limVIP, 3), ok(limOrgPath, 1)).withHeaders(hdr{"2", "1", 3600})},
				// No limit, no headers.
				{req: req(d("color=red")), want: all(noLimit)},
			})},

		// The designed differences.
		{name: "several descriptors, one over its limit", steps: []step{
			{req: req(d("client=m")), want: all(ok(limClient, 1))},
			{req: req(d("client=m")), want: all(ok(limClient, 0))},
			{
				req:  req(d("user=m"), d("client=m")),
				want: all(ok(limUser, 2), over(limClient)),
				// Nothing is charged: user=m keeps its 3, as its
				// status says and the next step shows.
				sluice: ptr(all(ok(limUser, 3), over(limClient))),
			},
			{req: req(d("user=m")), want: all(ok(limUser, 1)), sluice: ptr(all(ok(limUser, 2)))},
		}},
		{name: "is_negative_hits", steps: []step{
			{req: req(d("user=neg")), want: all(ok(limUser, 2))},
			{req: req(d("user=neg")), want: all(ok(limUser, 1))},
			{req: req(negative(hitsOf(1, d("user=neg")))), want: all(ok(limUser, 0)), sluice: ptr(all(ok(limUser, 2)))},
			{req: req(d("user=neg")), want: all(over(limUser)), sluice: ptr(all(ok(limUser, 1)))},
		}},
		{name: "same descriptor twice", steps: []step{
			{
				req:  req(d("user=dup"), d("user=dup")),
				want: all(ok(limUser, 2), ok(limUser, 1)),
				// Both are charged; each status tells what remains
				// after the whole request.
				sluice: ptr(all(ok(limUser, 1), ok(limUser, 1))),
			},
			{req: req(d("user=dup")), want: all(ok(limUser, 0))},
		}},
		{name: "hits_addend above the limit", steps: []step{
			{
				req:  reqHits(5, d("user=big")),
				want: all(over(limUser)),
				// A denial charges nothing: all 3 remain.
				sluice: ptr(all(st{code: codeOver, limit: limUser, remaining: 3})),
			},
			// The peer counted the 5 denied hits; sluice did not.
			{req: req(d("user=big")), want: all(over(limUser)), sluice: ptr(all(ok(limUser, 2)))},
		}},
	}
}

func concat(parts ...[]step) []step {
	var all []step
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func ptr[T any](v T) *T { return &v }

// side is one server of a pair, with its client and its Redis.
type side struct {
	srv    *Server
	client rlsv3.RateLimitServiceClient
	redis  *redistest.Server
	exact  bool // reports duration_until_reset exactly, not in whole seconds
}

func newSide(t *testing.T, srv *Server, r *redistest.Server, exact bool) *side {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &side{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), redis: r, exact: exact}
}

// pair is the peer and, if it builds, sluice-serve.
type pair struct {
	peer, sluice *side
}

// run empties both Redis servers and runs c's steps, sending each request
// to the peer and then to sluice. It returns what differed from the
// expected answers, and whether a minute ended during the case (which
// makes the answers unreliable).
func (p *pair) run(t *testing.T, c compatCase) (problems []string, crossed bool) {
	t.Helper()
	sides := []*side{p.peer}
	if p.sluice != nil {
		sides = append(sides, p.sluice)
	}
	for _, s := range sides {
		if _, err := s.redis.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i, stp := range c.steps {
		var peerAnswer string
		for _, s := range sides {
			want := stp.want
			if s == p.sluice && stp.sluice != nil {
				want = *stp.sluice
			}
			before := time.Now()
			resp, err := s.client.ShouldRateLimit(t.Context(), stp.req)
			after := time.Now()
			answer := showAnswer(resp, err)
			if s == p.peer {
				peerAnswer = answer
			}
			for _, pr := range checkAnswer(s, resp, err, want, before, after) {
				msg := fmt.Sprintf("step %d: %s: %s\n\trequest %s\n\tanswer  %s", i+1, s.srv.Name, pr, showRequest(stp.req), answer)
				if s != p.peer {
					msg += "\n\tpeer's  " + peerAnswer
				}
				problems = append(problems, msg)
			}
		}
	}
	return problems, start.Unix()/60 != time.Now().Unix()/60
}

// checkAnswer compares a response with want; before and after bound the
// moment the server decided.
func checkAnswer(s *side, resp *rlsv3.RateLimitResponse, err error, want answer, before, after time.Time) []string {
	if want.fails {
		if err == nil {
			return []string{fmt.Sprintf("answered, want an error with code %v", want.code)}
		}
		if got := status.Code(err); got != want.code {
			return []string{fmt.Sprintf("error code %v, want %v", got, want.code)}
		}
		return nil
	}
	if err != nil {
		return []string{fmt.Sprintf("error %v", err)}
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if resp.GetOverallCode() != want.overall {
		add("overall_code %v, want %v", resp.GetOverallCode(), want.overall)
	}
	if len(resp.GetStatuses()) != len(want.statuses) {
		add("%d statuses, want %d", len(resp.GetStatuses()), len(want.statuses))
		return problems
	}
	for j, got := range resp.GetStatuses() {
		w := want.statuses[j]
		if got.GetCode() != w.code {
			add("status %d: code %v, want %v", j, got.GetCode(), w.code)
		}
		if g := gotLimit(got.GetCurrentLimit()); g.String() != w.limit.String() {
			add("status %d: current_limit %v, want %v", j, g, w.limit)
		}
		if got.GetCurrentLimit().GetUnitMultiplier() != nil {
			add("status %d: current_limit has unit_multiplier %v, want none", j, got.GetCurrentLimit().GetUnitMultiplier().GetValue())
		}
		if got.GetLimitRemaining() != w.remaining {
			add("status %d: limit_remaining %d, want %d", j, got.GetLimitRemaining(), w.remaining)
		}
		if got.GetQuota() != nil {
			add("status %d: has a quota, want none", j)
		}
		reset := got.GetDurationUntilReset()
		switch {
		case w.limit == nil && reset != nil:
			add("status %d: duration_until_reset %v, want none (no limit)", j, reset.AsDuration())
		case w.limit != nil && reset == nil:
			add("status %d: no duration_until_reset, want one", j)
		case w.limit != nil:
			window := w.window
			if window == 0 {
				window = unitSeconds(w.limit.unit)
			}
			if msg := checkReset(reset.AsDuration(), window, before, after, s.exact); msg != "" {
				add("status %d: %s", j, msg)
			}
		}
	}
	problems = append(problems, checkHeaders(resp, want.headers, before, after)...)
	if len(resp.GetRequestHeadersToAdd()) > 0 || len(resp.GetRawBody()) > 0 || resp.GetDynamicMetadata() != nil || resp.GetQuota() != nil {
		add("has request headers, a raw body, dynamic metadata or a quota, want none")
	}
	return problems
}

func gotLimit(l *rlsv3.RateLimitResponse_RateLimit) *lim {
	if l == nil {
		return nil
	}
	return &lim{l.GetRequestsPerUnit(), l.GetUnit(), l.GetName()}
}

// checkReset checks a duration_until_reset of a fixed window of window
// seconds, decided between before and after. Whole seconds (the peer's)
// must be window - unix%window for one of the Unix seconds the call
// spanned; an exact reset must end the window within the call's span.
func checkReset(got time.Duration, window int64, before, after time.Time, exact bool) string {
	if !exact {
		if got%time.Second != 0 {
			return fmt.Sprintf("duration_until_reset %v, want whole seconds", got)
		}
		var wants []string
		for sec := before.Unix(); sec <= after.Unix(); sec++ {
			w := window - sec%window
			if got == time.Duration(w)*time.Second {
				return ""
			}
			wants = append(wants, strconv.FormatInt(w, 10)+"s")
		}
		return fmt.Sprintf("duration_until_reset %v, want %s", got, strings.Join(wants, " or "))
	}
	end := windowEnd(before, window)
	// A few milliseconds of slack for a server that rounds.
	const slack = 5 * time.Millisecond
	lo, hi := end.Sub(after)-slack, end.Sub(before)+slack
	if got < lo || got > hi {
		return fmt.Sprintf("duration_until_reset %v, want %v to %v (the window ends at %v)", got, lo, hi, end.Format("15:04:05.000"))
	}
	return ""
}

// windowEnd returns the end of the fixed window of window seconds that
// holds t.
func windowEnd(t time.Time, window int64) time.Time {
	return time.Unix((t.Unix()/window+1)*window, 0)
}

func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	}
	return 0
}

// checkHeaders compares the response headers with want: none, or
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset in that order,
// the last a whole number of seconds to the end of the window.
func checkHeaders(resp *rlsv3.RateLimitResponse, want *hdr, before, after time.Time) []string {
	got := resp.GetResponseHeadersToAdd()
	if want == nil {
		if len(got) > 0 {
			return []string{fmt.Sprintf("response headers %s, want none", showHeaders(got))}
		}
		return nil
	}
	bad := []string{fmt.Sprintf("response headers %s, want RateLimit-Limit: %s, RateLimit-Remaining: %s, RateLimit-Reset: seconds to the end of a %ds window",
		showHeaders(got), want.limit, want.remaining, want.window)}
	if len(got) != 3 {
		return bad
	}
	names := []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	for i, h := range got {
		if h.GetKey() != names[i] {
			return bad
		}
	}
	if got[0].GetValue() != want.limit || got[1].GetValue() != want.remaining {
		return bad
	}
	reset, err := strconv.ParseInt(got[2].GetValue(), 10, 64)
	end := windowEnd(before, want.window)
	lo := int64(math.Floor(end.Sub(after).Seconds()))
	hi := int64(math.Ceil(end.Sub(before).Seconds()))
	if err != nil || reset < lo || reset > hi {
		return bad
	}
	return nil
}

func showHeaders(hs []*corev3.HeaderValue) string {
	if len(hs) == 0 {
		return "(none)"
	}
	var parts []string
	for _, h := range hs {
		parts = append(parts, h.GetKey()+": "+h.GetValue())
	}
	return strings.Join(parts, ", ")
}

// showRequest prints a request as "domain [k=v k=v] [k=v +2] hits 3".
func showRequest(r *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(r.GetDomain()))
	for _, desc := range r.GetDescriptors() {
		b.WriteString(" [")
		for i, e := range desc.GetEntries() {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		if h := desc.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " +%d", h.GetValue())
		}
		if l := desc.GetLimit(); l != nil {
			fmt.Fprintf(&b, " limit %d/%v", l.GetRequestsPerUnit(), l.GetUnit())
		}
		b.WriteByte(']')
	}
	if r.GetHitsAddend() != 0 {
		fmt.Fprintf(&b, " hits %d", r.GetHitsAddend())
	}
	return b.String()
}

// showAnswer prints a response on one line.
func showAnswer(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "error " + status.Code(err).String() + ": " + status.Convert(err).Message()
	}
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String())
	for _, s := range resp.GetStatuses() {
		fmt.Fprintf(&b, " {%v %v remaining %d", s.GetCode(), gotLimit(s.GetCurrentLimit()), s.GetLimitRemaining())
		if r := s.GetDurationUntilReset(); r != nil {
			fmt.Fprintf(&b, " reset %v", r.AsDuration())
		}
		b.WriteByte('}')
	}
	if hs := resp.GetResponseHeadersToAdd(); len(hs) > 0 {
		b.WriteString(" headers " + showHeaders(hs))
	}
	return b.String()
}
