package sst

import (
	"fmt"
	"testing"
)

// TestNumEntries checks the traced key count of a data block, computed
// from its first and last restart runs, against the number of entries
// added, for every block length and restart interval up to a bound.
func TestNumEntries(t *testing.T) {
	for interval := 1; interval <= 17; interval += 4 {
		var r Reader // learns the interval from its first block
		for n := 1; n <= 70; n++ {
			w := blockWriter{restartInterval: interval}
			for i := range n {
				w.add(fmt.Appendf(nil, "key%04d\x00\x00\x00\x00\x00\x00\x00\x01", i), []byte("v"))
			}
			if got := r.numEntries(w.finish()); got != uint64(n) {
				t.Fatalf("interval %d, %d entries: numEntries = %d", interval, n, got)
			}
		}
	}
	var r Reader
	if got := r.numEntries([]byte{1, 2}); got != 0 {
		t.Fatalf("malformed block: %d entries", got)
	}
}
