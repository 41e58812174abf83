package policy

// failureRun is a breaker's current run of failures (calls that failed
// with no success between them) on the process clock, for the run rule
// of [WithTrip]: at least minFailures of them within a window, the run
// spanning runSpan deadlines.
//
// gobreaker counts failures too, but its window rolls on the wall clock.
// On a loaded host the process clock runs slower than the wall clock
// (the process waits for a core), and a run that spanned its deadlines on
// the process clock could take longer than the window on the wall clock:
// gobreaker then forgot its first failures, and the run needed more
// failures than the rule says, each a deadline long (8 of one caller's
// where 5 were due, in a test on a machine at a load of 14).
type failureRun struct {
	n      uint32 // the run's failures so far
	start  int64  // the process clock at its first
	lapsed bool   // a call of the run timed out
	// The failures of the last window, in tenths of it: the count of
	// each tenth, and which tenth (the process clock / tenth) it is of.
	tenth  int64
	counts [10]uint32
	of     [10]int64
}

// fail adds a failure at the instant at, which timed out if lapsed. An
// instant read as the meter records a stall may fall a little before the
// clock's origin: it counts as the origin.
func (r *failureRun) fail(at int64, lapsed bool) {
	at = max(at, 0)
	if r.n == 0 {
		r.start, r.lapsed = at, false
	}
	r.n++
	r.lapsed = r.lapsed || lapsed
	i := at / r.tenth
	k := i % int64(len(r.counts))
	if r.of[k] != i {
		r.of[k], r.counts[k] = i, 0
	}
	r.counts[k]++
}

// end ends the run: a call succeeded, or the circuit changed state.
func (r *failureRun) end() {
	if r.n == 0 {
		return
	}
	r.n = 0
	r.counts = [10]uint32{}
}

// inWindow returns how many of the run's failures came in the window
// before now: all of them if the run began within it.
func (r *failureRun) inWindow(now int64) uint32 {
	if r.n == 0 || now-r.start <= r.tenth*int64(len(r.counts)) {
		return r.n
	}
	i := max(now, 0) / r.tenth
	var n uint32
	for k, c := range r.counts {
		if age := i - r.of[k]; age >= 0 && age < int64(len(r.counts)) {
			n += c
		}
	}
	return min(n, r.n)
}
