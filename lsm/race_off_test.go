//go:build !race

package lsm

// raceEnabled is set when the race detector is on: tests shrink their
// workloads, which run many times slower.
const raceEnabled = false
