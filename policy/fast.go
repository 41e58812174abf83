package policy

// The fast path: a closed circuit, nothing failing.
//
// gobreaker takes its lock and reads the clock twice for every call, to
// count it. While the circuit is closed and the last outcome it counted
// was a success, another success changes nothing it decides by: its
// consecutive failures stay at zero, and the state stays closed. Only the
// window's total of successes matters, to the trip rule's ratio
// ([WithTrip]) and to timingOut, and the breaker counts the window
// itself, on the process clock (tally.go). So such a call is not
// reported to gobreaker: it is counted in the tally alone. Anything else,
// a failure, an excluded call, or a success during which gobreaker
// counted a failure (whose run of consecutive failures the success ends),
// is reported to gobreaker as before, and the calls after a failure take
// gobreaker's path until it counts a success again. A call on the fast
// path also takes no place in the slow start (it runs only once the slow
// start is over).
//
// What differs from reporting every call to gobreaker: a success racing
// a failure's report may miss the ratio that failure is judged by, by
// one.

// generation is one of gobreaker's generations: a state of the circuit,
// whose counts start from zero.
type generation struct {
	id    uint64
	start int64 // the process clock when it began, within the time to record it
}
