//go:build race

package analyze_test

// raceEnabled: the race detector slows the engine several times; the
// accuracy test skips.
const raceEnabled = true
