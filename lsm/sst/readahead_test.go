package sst

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// sizingFile records the length of every ReadAt made on a file.
type sizingFile struct {
	vfs.File
	mu    sync.Mutex
	sizes []int
}

func (f *sizingFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(p))
	f.mu.Unlock()
	return f.File.ReadAt(p, off)
}

func (f *sizingFile) take() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sizes
	f.sizes = nil
	return s
}

func openSizing(t *testing.T, data []byte) (*Reader, *sizingFile) {
	t.Helper()
	f := &sizingFile{File: &bytesFile{data: data}}
	c := cache.New(1 << 20)
	r, err := NewReader(f, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkCacheClosed(t, c)
	f.take() // the reads of Open
	return r, f
}

// TestReadaheadScan: a full scan of a table of many small blocks reads the
// data section in a few large reads instead of one per block, and returns
// exactly the entries written; a seek and a step read single blocks only.
func TestReadaheadScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	spec := randomSpec(rng, 5000, 2, false)
	for _, comp := range allCompressions {
		t.Run(comp.String(), func(t *testing.T) {
			data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, Compression: comp})
			r, f := openSizing(t, data)
			defer r.Close()
			blocks := int(r.Properties().NumDataBlocks)
			if blocks < 100 {
				t.Fatalf("only %d data blocks", blocks)
			}

			it := r.NewIter()
			got := collect(it)
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			if !equalKVs(got, spec.points) {
				t.Fatalf("scan returned %d entries, want the %d written", len(got), len(spec.points))
			}
			reads := f.take()
			if len(reads) > blocks/10 {
				t.Fatalf("scan of %d data blocks made %d reads (sizes %v): no readahead", blocks, len(reads), reads[:min(len(reads), 10)])
			}

			// Seeks at random keys with one step each (two blocks at
			// most, fewer than readaheadAfter+1 in a row): single-block
			// reads only (the blocks are uncached: a new reader).
			r2, f2 := openSizing(t, data)
			defer r2.Close()
			it = r2.NewIter()
			for range 50 {
				k := spec.points[rng.IntN(len(spec.points))].key
				it.SeekGE(k)
				for j := 0; j < readaheadAfter-1 && it.Valid(); j++ {
					it.Next()
				}
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			for _, n := range f2.take() {
				if n > 1024 {
					t.Fatalf("a seek and a step read %d bytes at once: read ahead", n)
				}
			}
		})
	}
}

// TestReadaheadCorruptBlock: a block damaged in the middle of a span read
// ahead is reported as corruption by the scan, as a block read alone is,
// and the entries before it are the ones written.
func TestReadaheadCorruptBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	spec := randomSpec(rng, 5000, 1, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, Compression: NoCompression})
	hs := tableBlocks(t, data)[2:] // the data blocks
	slices.SortFunc(hs, func(a, b blockHandle) int { return int(a.offset) - int(b.offset) })
	victim := hs[len(hs)/2]
	bad := slices.Clone(data)
	bad[victim.offset+victim.length/2] ^= 0x10
	r, f := openSizing(t, bad)
	defer r.Close()
	it := r.NewIter()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if base.InternalCompare(it.Key(), spec.points[n].key) != 0 {
			t.Fatalf("entry %d differs", n)
		}
		n++
	}
	err := it.Close()
	if !base.IsCorruption(err) {
		t.Fatalf("scan over a damaged block: %v, want a corruption error", err)
	}
	if n == 0 || n >= len(spec.points) {
		t.Fatalf("scan returned %d of %d entries before the damage", n, len(spec.points))
	}
	if big := slices.Max(f.take()); big <= int(victim.length)+blockTrailerLen {
		t.Fatalf("largest read %d bytes: the damaged block was not read ahead", big)
	}
}

// failingSpanFile fails every read longer than limit bytes: the reads
// ahead, not the single-block ones.
type failingSpanFile struct {
	vfs.File
	limit int
}

var errInjectedSpan = errors.New("injected: read ahead failed")

func (f *failingSpanFile) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > f.limit {
		return 0, errInjectedSpan
	}
	return f.File.ReadAt(p, off)
}

// TestReadaheadErrorSurfaces: an I/O error of a read ahead is the scan's
// error; it is not hidden by reading the block again alone.
func TestReadaheadErrorSurfaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	spec := randomSpec(rng, 5000, 1, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, Compression: NoCompression})
	f := &failingSpanFile{File: &bytesFile{data: data}, limit: 1 << 30}
	c := cache.New(1 << 20)
	r, err := NewReader(f, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkCacheClosed(t, c)
	defer r.Close()
	f.limit = 4 << 10
	it := r.NewIter()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); !errors.Is(err, errInjectedSpan) {
		t.Fatalf("scan after %d entries: %v, want the injected read error", n, err)
	}
}
