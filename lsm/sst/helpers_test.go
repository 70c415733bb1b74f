package sst

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/filter"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// bytesFile is a vfs.File over a byte slice, for tests that damage a table
// byte by byte.
type bytesFile struct {
	data   []byte
	closed bool
}

var _ vfs.File = (*bytesFile)(nil)

func (f *bytesFile) Read([]byte) (int, error) { return 0, errors.New("bytesFile: Read unsupported") }
func (f *bytesFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(f.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (f *bytesFile) Write(p []byte) (int, error) { f.data = append(f.data, p...); return len(p), nil }
func (f *bytesFile) Sync() error                 { return nil }
func (f *bytesFile) Close() error                { f.closed = true; return nil }
func (f *bytesFile) Stat() (os.FileInfo, error)  { return bytesFileInfo(len(f.data)), nil }

type bytesFileInfo int64

func (s bytesFileInfo) Name() string       { return "table" }
func (s bytesFileInfo) Size() int64        { return int64(s) }
func (s bytesFileInfo) Mode() os.FileMode  { return 0o644 }
func (s bytesFileInfo) ModTime() time.Time { return time.Time{} }
func (s bytesFileInfo) IsDir() bool        { return false }
func (s bytesFileInfo) Sys() any           { return nil }

// countingFile counts the ReadAt calls made on a file.
type countingFile struct {
	vfs.File
	reads atomic.Int64
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.File.ReadAt(p, off)
}

// kv is one point entry of a model table.
type kv struct {
	key, value []byte // key is an encoded internal key
}

// tableSpec is what a test writes into a table.
type tableSpec struct {
	points     []kv // sorted by base.InternalCompare
	tombstones []base.RangeTombstone
}

// randomSpec returns n random point entries over about n/versions user keys,
// with up to `versions` versions each, and a few tombstones if tombs.
func randomSpec(rng *rand.Rand, n, versions int, tombs bool) tableSpec {
	var spec tableSpec
	seq := base.SeqNum(1)
	nKeys := max(1, n/versions)
	ukeys := make(map[string]bool)
	for len(ukeys) < nKeys {
		// Keys with shared prefixes of various lengths, some long.
		k := fmt.Sprintf("key-%06d-%s", rng.IntN(nKeys*10), bytes.Repeat([]byte{'x'}, rng.IntN(4)*rng.IntN(30)))
		if rng.IntN(50) == 0 {
			k += string(bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, 250+rng.IntN(100)))
		}
		ukeys[k] = true
	}
	for k := range ukeys {
		nv := 1 + rng.IntN(versions)
		for v := 0; v < nv && len(spec.points) < n; v++ {
			kind := base.KindSet
			switch rng.IntN(10) {
			case 0:
				kind = base.KindDelete
			case 1:
				kind = base.KindBlobIndex
			}
			var val []byte
			if kind != base.KindDelete {
				val = make([]byte, rng.IntN(64))
				for i := range val {
					val[i] = byte('a' + rng.IntN(4)) // Compressible.
				}
			}
			seq += base.SeqNum(1 + rng.IntN(3))
			spec.points = append(spec.points, kv{base.MakeInternalKey(nil, []byte(k), seq, kind), val})
		}
	}
	slices.SortFunc(spec.points, func(a, b kv) int { return base.InternalCompare(a.key, b.key) })
	if tombs {
		var start []byte
		for i := 0; i < 1+rng.IntN(5); i++ {
			lo := fmt.Sprintf("key-%06d", rng.IntN(nKeys*10))
			if start != nil && lo <= string(start) {
				continue
			}
			hi := lo + "~"
			for j := 0; j < 1+rng.IntN(3); j++ {
				spec.tombstones = append(spec.tombstones, base.RangeTombstone{Start: []byte(lo), End: []byte(hi), Seq: base.SeqNum(1000 - j)})
			}
			start = []byte(hi)
		}
	}
	return spec
}

// write writes spec into a table, interleaving tombstones with points, and
// returns its bytes.
func writeTable(t testing.TB, spec tableSpec, opts WriterOptions) ([]byte, Metadata) {
	t.Helper()
	f := &bytesFile{}
	w := NewWriter(f, opts)
	ti := 0
	for i, p := range spec.points {
		// Add tombstones along the way, as a flush would.
		if ti < len(spec.tombstones) && i%7 == 3 {
			tb := spec.tombstones[ti]
			if err := w.AddRangeTombstone(tb.Start, tb.End, tb.Seq); err != nil {
				t.Fatal(err)
			}
			ti++
		}
		if err := w.Add(p.key, p.value); err != nil {
			t.Fatal(err)
		}
	}
	for ; ti < len(spec.tombstones); ti++ {
		tb := spec.tombstones[ti]
		if err := w.AddRangeTombstone(tb.Start, tb.End, tb.Seq); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if m.Size != uint64(len(f.data)) {
		t.Fatalf("metadata size %d, file %d", m.Size, len(f.data))
	}
	return f.data, m
}

func openTable(t testing.TB, data []byte, c *cache.Cache) *Reader {
	t.Helper()
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkCacheClosed(t, c)
	return r
}

// checkCacheClosed closes c when the test ends (after its deferred Closes)
// and fails the test if a block handle is still outstanding then: every
// Get released its block and every iterator its current one.
func checkCacheClosed(t testing.TB, c *cache.Cache) {
	t.Cleanup(func() {
		if c == nil {
			return
		}
		if m := c.Metrics(); m.Pinned != 0 {
			t.Errorf("%d block references still held at the end of the test", m.Pinned)
		}
		if err := c.Close(); err != nil {
			t.Errorf("closing the cache: %v", err)
		}
		if m := c.Metrics(); m.MappedBytes != 0 || m.LiveBytes != 0 || m.Buffers != 0 {
			t.Errorf("cache closed with memory mapped: %+v", m)
		}
	})
}

// getCopy is Reader.Get returning a copy of the value, its block released.
func getCopy(r *Reader, ukey []byte, snap base.SeqNum, h uint64) ([]byte, base.Kind, base.SeqNum, bool, error) {
	v, kind, seq, found, rel, err := r.Get(ukey, snap, h)
	v = slices.Clone(v)
	rel.Release()
	return v, kind, seq, found, err
}

// modelGet returns the newest entry of ukey with seq < snap.
func modelGet(points []kv, ukey []byte, snap base.SeqNum) (kv, bool) {
	for _, p := range points {
		if bytes.Equal(base.UserKey(p.key), ukey) && base.DecodeTrailer(p.key).SeqNum() < snap {
			return p, true // Newest first within a user key.
		}
	}
	return kv{}, false
}

// modelSeekGE returns the index of the first point >= key.
func modelSeekGE(points []kv, key []byte) int {
	i, _ := slices.BinarySearchFunc(points, key, func(p kv, k []byte) int { return base.InternalCompare(p.key, k) })
	return i
}

// collect iterates it forward from First and returns the entries (copied).
func collect(it base.InternalIterator) []kv {
	var out []kv
	for it.First(); it.Valid(); it.Next() {
		out = append(out, kv{slices.Clone(it.Key()), slices.Clone(it.Value())})
	}
	return out
}

func collectReverse(it base.InternalIterator) []kv {
	var out []kv
	for it.Last(); it.Valid(); it.Prev() {
		out = append(out, kv{slices.Clone(it.Key()), slices.Clone(it.Value())})
	}
	slices.Reverse(out)
	return out
}

func equalKVs(a, b []kv) bool {
	return slices.EqualFunc(a, b, func(x, y kv) bool { return bytes.Equal(x.key, y.key) && bytes.Equal(x.value, y.value) })
}

// hashOf is filter.Hash, named for brevity.
func hashOf(ukey []byte) uint64 { return filter.Hash(ukey) }
