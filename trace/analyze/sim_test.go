package analyze

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/trace"
)

// rec returns a data-block Get record of block k with the given size.
func rec(k int, size uint64) trace.Record {
	return trace.Record{
		Type: trace.BlockData, Caller: trace.CallerGet, Level: 1, FileNumber: uint64(k / 100),
		BlockKey: fmt.Appendf(nil, "block-%d", k), BlockSize: size,
	}
}

func run(t *testing.T, recs []trace.Record, opts Options) *Result {
	t.Helper()
	res, err := RunRecords(trace.Header{}, recs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func point(t *testing.T, res *Result, p Policy, size int64) Point {
	t.Helper()
	for _, pt := range res.Curve {
		if pt.Policy == p && pt.Size == size {
			return pt
		}
	}
	t.Fatalf("no point %s %d", p, size)
	return Point{}
}

// A cyclic scan over K equal blocks misses every access in an LRU cache
// smaller than K blocks, and only the K cold misses in one of K or more.
func TestLRUCyclicScan(t *testing.T) {
	const K, S, rounds = 100, 4096, 20
	var recs []trace.Record
	for i := 0; i < K*rounds; i++ {
		recs = append(recs, rec(i%K, S))
	}
	sizes := []int64{S, 10 * S, (K - 1) * S, K*S - 1, K * S, K*S + 1, 2 * K * S}
	res := run(t, recs, Options{Sizes: sizes, Policies: Policies})
	for _, s := range sizes {
		pt := point(t, res, LRU, s)
		want := int64(K * rounds)
		if s >= K*S {
			want = K
		}
		if pt.Accesses != K*rounds || pt.Misses != want {
			t.Errorf("LRU size %d: %d misses of %d accesses, want %d", s, pt.Misses, pt.Accesses, want)
		}
		// Every policy holds the whole cycle once it fits.
		for _, p := range []Policy{CLOCK, S3FIFO} {
			if pt := point(t, res, p, s); s >= K*S && pt.Misses != K {
				t.Errorf("%s size %d: %d misses, want %d", p, s, pt.Misses, K)
			}
		}
	}
}

// randomTrace returns n accesses over m blocks with a skew (a power law)
// and sizes drawn per block from sizes.
func randomTrace(rng *rand.Rand, n, m int, sizes []uint64, noInsert float64) []trace.Record {
	bs := make([]uint64, m)
	for i := range bs {
		bs[i] = sizes[rng.IntN(len(sizes))]
	}
	recs := make([]trace.Record, n)
	for i := range recs {
		u := rng.Float64()
		k := int(float64(m) * u * u * u)
		recs[i] = rec(k, bs[k])
		recs[i].NoInsert = rng.Float64() < noInsert
		recs[i].CacheHit = rng.IntN(2) == 0 // ignored by the simulators
	}
	return recs
}

// LRU has the inclusion property: a bigger cache holds everything a
// smaller one holds, so its misses never increase with the size, also
// with blocks of different sizes (the cache is always the longest prefix
// of the recency stack that fits). It needs every block to fit in the
// smallest cache: a cache too small for a block does not admit it, while a
// bigger one does and lets it push other blocks out.
func TestLRUInclusion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 30; iter++ {
		recs := randomTrace(rng, 3000, 1+rng.IntN(400), []uint64{100, 1000, 4096, 9000}[:1+rng.IntN(4)], 0)
		var sizes []int64
		for s := int64(9000); s < 4<<20; s = s*5/4 + 1 {
			sizes = append(sizes, s)
		}
		res := run(t, recs, Options{Sizes: sizes})
		prev := int64(1 << 62)
		for _, pt := range res.Curve {
			if pt.Misses > prev {
				t.Fatalf("iter %d: LRU misses grow from %d to %d at size %d", iter, prev, pt.Misses, pt.Size)
			}
			prev = pt.Misses
		}
	}
}

// The LRU simulator agrees with the byte reuse distances: without no-insert
// lookups or size changes, an access hits in an LRU cache of C bytes iff
// its byte distance is at most C (C at least the largest block).
func TestLRUMatchesReuseDistance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 10; iter++ {
		recs := randomTrace(rng, 5000, 1+rng.IntN(1000), []uint64{1, 64, 4096, 5000}, 0)
		var sizes []int64
		for s := int64(5000); s < 8<<20; s *= 2 {
			sizes = append(sizes, s, s+s/2)
		}
		res := run(t, recs, Options{Sizes: sizes})
		dists := byteDistances(recs)
		for _, pt := range res.Curve {
			var want int64
			for _, d := range dists {
				if d < 0 || d > pt.Size {
					want++
				}
			}
			if pt.Misses != want {
				t.Fatalf("iter %d size %d: LRU %d misses, reuse distances say %d", iter, pt.Size, pt.Misses, want)
			}
		}
	}
}

// byteDistances returns per access the byte reuse distance (the sizes of
// the distinct blocks accessed since, plus the block's own), -1 for first
// accesses, from the reuse tracker (checked against a naive computation by
// TestReuseDistancesRandom).
func byteDistances(recs []trace.Record) []int64 {
	out := make([]int64, len(recs))
	r := newReuseTracker()
	ids := map[string]int32{}
	for i, rec := range recs {
		id, ok := ids[string(rec.BlockKey)]
		if !ok {
			id = int32(len(ids))
			ids[string(rec.BlockKey)] = id
		}
		out[i] = -1
		if _, b, seen := r.access(id, int64(rec.BlockSize)); seen {
			out[i] = b + int64(rec.BlockSize)
		}
	}
	return out
}

// naiveLRU is the reference: a slice ordered by recency, most recent first.
type naiveLRU struct {
	capacity int64
	keys     []string
	sizes    []int64
}

func (c *naiveLRU) access(k string, size int64, noInsert bool) bool {
	for i, kk := range c.keys {
		if kk == k {
			c.keys = append([]string{k}, append(c.keys[:i:i], c.keys[i+1:]...)...)
			c.sizes = append([]int64{size}, append(c.sizes[:i:i], c.sizes[i+1:]...)...)
			c.trim()
			return true
		}
	}
	if noInsert || size > c.capacity {
		return false
	}
	c.keys = append([]string{k}, c.keys...)
	c.sizes = append([]int64{size}, c.sizes...)
	c.trim()
	return false
}

func (c *naiveLRU) trim() {
	for {
		var used int64
		for _, s := range c.sizes {
			used += s
		}
		if used <= c.capacity {
			return
		}
		c.keys, c.sizes = c.keys[:len(c.keys)-1], c.sizes[:len(c.sizes)-1]
	}
}

// naiveClock is the reference CLOCK: a slice in FIFO order.
type naiveClock struct {
	capacity int64
	keys     []string
	sizes    []int64
	ref      []bool
}

func (c *naiveClock) access(k string, size int64, noInsert bool) bool {
	for i, kk := range c.keys {
		if kk == k {
			c.ref[i], c.sizes[i] = true, size
			c.trim()
			return true
		}
	}
	if noInsert || size > c.capacity {
		return false
	}
	c.keys, c.sizes, c.ref = append(c.keys, k), append(c.sizes, size), append(c.ref, false)
	c.trim()
	return false
}

func (c *naiveClock) trim() {
	for {
		var used int64
		for _, s := range c.sizes {
			used += s
		}
		if used <= c.capacity {
			return
		}
		k, s, r := c.keys[0], c.sizes[0], c.ref[0]
		c.keys, c.sizes, c.ref = c.keys[1:], c.sizes[1:], c.ref[1:]
		if r {
			c.keys, c.sizes, c.ref = append(c.keys, k), append(c.sizes, s), append(c.ref, false)
		}
	}
}

// The LRU and CLOCK simulators agree access by access with naive reference
// implementations, on random traces with no-insert lookups, blocks whose
// size changes and blocks larger than the cache.
func TestSimulatorsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 200; iter++ {
		m := 1 + rng.IntN(60)
		capacity := int64(rng.IntN(40000))
		lru, clk := newLRU(capacity), newClock(capacity)
		rl, rc := &naiveLRU{capacity: capacity}, &naiveClock{capacity: capacity}
		for i := 0; i < 2000; i++ {
			k := rng.IntN(m)
			size := int64(1 + rng.IntN(5000))
			if rng.IntN(10) > 0 {
				size = int64(1000 + 100*k) // stable most of the time
			}
			noInsert := rng.IntN(8) == 0
			key := fmt.Sprint(k)
			if got, want := lru.access(int32(k), size, noInsert), rl.access(key, size, noInsert); got != want {
				t.Fatalf("iter %d access %d (block %d size %d noInsert %v): LRU hit %v, reference %v", iter, i, k, size, noInsert, got, want)
			}
			if got, want := clk.access(int32(k), size, noInsert), rc.access(key, size, noInsert); got != want {
				t.Fatalf("iter %d access %d (block %d size %d noInsert %v): CLOCK hit %v, reference %v", iter, i, k, size, noInsert, got, want)
			}
		}
	}
}

// Every policy stays within its byte budget and its accounting matches
// the blocks it holds, on random traces.
func TestSimulatorsStayWithinBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 100; iter++ {
		capacity := int64(1 + rng.IntN(100000))
		s3 := newS3FIFO(capacity)
		for i := 0; i < 3000; i++ {
			k := int32(rng.IntN(200))
			size := int64(1 + rng.IntN(8000))
			if rng.IntN(10) > 0 {
				size = 500 + 37*int64(k)
			}
			s3.access(k, size, rng.IntN(8) == 0)
			if s3.smallUsed+s3.mainUsed > capacity {
				t.Fatalf("iter %d: s3fifo holds %d bytes, capacity %d", iter, s3.smallUsed+s3.mainUsed, capacity)
			}
			if s3.ghostUsed > s3.mainCap {
				t.Fatalf("iter %d: ghost holds %d bytes, main capacity %d", iter, s3.ghostUsed, s3.mainCap)
			}
		}
		var small, main, ghost int64
		for id, w := range s3.where {
			switch w {
			case s3Small:
				small += s3.charge[id]
			case s3Main:
				main += s3.charge[id]
			}
			if s3.ghostSeq[id] != 0 {
				if w != s3None {
					t.Fatalf("iter %d: block %d both cached and a ghost", iter, id)
				}
				ghost += s3.ghostCharge[id]
			}
		}
		if small != s3.smallUsed || main != s3.mainUsed || ghost != s3.ghostUsed {
			t.Fatalf("iter %d: accounting small %d/%d main %d/%d ghost %d/%d", iter, small, s3.smallUsed, main, s3.mainUsed, ghost, s3.ghostUsed)
		}
	}
}

// A hot set re-read all the time, polluted by long scans of blocks read
// once: LRU lets every scan flush the hot set, S3-FIFO keeps scans in its
// small queue and CLOCK lets hot blocks survive a pass; both miss less.
func TestScanResistance(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const hot, S = 100, 4096
	var recs []trace.Record
	next := hot
	for round := 0; round < 400; round++ {
		for i := 0; i < 50; i++ {
			recs = append(recs, rec(rng.IntN(hot), S))
		}
		for i := 0; i < 100; i++ {
			recs = append(recs, rec(next, S))
			next++
		}
	}
	size := int64(150 * S)
	res := run(t, recs, Options{Sizes: []int64{size}, Policies: Policies, Warmup: 2000})
	l, c, s := point(t, res, LRU, size), point(t, res, CLOCK, size), point(t, res, S3FIFO, size)
	t.Logf("miss ratios: lru %.3f clock %.3f s3fifo %.3f", l.MissRatio(), c.MissRatio(), s.MissRatio())
	// Scan blocks always miss (2/3 of the accesses): the policies differ
	// on the hot third.
	if s.MissRatio() > l.MissRatio()-0.05 {
		t.Errorf("s3fifo miss ratio %.3f, not clearly below lru's %.3f", s.MissRatio(), l.MissRatio())
	}
	if c.MissRatio() >= l.MissRatio() {
		t.Errorf("clock miss ratio %.3f, not below lru's %.3f", c.MissRatio(), l.MissRatio())
	}
}

// BenchmarkRun: records per second through the analyzer with 3 policies
// at 8 sizes (24 simulated caches).
func BenchmarkRun(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	recs := randomTrace(rng, 1<<18, 1<<16, []uint64{4096}, 0.05)
	var sizes []int64
	for s := int64(1 << 20); s <= 128<<20; s *= 2 {
		sizes = append(sizes, s)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := RunRecords(trace.Header{}, recs, Options{Sizes: sizes, Policies: Policies}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "records/s")
}
