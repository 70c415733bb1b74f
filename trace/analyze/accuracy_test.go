package analyze_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/trace"
	"github.com/cairnkv/cairn/trace/analyze"
)

// The accuracy check: a trace of a real workload on lsm.DB,
// replayed through the LRU simulator at the engine's block-cache size,
// gives the miss ratio the engine's cache measured during the run, within
// 2 percentage points. The workload reads, with a skew, a DB about five
// times the cache (three with -short; random 200-byte values, so
// blocks do not compress).
func TestSimulatorMatchesEngine(t *testing.T) {
	const (
		cacheSize = 2 << 20
		valueSize = 200
	)
	if raceEnabled {
		// One reader goroutine: the race detector finds nothing here that
		// the lsm tests do not cover, and takes minutes on a loaded machine.
		t.Skip("single-threaded accuracy check; run without -race")
	}
	keys, reads := 50000, 150000 // a DB of ~11 MiB
	if testing.Short() {
		keys, reads = 30000, 50000
	}
	dir := t.TempDir()
	key := func(i int) []byte { return fmt.Appendf(nil, "key%08d", i) }
	rng := rand.New(rand.NewPCG(1, 2))

	// Fill and compact, then reopen with an empty cache: the reads start
	// cold in both the engine and the simulator, with no background work.
	db, err := lsm.Open(dir, &lsm.Options{CacheSizeBytes: cacheSize})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, valueSize)
	for i := 0; i < keys; {
		b := lsm.NewBatch()
		for j := 0; j < 1000 && i < keys; j, i = j+1, i+1 {
			for k := range val {
				val[k] = byte(rng.Uint32())
			}
			b.Set(key(i), val)
		}
		if err := db.Write(b, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c := cache.New(cacheSize)
	db, err = lsm.Open(dir, &lsm.Options{Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Zipf-skewed reads over a random permutation of the keys, so the
	// hot keys are spread over the blocks.
	perm := rng.Perm(keys)
	z := rand.NewZipf(rng, 1.1, 8, uint64(keys-1))
	var buf bytes.Buffer
	before := c.Metrics()
	if err := db.StartTrace(trace.Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < reads; i++ {
		if _, err := db.Get(key(perm[z.Uint64()])); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.EndTrace(); err != nil {
		t.Fatal(err)
	}
	after := c.Metrics()
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	measured := float64(misses) / float64(hits+misses)

	r, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	res, err := analyze.Run(r, analyze.Options{
		Sizes: []int64{cacheSize}, Policies: analyze.Policies,
		EntryOverhead: cache.EntryOverhead, Types: []trace.BlockType{trace.BlockData},
	})
	if err != nil {
		t.Fatal(err)
	}
	var lru analyze.Point
	for _, p := range res.Curve {
		t.Logf("%s at %s: miss ratio %.4f", p.Policy, analyze.FormatBytes(p.Size), p.MissRatio())
		if p.Policy == analyze.LRU {
			lru = p
		}
	}
	data := res.Stats.ByType[trace.BlockData]
	t.Logf("engine: %d block-cache lookups, miss ratio %.4f; trace: %d data-block records (live misses %d); LRU simulation %.4f",
		hits+misses, measured, data.Accesses, data.Misses, lru.MissRatio())
	// The trace holds every lookup the cache counted, with its outcome.
	if data.Accesses != hits+misses || data.Misses != misses || lru.Accesses != data.Accesses {
		t.Fatalf("trace has %d data-block accesses (%d misses), the cache counted %d (%d misses)", data.Accesses, data.Misses, hits+misses, misses)
	}
	// The workload must exercise the cache: neither all hits nor all misses.
	if measured < 0.1 || measured > 0.9 {
		t.Fatalf("engine miss ratio %.3f: the workload does not test the simulator", measured)
	}
	if d := math.Abs(lru.MissRatio() - measured); d > 0.02 {
		t.Fatalf("LRU simulation %.4f vs engine %.4f: %.2f percentage points apart (limit 2)", lru.MissRatio(), measured, 100*d)
	}
}
