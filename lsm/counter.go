package lsm

import "sync/atomic"

// counterStripes is the number of cache lines a stripedCounter spreads its
// count over.
const counterStripes = 8

// stripedCounter is a counter that readers on different cores bump
// without moving one cache line between them on every increment: a plain
// atomic counter bumped on every Get is written by both cores of a
// 2-goroutine readrandom, and each increment then waits for the line to
// come back from the other core. The stripe is chosen by a hash the
// caller already has (the key's filter hash), so two readers of different
// keys mostly write different lines. Load sums the stripes; it is exact
// once the adds it must see have returned.
type stripedCounter struct {
	stripes [counterStripes]struct {
		n atomic.Int64
		_ [56]byte // one stripe per cache line
	}
}

// inc adds one to the stripe of hash h.
func (c *stripedCounter) inc(h uint64) { c.stripes[h%counterStripes].n.Add(1) }

// add adds n to the first stripe (for the rare bulk transfers).
func (c *stripedCounter) add(n int64) { c.stripes[0].n.Add(n) }

// load returns the sum of the stripes.
func (c *stripedCounter) load() int64 {
	var sum int64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
