package cli

import "os"

// The fixed window's boundary weakness, from the command line: starting
// 100ms before a second boundary, 100 requests a second for 200ms, under a
// limit of 10 a second. The fixed window admits 10 on each side of the
// boundary; the sliding window log admits 10 in all.
func Example_sim() {
	for _, alg := range []string{"fixed-window", "sliding-window-log"} {
		run([]string{"sim", "-algorithm", alg, "-limit", "10/s burst 50", "-traffic", "onoff:100/s,200ms,800ms",
			"-start", "2030-01-01T00:00:00.9Z", "-duration", "400ms", "-interval", "200ms"}, os.Stdout, os.Stderr)
	}
	// Output:
	// fixed-window, 10 req/s (burst 50), traffic onoff:100/s,200ms,800ms, 400ms in intervals of 200ms
	//
	// interval   sent  admitted  rejected  level
	// 0s-0.2s      20        20         0      0
	// 0.2s-0.4s     0         0         0      0
	// total        20        20         0
	//
	// sent 20, admitted 20 (100.0%), rejected 0
	// most admitted in one interval: 20 (0s-0.2s)
	// admitted per second over the run: 50 (the limit's rate: 10 per second)
	// level: the capacity left at each interval's end, out of 10 (fixed-window counts the rate per window and ignores the burst)
	// sliding-window-log, 10 req/s (burst 50), traffic onoff:100/s,200ms,800ms, 400ms in intervals of 200ms
	//
	// interval   sent  admitted  rejected  level
	// 0s-0.2s      20        10        10      0
	// 0.2s-0.4s     0         0         0      0
	// total        20        10        10
	//
	// sent 20, admitted 10 (50.0%), rejected 10
	// most admitted in one interval: 10 (0s-0.2s)
	// admitted per second over the run: 25 (the limit's rate: 10 per second)
	// level: the capacity left at each interval's end, out of 10 (sliding-window-log counts the rate per window and ignores the burst)
}

// The same boundary in one run: a comma list of algorithms runs each on the
// same requests and prints what each admitted side by side. In the 100ms
// after the boundary the fixed window admits 10 more; both sliding windows
// admit none.
func Example_simCompare() {
	run([]string{"sim", "-algorithm", "fixed-window,sliding-window-counter,sliding-window-log", "-limit", "10/s burst 50",
		"-traffic", "onoff:100/s,200ms,800ms", "-start", "2030-01-01T00:00:00.9Z", "-duration", "200ms", "-interval", "100ms"}, os.Stdout, os.Stderr)
	// Output:
	// 3 algorithms, 10 req/s (burst 50), traffic onoff:100/s,200ms,800ms, 200ms in intervals of 100ms
	//
	// interval   sent  fixed-window  sliding-window-counter  sliding-window-log
	// 0s-0.1s      10            10                      10                  10
	// 0.1s-0.2s    10            10                       0                   0
	// total        20            20                      10                  10
	//
	// algorithm                  admitted  rejected  most in one interval  per second  capacity
	// fixed-window            20 (100.0%)         0          10 (0s-0.1s)         100        10
	// sliding-window-counter   10 (50.0%)        10          10 (0s-0.1s)          50        10
	// sliding-window-log       10 (50.0%)        10          10 (0s-0.1s)          50        10
	//
	// each algorithm's column: the requests it admitted in the interval, out of the same requests sent to each
	// per second: admitted per second over the run (the limit's rate: 10 per second)
	// capacity: the most a fresh key admits at once (fixed-window, sliding-window-counter and sliding-window-log count the rate per window and ignore the burst)
}
