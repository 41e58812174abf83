//go:build race

package memstore_test

// raceDetector is set when the tests run with the race detector, whose
// shadow memory the process's RSS counts.
const raceDetector = true
