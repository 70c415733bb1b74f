package sst

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
)

// smallSpec is a table with a few data blocks, a filter and tombstones.
func smallSpec() tableSpec {
	var spec tableSpec
	for i := 0; i < 24; i++ {
		uk := fmt.Appendf(nil, "key%03d", i*3)
		for _, seq := range []base.SeqNum{base.SeqNum(100 + i), base.SeqNum(10 + i)} {
			kind := base.KindSet
			val := bytes.Repeat(fmt.Appendf(nil, "v%d.", i), 1+i%4)
			if i%5 == 0 && seq < 100 {
				kind, val = base.KindDelete, nil
			}
			spec.points = append(spec.points, kv{base.MakeInternalKey(nil, uk, seq, kind), val})
		}
	}
	spec.tombstones = []base.RangeTombstone{
		{Start: []byte("key010"), End: []byte("key020"), Seq: 50},
		{Start: []byte("key010"), End: []byte("key020"), Seq: 40},
		{Start: []byte("key030"), End: []byte("key031"), Seq: 60},
	}
	return spec
}

// exerciseTable opens data and runs every read operation. Each must either
// fail with a corruption error or return exactly what spec holds (and what
// want, the intact table's properties, says). It reports whether any
// operation failed; any other outcome fails the test.
func exerciseTable(t testing.TB, data []byte, spec tableSpec, want Properties) (failed bool) {
	t.Helper()
	check := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			return false
		}
		if !base.IsCorruption(err) {
			t.Fatalf("%s: error %v is not a corruption", what, err)
		}
		failed = true
		return true
	}
	// A fresh cache: blocks of the intact table must not leak in.
	c := cache.New(1 << 20)
	checkCacheClosed(t, c)
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
	if check("NewReader", err) {
		return true
	}
	defer r.Close()
	if got := r.Properties(); got != want {
		t.Fatalf("properties %+v, want %+v", got, want)
	}
	if got := r.RangeTombstones(); !slices.EqualFunc(got, spec.tombstones, func(a, b base.RangeTombstone) bool {
		return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && a.Seq == b.Seq
	}) {
		t.Fatalf("tombstones %v, want %v", got, spec.tombstones)
	}

	// Point lookups first, while the cache is cold.
	for i := 0; i < len(spec.points); i += 3 {
		ukey := base.UserKey(spec.points[i].key)
		for _, snap := range []base.SeqNum{base.SeqNumMax, 50} {
			val, kind, seq, found, err := getCopy(r, ukey, snap, hashOf(ukey))
			if check("Get", err) {
				continue
			}
			w, ok := modelGet(spec.points, ukey, snap)
			if found != ok || (ok && (!bytes.Equal(val, w.value) || base.MakeTrailer(seq, kind) != base.DecodeTrailer(w.key))) {
				t.Fatalf("Get(%q, %d) returned wrong data without an error", ukey, snap)
			}
		}
		absent := append(slices.Clone(ukey), '+')
		if _, _, _, found, err := getCopy(r, absent, base.SeqNumMax, hashOf(absent)); !check("Get absent", err) && found {
			t.Fatalf("Get(%q) found an absent key", absent)
		}
	}

	it := r.NewIter()
	got := collect(it)
	if check("forward scan", it.Error()) {
		if len(got) > len(spec.points) || !equalKVs(got, spec.points[:len(got)]) {
			t.Fatal("forward scan returned wrong entries before its error")
		}
	} else if !equalKVs(got, spec.points) {
		t.Fatal("forward scan returned wrong entries without an error")
	}
	it.Close()

	it = r.NewIter()
	var rev []kv
	for it.Last(); it.Valid(); it.Prev() {
		rev = append(rev, kv{slices.Clone(it.Key()), slices.Clone(it.Value())})
	}
	slices.Reverse(rev)
	if check("reverse scan", it.Error()) {
		if len(rev) > len(spec.points) || !equalKVs(rev, spec.points[len(spec.points)-len(rev):]) {
			t.Fatal("reverse scan returned wrong entries before its error")
		}
	} else if !equalKVs(rev, spec.points) {
		t.Fatal("reverse scan returned wrong entries without an error")
	}
	it.Close()

	it = r.NewIter()
	for i := 0; i < len(spec.points); i += 5 {
		it.SeekGE(spec.points[i].key)
		if check("SeekGE", it.Error()) {
			break
		}
		if !it.Valid() || !bytes.Equal(it.Key(), spec.points[i].key) || !bytes.Equal(it.Value(), spec.points[i].value) {
			t.Fatal("SeekGE returned a wrong entry without an error")
		}
	}
	it.Close()
	return failed
}

// TestCorruptionSweep damages a small table at every byte, for every
// compression: every read either reports a corruption or returns exactly the
// original data, and every damage is detected by some read (every byte of a
// table is covered by a checksum).
func TestCorruptionSweep(t *testing.T) {
	spec := smallSpec()
	for _, comp := range allCompressions {
		t.Run(comp.String(), func(t *testing.T) {
			data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, Compression: comp, FilterBitsPerKey: 10})
			r := openTable(t, data, nil)
			props := r.Properties()
			r.Close()
			if props.NumDataBlocks < 3 {
				t.Fatalf("only %d data blocks", props.NumDataBlocks)
			}
			if exerciseTable(t, data, spec, props) {
				t.Fatal("the intact table fails")
			}
			rng := rand.New(rand.NewPCG(uint64(comp), 1))
			for pos := range data {
				bad := slices.Clone(data)
				bad[pos] ^= 1 << rng.IntN(8)
				if !exerciseTable(t, bad, spec, props) {
					t.Fatalf("flipped bit at offset %d of %d went unnoticed", pos, len(data))
				}
			}
		})
	}
}

// FuzzReader damages a valid small table with arbitrary byte changes: open,
// iterate and Get never panic, and when they report no error they return
// exactly the data written.
func FuzzReader(f *testing.F) {
	spec := smallSpec()
	var tables [][]byte
	var props []Properties
	for _, comp := range allCompressions {
		data, _ := writeTable(f, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, Compression: comp, FilterBitsPerKey: 10})
		r := openTable(f, data, nil)
		tables, props = append(tables, data), append(props, r.Properties())
		r.Close()
	}
	// Each mutation is 3 bytes: a little-endian uint16 position (modulo
	// the table's size) and a byte XORed in there.
	f.Add(uint8(0), []byte{})
	f.Add(uint8(1), []byte{10, 0, 0xff})
	f.Add(uint8(2), []byte{0, 1, 1, 50, 0, 0x80})
	f.Add(uint8(0), []byte{0xff, 0xff, 0x01})
	f.Add(uint8(1), []byte{200, 0, 0x10, 201, 0, 0x10, 202, 0, 0x10})
	f.Fuzz(func(t *testing.T, which uint8, muts []byte) {
		i := int(which) % len(tables)
		data := slices.Clone(tables[i])
		for j := 0; j+3 <= len(muts); j += 3 {
			pos := int(binary.LittleEndian.Uint16(muts[j:])) % len(data)
			data[pos] ^= muts[j+2]
		}
		exerciseTable(t, data, spec, props[i])
	})
}

// tableBlocks returns the handles of every block of an intact table.
func tableBlocks(t *testing.T, data []byte) []blockHandle {
	t.Helper()
	ft, err := decodeFooter(data[len(data)-footerLen:], uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	hs := []blockHandle{ft.metaindex, ft.index}
	r := openTable(t, data, nil)
	defer r.Close()
	var it blockIter
	it.init(r.index)
	for it.first(); it.valid; it.next() {
		h, _ := decodeHandle(it.value())
		hs = append(hs, h)
	}
	meta, err := r.readBlock(ft.metaindex, metaBlockKind, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	it.init(meta)
	for it.first(); it.valid; it.next() {
		h, _ := decodeHandle(it.value())
		hs = append(hs, h)
	}
	return hs
}

// TestDamageUnderValidChecksums changes each byte of each block and then
// fixes the block's checksum, as a bug or a crafted file would: the checksum
// no longer helps, so block verification must. Nothing panics, every error
// is a corruption, and what the iterator returns is still strictly ordered.
func TestDamageUnderValidChecksums(t *testing.T) {
	spec := smallSpec()
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256, BlockRestartInterval: 4, FilterBitsPerKey: 10})
	rng := rand.New(rand.NewPCG(14, 14))
	errs := 0
	trials := 0
	for _, h := range tableBlocks(t, data) {
		for pos := h.offset; pos < h.offset+h.length; pos++ {
			bad := slices.Clone(data)
			bad[pos] ^= byte(1 + rng.IntN(255))
			contents := bad[h.offset : h.offset+h.length]
			binary.LittleEndian.PutUint32(bad[h.offset+h.length+1:], blockChecksum(contents, bad[h.offset+h.length]))
			trials++
			if exerciseStructure(t, bad, spec) {
				errs++
			}
		}
	}
	// Most changes to keys, lengths and restart arrays are caught.
	t.Logf("%d of %d damaged tables reported a corruption", errs, trials)
	if errs < trials/4 {
		t.Fatalf("only %d of %d damaged tables reported a corruption", errs, trials)
	}
}

// exerciseStructure runs every read on data, which may be damaged in ways
// checksums do not catch. It reports whether any read failed.
func exerciseStructure(t *testing.T, data []byte, spec tableSpec) (failed bool) {
	t.Helper()
	check := func(err error) bool {
		t.Helper()
		if err != nil && !base.IsCorruption(err) {
			t.Fatalf("error %v is not a corruption", err)
		}
		failed = failed || err != nil
		return err != nil
	}
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{})
	if check(err) {
		return true
	}
	defer r.Close()
	ts := r.RangeTombstones()
	for i := 1; i < len(ts); i++ {
		if bytes.Compare(ts[i-1].Start, ts[i].Start) > 0 {
			t.Fatal("tombstones out of order")
		}
	}
	it := r.NewIter()
	fwd := collect(it)
	fwdErr := check(it.Error())
	for i := 1; i < len(fwd); i++ {
		if base.InternalCompare(fwd[i-1].key, fwd[i].key) >= 0 {
			t.Fatalf("iterator returned %s then %s", base.FormatInternalKey(fwd[i-1].key), base.FormatInternalKey(fwd[i].key))
		}
	}
	rev := collectReverse(it)
	if !check(it.Error()) && !fwdErr && !equalKVs(fwd, rev) {
		t.Fatal("reverse scan differs from forward scan")
	}
	it.Close()
	for _, p := range spec.points {
		uk := base.UserKey(p.key)
		_, _, _, _, err := getCopy(r, uk, base.SeqNumMax, hashOf(uk))
		check(err)
	}
	return failed
}
