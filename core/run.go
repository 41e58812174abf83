package core

import (
	"math"
	"time"
)

// Run decides req on s, the state of req's key, as a store does in one
// atomic step: at the request's Now in whole microseconds (rounded down),
// or without one at clock, the store's clock in µs since the Unix epoch.
// It runs the request's step ([Request.Step]) through its algorithm's
// transition and adds to the decision what every store adds: its instant
// (At: the later of that instant and the key's last charge, s.Last) and, for
// a partial admission ([OpAtMost]), the step of cost 0 that finds the
// largest cost the key admits, then the charge of that cost (Admitted).
// Under [Inf] it leaves s alone, which may then be nil, and returns
// [Unlimited] at that instant, admitting the whole cost of a partial
// admission.
//
// Stores call Run with the key's state held for them alone (memstore
// under its shard's lock); the Redis stores' scripts do the same in Lua,
// and their results agree to the microsecond. req must have passed
// [Request.Validate]. Like a transition, Run changes s only when it
// admits a charge of positive cost or a refund, and the store then keeps
// s as the key's new state.
func Run(s *State, req *Request, clock int64) Decision {
	now := clock
	if !req.Now.IsZero() {
		now = req.Now.UnixMicro()
	}
	if req.Limit.IsInf() {
		d := Unlimited()
		d.At = micros(now)
		if req.Op == OpAtMost {
			d.Admitted = req.Cost
		}
		return d
	}
	at := max(now, s.Last)
	if req.Op != OpAtMost {
		d := Transition(req.Algorithm, s, req.Step(now))
		d.At = micros(at)
		return d
	}
	probe := Step{Now: now, Limit: req.Limit, Op: OpPeek}
	take := AtMost(Transition(req.Algorithm, s, probe).Remaining, req.Cost)
	d := Transition(req.Algorithm, s, Step{Now: now, Cost: take, Limit: req.Limit})
	if d.Allowed {
		d.Admitted = take
	}
	d.At = micros(at)
	return d
}

// RunAll decides reqs together on states, states[i] being the state of
// reqs[i]'s key, as [Run] decides one, and writes the decisions to out. It
// reports whether every request was admitted: only then may the store
// keep the states, which the transitions changed as if each request
// stood alone. A batch of partial admissions ([OpAtMost]) charges every
// request under a limit the same cost (Admitted): the largest every one
// of them admits, at most the least of their costs; when one of them
// admits nothing, the batch is denied as a batch of charges of 1. A
// request under [Inf] admits all of its cost. reqs must have passed
// stores.ValidateAll, so they share one operation.
func RunAll(states []State, reqs []Request, clock int64, out []Decision) bool {
	if len(reqs) > 0 && reqs[0].Op == OpAtMost {
		return runAllAtMost(states, reqs, clock, out)
	}
	all := true
	for i := range reqs {
		out[i] = Run(&states[i], &reqs[i], clock)
		all = all && out[i].Allowed
	}
	return all
}

// runAllAtMost is RunAll for a batch of partial admissions: a step of cost
// 0 on every state finds the most every one admits, then each is charged
// that.
func runAllAtMost(states []State, reqs []Request, clock int64, out []Decision) bool {
	fits := int64(math.MaxInt64)
	for i := range reqs {
		r := &reqs[i]
		if r.Limit.IsInf() {
			continue
		}
		now := clock
		if !r.Now.IsZero() {
			now = r.Now.UnixMicro()
		}
		fits = min(fits, r.Cost, Transition(r.Algorithm, &states[i], Step{Now: now, Limit: r.Limit, Op: OpPeek}).Remaining)
	}
	take := max(fits, 1)
	all := true
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			out[i] = Run(&states[i], &reqs[i], clock) // all of its cost
			continue
		}
		r := reqs[i]
		r.Op, r.Cost = OpCharge, take
		out[i] = Run(&states[i], &r, clock)
		if out[i].Allowed {
			out[i].Admitted = take
		}
		all = all && out[i].Allowed
	}
	return all
}

// AtMost returns the cost a partial admission of at most most charges,
// given the largest cost its key admits now (the Remaining of a decision
// of cost 0): the lesser of the two, or 1 when nothing fits, which the
// key denies, saying when one will fit. The Lua twins compute the same.
func AtMost(fits, most int64) int64 {
	return max(min(fits, most), 1)
}

// Answer returns d as the answer to r made without a store's clock: by a
// decorator itself (an outage policy's fail-open or fail-closed, an
// allow or a deny list) or under [Inf] where no store was asked. It sets
// d.At to r's Now, or without one to the local clock's reading
// ([time.Now]), in whole microseconds, and, when d admits a partial
// admission ([OpAtMost]), d.Admitted to its whole cost.
func (r *Request) Answer(d Decision) Decision {
	if r.Terms == nil || r.Now.IsZero() {
		d.At = micros(time.Now().UnixMicro())
	} else {
		d.At = micros(r.Now.UnixMicro())
	}
	if r.Op == OpAtMost && d.Allowed {
		d.Admitted = r.Cost
	}
	return d
}

// micros returns the instant n µs after the Unix epoch, in UTC.
func micros(n int64) time.Time { return time.UnixMicro(n).UTC() }

// Unlimited returns the decision for a request under [Inf]: allowed, with
// no limit in sight, and a level of [math.MaxInt64] tokens. Stores answer
// Inf requests with it without touching any state, at the request's
// instant (see [Run] and [Request.Answer]).
func Unlimited() Decision {
	return Decision{Allowed: true, Limit: math.MaxInt64, Remaining: math.MaxInt64, Level: Level{Units: math.MaxInt64, PerToken: 1}}
}
