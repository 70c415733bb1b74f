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
		if got := r.numEntries(bad); got > 10+3*4 {
			t.Fatalf("byte %d damaged: %d entries", i, got)
		}
	}
}

// TestTraceGetKeyCounts checks the key count of every data-block record a
// traced Get writes against the block's entries, counted by walking it:
// on a table of many small blocks with restart runs of every length, on
// the first Get of each block (counted) and later ones (memoized), and
// from concurrent Gets (the memo is shared; run with -race).
func TestTraceGetKeyCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	spec := randomSpec(rng, 3000, 3, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 300 + rng.IntN(400), BlockRestartInterval: 5})
	c := cache.New(64 << 20)
	var tr trace.Tracer
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1, Tracer: &tr})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	// The true counts, by block offset.
	want := map[uint64]uint64{}
	var ii blockIter
	if err := ii.init(r.index); err != nil {
		t.Fatal(err)
	}
	for ii.first(); ii.valid; ii.next() {
		bh, err := indexHandle(&ii)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := r.dataBlock(bh, &ii)
		if err != nil {
			t.Fatal(err)
		}
		var di blockIter
		if err := di.init(b); err != nil {
			t.Fatal(err)
		}
		for di.first(); di.valid; di.next() {
			want[bh.offset]++
		}
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
		if _, _, _, _, err := r.GetUnfilteredTraced(base.UserKey(p.key), base.SeqNumMax, acc); err != nil {
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
	n := 0
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
		if rec.NumKeysInBlock != want[off] {
			t.Fatalf("record %d, block at %d: %d keys, want %d", n, off, rec.NumKeysInBlock, want[off])
		}
		n++
	}
	if n < 3*len(spec.points) {
		t.Fatalf("%d data-block records for %d Gets", n, 3*len(spec.points))
	}
}
