package sst

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/trace"
)

// TestNumKeys checks the traced key count of a data block against the
// number of entries added, for every block length and restart interval up
// to a bound: exact when the entries have one size, and with sizes that
// vary, exact for a block of one restart run and otherwise off only in
// the last run, by little on average.
func TestNumKeys(t *testing.T) {
	key := func(i int) []byte { return fmt.Appendf(nil, "key%04d\x00\x00\x00\x00\x00\x00\x00\x01", i) }
	rng := rand.New(rand.NewPCG(1, 1))
	var errSum, blocks int
	for interval := 1; interval <= 17; interval += 4 {
		var r Reader // learns the interval from its first block
		for n := 1; n <= 70; n++ {
			w := blockWriter{restartInterval: interval}
			for i := range n {
				w.add(key(i), []byte("value"))
			}
			if got := r.numKeys(w.finish()); got != uint64(n) {
				t.Fatalf("interval %d, %d entries of one size: numKeys = %d", interval, n, got)
			}
			w = blockWriter{restartInterval: interval}
			for i := range n {
				w.add(key(i), make([]byte, rng.IntN(40)))
			}
			got := int(r.numKeys(w.finish()))
			runs := (n + interval - 1) / interval
			if got < (runs-1)*interval+1 || got > runs*interval || (runs == 1 && got != n) {
				t.Fatalf("interval %d, %d entries of varied sizes: numKeys = %d", interval, n, got)
			}
			errSum += max(got-n, n-got)
			blocks++
		}
	}
	t.Logf("mean error %.3f over %d blocks", float64(errSum)/float64(blocks), blocks)
	if mean := float64(errSum) / float64(blocks); mean > 1 {
		t.Errorf("entries of varied sizes: numKeys off by %.2f keys on average", mean)
	}
	var r Reader
	if got := r.numKeys([]byte{1, 2}); got != 0 {
		t.Fatalf("malformed block: %d entries", got)
	}
	// A damaged block (any byte set to 0xff: a varint that does not end,
	// a length past the block, a restart point out of range) never makes
	// the count read out of bounds, nor count more than the block holds.
	w := blockWriter{restartInterval: 4}
	for i := range 10 {
		w.add(fmt.Appendf(nil, "key%04d\x00\x00\x00\x00\x00\x00\x00\x01", i), []byte("v"))
	}
	good := w.finish()
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] = 0xff
		var r Reader
		if got := r.numKeys(bad); got > 10+3*4 {
			t.Fatalf("byte %d damaged: %d entries", i, got)
		}
	}
}

// TestTraceGetKeyCounts checks the key count of every data-block record a
// traced Get writes against the block's entries, counted by walking it,
// on a table of many small blocks whose entries vary in size (so that
// the count of a block's last restart run is estimated), from one
// goroutine and from concurrent ones (run with -race): within the bounds
// the restart points set, exact for blocks of one run, and off by less
// than a key on average.
func TestTraceGetKeyCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	spec := randomSpec(rng, 3000, 3, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 300 + rng.IntN(400), BlockRestartInterval: 5})
	c := cache.New(64 << 20)
	checkCacheClosed(t, c)
	var tr trace.Tracer
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1, Tracer: &tr})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	// The true counts and restart runs, by block offset.
	want, runs := map[uint64]int{}, map[uint64]int{}
	var ii blockIter
	if err := ii.init(r.index); err != nil {
		t.Fatal(err)
	}
	for ii.first(); ii.valid; ii.next() {
		bh, err := indexHandle(&ii)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := r.dataBlock(bh, &ii, nil)
		if err != nil {
			t.Fatal(err)
		}
		var di blockIter
		if err := di.init(b.Value()); err != nil {
			t.Fatal(err)
		}
		for di.first(); di.valid; di.next() {
			want[bh.offset]++
		}
		runs[bh.offset] = di.numRestarts
		b.Release()
	}
	if len(want) < 20 {
		t.Fatalf("only %d data blocks", len(want))
	}

	var buf bytes.Buffer
	if err := tr.StartTrace(trace.Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	get := func(p kv) {
		acc := tr.NewAccess(trace.CallerGet, 0, false)
		_, _, _, _, rel, err := r.GetUnfilteredTraced(base.UserKey(p.key), base.SeqNumMax, acc)
		rel.Release()
		if err != nil {
			t.Error(err)
		}
	}
	for range 2 {
		for _, p := range spec.points {
			get(p)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(spec.points); i += 4 {
				get(spec.points[i])
			}
		}()
	}
	wg.Wait()
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}

	tre, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n, errSum := 0, 0
	for {
		rec, err := tre.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Type != trace.BlockData || rec.Pinned {
			continue
		}
		off, err := rec.BlockOffset()
		if err != nil {
			t.Fatal(err)
		}
		got, nk, nr := int(rec.NumKeysInBlock), want[off], runs[off]
		if got < (nr-1)*5+1 || got > nr*5 || (nr == 1 && got != nk) {
			t.Fatalf("record %d, block at %d of %d runs: %d keys, want %d", n, off, nr, got, nk)
		}
		errSum += max(got-nk, nk-got)
		n++
	}
	if n < 3*len(spec.points) {
		t.Fatalf("%d data-block records for %d Gets", n, 3*len(spec.points))
	}
	if mean := float64(errSum) / float64(n); mean >= 1 {
		t.Errorf("key counts off by %.2f keys on average", mean)
	}
}
