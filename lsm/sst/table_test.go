package sst

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

var allCompressions = []Compression{NoCompression, SnappyCompression, ZstdCompression}

func TestTableRoundTrip(t *testing.T) {
	for _, comp := range allCompressions {
		for _, blockSize := range []int{64, 512, 4096} {
			for seed := uint64(0); seed < 3; seed++ {
				name := fmt.Sprintf("%s/block=%d/seed=%d", comp, blockSize, seed)
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, uint64(blockSize)))
					spec := randomSpec(rng, 200+rng.IntN(2000), 3, true)
					opts := WriterOptions{BlockSize: blockSize, BlockRestartInterval: 1 + rng.IntN(20),
						Compression: comp, FilterBitsPerKey: 10}
					data, meta := writeTable(t, spec, opts)
					var c *cache.Cache
					if seed != 0 {
						c = cache.New(1 << 20) // Seed 0 runs without a cache.
					}
					r := openTable(t, data, c)
					defer r.Close()
					checkTable(t, rng, r, spec)
					checkMetadata(t, r, meta, spec, opts)
				})
			}
		}
	}
}

// checkTable compares everything r returns with spec.
func checkTable(t *testing.T, rng *rand.Rand, r *Reader, spec tableSpec) {
	t.Helper()
	it := r.NewIter()
	if got := collect(it); !equalKVs(got, spec.points) || it.Error() != nil {
		t.Fatalf("forward scan: %d entries (err %v), want %d", len(got), it.Error(), len(spec.points))
	}
	if got := collectReverse(it); !equalKVs(got, spec.points) || it.Error() != nil {
		t.Fatalf("reverse scan: %d entries (err %v), want %d", len(got), it.Error(), len(spec.points))
	}
	checkSeeks(t, rng, it, spec.points, 300)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}

	tombs := r.RangeTombstones()
	if !slices.EqualFunc(tombs, spec.tombstones, func(a, b base.RangeTombstone) bool {
		return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && a.Seq == b.Seq
	}) {
		t.Fatalf("tombstones %v, want %v", tombs, spec.tombstones)
	}

	// Get every user key at several snapshots, and some absent keys.
	for i := 0; i < 300; i++ {
		p := spec.points[rng.IntN(len(spec.points))]
		ukey := base.UserKey(p.key)
		if rng.IntN(4) == 0 {
			ukey = append(slices.Clone(ukey), '!') // Absent.
		}
		snap := base.DecodeTrailer(p.key).SeqNum() + base.SeqNum(rng.IntN(3))
		if rng.IntN(5) == 0 {
			snap = base.SeqNumMax
		}
		checkGet(t, r, spec.points, ukey, snap)
	}
}

func checkGet(t *testing.T, r *Reader, points []kv, ukey []byte, snap base.SeqNum) {
	t.Helper()
	val, kind, seq, found, err := getCopy(r, ukey, snap, hashOf(ukey))
	if err != nil {
		t.Fatal(err)
	}
	want, ok := modelGet(points, ukey, snap)
	if found != ok {
		t.Fatalf("Get(%q, %d): found %v, want %v", ukey, snap, found, ok)
	}
	if !ok {
		return
	}
	tr := base.DecodeTrailer(want.key)
	if !bytes.Equal(val, want.value) || kind != tr.Kind() || seq != tr.SeqNum() {
		t.Fatalf("Get(%q, %d) = %q %s#%d, want %q %s#%d", ukey, snap, val, kind, seq, want.value, tr.Kind(), tr.SeqNum())
	}
}

// checkSeeks runs random seeks, each followed by a random walk, against the
// model.
func checkSeeks(t *testing.T, rng *rand.Rand, it base.InternalIterator, points []kv, n int) {
	t.Helper()
	for q := 0; q < n; q++ {
		target := randomTarget(rng, points)
		pos := modelSeekGE(points, target)
		switch rng.IntN(4) {
		case 0:
			it.SeekGE(target)
		case 1:
			it.SeekLT(target)
			pos--
		case 2:
			it.First()
			pos = 0
		default:
			it.Last()
			pos = len(points) - 1
		}
		for step := 0; step < 8; step++ {
			if want := pos >= 0 && pos < len(points); it.Valid() != want {
				t.Fatalf("seek %d step %d: valid %v, want %v (err %v)", q, step, it.Valid(), want, it.Error())
			}
			if !it.Valid() {
				break
			}
			if !bytes.Equal(it.Key(), points[pos].key) || !bytes.Equal(it.Value(), points[pos].value) {
				t.Fatalf("seek %d step %d: at %s, want %s", q, step, base.FormatInternalKey(it.Key()), base.FormatInternalKey(points[pos].key))
			}
			if rng.IntN(2) == 0 {
				it.Next()
				pos++
			} else {
				it.Prev()
				pos--
			}
		}
		if it.Error() != nil {
			t.Fatal(it.Error())
		}
	}
}

func checkMetadata(t *testing.T, r *Reader, m Metadata, spec tableSpec, opts WriterOptions) {
	t.Helper()
	var dels uint64
	var keySize, valSize uint64
	smallestSeq, largestSeq := base.SeqNumMax, base.SeqNum(0)
	for _, p := range spec.points {
		tr := base.DecodeTrailer(p.key)
		if tr.Kind() == base.KindDelete {
			dels++
		}
		keySize += uint64(len(p.key))
		valSize += uint64(len(p.value))
		smallestSeq, largestSeq = min(smallestSeq, tr.SeqNum()), max(largestSeq, tr.SeqNum())
	}
	var smallest, largest []byte
	if len(spec.points) > 0 {
		smallest, largest = spec.points[0].key, spec.points[len(spec.points)-1].key
	}
	for _, tb := range spec.tombstones {
		smallestSeq, largestSeq = min(smallestSeq, tb.Seq), max(largestSeq, tb.Seq)
		if k := base.MakeInternalKey(nil, tb.Start, tb.Seq, base.KindRangeDelete); smallest == nil || base.InternalCompare(k, smallest) < 0 {
			smallest = k
		}
		if k := base.MakeRangeDeleteSentinel(nil, tb.End); largest == nil || base.InternalCompare(k, largest) > 0 {
			largest = k
		}
	}
	if !bytes.Equal(m.Smallest, smallest) || !bytes.Equal(m.Largest, largest) {
		t.Fatalf("bounds [%s, %s], want [%s, %s]", base.FormatInternalKey(m.Smallest), base.FormatInternalKey(m.Largest),
			base.FormatInternalKey(smallest), base.FormatInternalKey(largest))
	}
	if m.NumEntries != uint64(len(spec.points)) || m.NumDeletions != dels || m.NumRangeDeletions != uint64(len(spec.tombstones)) ||
		m.SmallestSeq != smallestSeq || m.LargestSeq != largestSeq || m.HasPoints != (len(spec.points) > 0) {
		t.Fatalf("metadata %+v", m)
	}
	p := r.Properties()
	if p.NumEntries != m.NumEntries || p.NumDeletions != dels || p.NumRangeDeletions != m.NumRangeDeletions ||
		p.RawKeySize != keySize || p.RawValueSize != valSize || p.SmallestSeq != smallestSeq || p.LargestSeq != largestSeq ||
		p.Compression != opts.Compression || p.CreationTime == 0 || p.IndexSize == 0 ||
		(p.FilterSize == 0) != (opts.FilterBitsPerKey == 0 || len(spec.points) == 0) ||
		p.DataSize+p.IndexSize+p.FilterSize >= m.Size {
		t.Fatalf("properties %+v for metadata %+v", p, m)
	}
	if len(spec.points) > 0 && opts.BlockSize <= 512 && p.NumDataBlocks < 2 {
		t.Fatalf("only %d data blocks with %d-byte blocks", p.NumDataBlocks, opts.BlockSize)
	}
}

func TestCompressionShrinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	spec := randomSpec(rng, 3000, 1, false)
	sizes := map[Compression]uint64{}
	for _, c := range allCompressions {
		_, m := writeTable(t, spec, WriterOptions{Compression: c})
		sizes[c] = m.Size
	}
	if sizes[SnappyCompression] >= sizes[NoCompression]*7/8 || sizes[ZstdCompression] >= sizes[NoCompression]*7/8 {
		t.Fatalf("compressed sizes %v", sizes)
	}
}

func TestIncompressibleStoredRaw(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	var spec tableSpec
	for i := 0; i < 200; i++ {
		v := make([]byte, 100)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		spec.points = append(spec.points, kv{base.MakeInternalKey(nil, fmt.Appendf(nil, "k%05d", i), 1, base.KindSet), v})
	}
	data, _ := writeTable(t, spec, WriterOptions{Compression: ZstdCompression})
	r := openTable(t, data, nil)
	defer r.Close()
	var it blockIter
	it.init(r.index)
	for it.first(); it.valid; it.next() {
		h, _ := decodeHandle(it.value())
		if typ := data[h.offset+h.length]; typ != byte(NoCompression) {
			t.Fatalf("incompressible block at %d stored with type %d", h.offset, typ)
		}
	}
}

func TestGetSnapshots(t *testing.T) {
	// One user key with versions 10, 8, 6, 4 (a DEL at 6), split over
	// tiny blocks so that versions straddle block boundaries.
	var spec tableSpec
	for _, uk := range []string{"a", "k", "z"} {
		for _, seq := range []base.SeqNum{10, 8, 6, 4} {
			kind, val := base.KindSet, fmt.Appendf(nil, "%s@%d", uk, seq)
			if seq == 6 {
				kind, val = base.KindDelete, nil
			}
			spec.points = append(spec.points, kv{base.MakeInternalKey(nil, []byte(uk), seq, kind), val})
		}
	}
	for _, blockSize := range []int{1, 4096} {
		data, _ := writeTable(t, spec, WriterOptions{BlockSize: blockSize, FilterBitsPerKey: 10})
		r := openTable(t, data, cache.New(1<<20))
		for _, uk := range []string{"a", "k", "z", "b", "", "zz"} {
			for snap := base.SeqNum(0); snap <= 12; snap++ {
				checkGet(t, r, spec.points, []byte(uk), snap)
			}
			checkGet(t, r, spec.points, []byte(uk), base.SeqNumMax)
		}
		r.Close()
	}
}

// TestGetAbsentReadsNoBlock checks that a key the filter rules out costs no
// data block read, from the cache or the file.
func TestGetAbsentReadsNoBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	spec := randomSpec(rng, 2000, 1, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 1024, FilterBitsPerKey: 10})
	c := cache.New(1 << 20)
	checkCacheClosed(t, c)
	f := &countingFile{File: &bytesFile{data: data}}
	r, err := NewReader(f, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reads, m := f.reads.Load(), c.Metrics()
	ruledOut := 0
	const absent = 2000
	for i := 0; i < absent; i++ {
		ukey := fmt.Appendf(nil, "absent-%d", i)
		h := hashOf(ukey)
		if r.MayContain(h) {
			continue
		}
		ruledOut++
		if _, _, _, found, err := getCopy(r, ukey, base.SeqNumMax, h); found || err != nil {
			t.Fatalf("Get(%q) = %v, %v", ukey, found, err)
		}
	}
	if got := f.reads.Load(); got != reads {
		t.Fatalf("%d file reads for keys the filter ruled out", got-reads)
	}
	if m2 := c.Metrics(); m2.Hits != m.Hits || m2.Misses != m.Misses {
		t.Fatalf("cache consulted for keys the filter ruled out: %+v then %+v", m, m2)
	}
	// 10 bits per key: about 1% false positives.
	if ruledOut < absent*95/100 {
		t.Fatalf("filter ruled out only %d of %d absent keys", ruledOut, absent)
	}
	// A present key is never ruled out, and is read once, then cached.
	for _, p := range spec.points[:50] {
		if !r.MayContain(hashOf(base.UserKey(p.key))) {
			t.Fatalf("filter false negative for %q", base.UserKey(p.key))
		}
	}
	p := spec.points[len(spec.points)/2]
	for i := 0; i < 2; i++ {
		before := f.reads.Load()
		if _, _, _, found, err := getCopy(r, base.UserKey(p.key), base.SeqNumMax, hashOf(base.UserKey(p.key))); !found || err != nil {
			t.Fatalf("Get(present) = %v, %v", found, err)
		}
		if want := int64(1 - i); f.reads.Load()-before != want {
			t.Fatalf("Get #%d read %d blocks, want %d", i, f.reads.Load()-before, want)
		}
	}
}

func TestNoFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	spec := randomSpec(rng, 300, 2, false)
	data, _ := writeTable(t, spec, WriterOptions{})
	r := openTable(t, data, nil)
	defer r.Close()
	if !r.MayContain(hashOf([]byte("anything"))) || r.Properties().FilterSize != 0 {
		t.Fatal("table without a filter rules keys out")
	}
	checkTable(t, rng, r, spec)
}

func TestGetHitDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	spec := randomSpec(rng, 2000, 2, false)
	data, _ := writeTable(t, spec, WriterOptions{FilterBitsPerKey: 10})
	r := openTable(t, data, cache.New(8<<20))
	defer r.Close()
	// Warm the cache.
	for it := r.NewIter(); ; {
		collect(it)
		it.Close()
		break
	}
	var keys [][]byte
	for _, p := range spec.points {
		if uk := base.UserKey(p.key); len(uk) <= inlineKeyLen-8 {
			keys = append(keys, uk)
		}
	}
	i := 0
	// AllocsPerRun counts the whole process's allocations (integer
	// division by the runs): goroutines an earlier test left winding down
	// can add a few thousand on a loaded machine. A Get that allocates
	// does so in every attempt; one clean attempt of five is a pass.
	var allocs float64
	for range 5 {
		allocs = testing.AllocsPerRun(2000, func() {
			k := keys[i%len(keys)]
			i++
			if _, _, _, found, err := getCopy(r, k, base.SeqNumMax, hashOf(k)); !found || err != nil {
				t.Fatalf("Get(%q): %v %v", k, found, err)
			}
		})
		if allocs == 0 {
			return
		}
	}
	t.Fatalf("Get with a warm cache allocates %.2f times per call", allocs)
}

func TestRangeTombstoneOnlyTable(t *testing.T) {
	spec := tableSpec{tombstones: []base.RangeTombstone{
		{Start: []byte("a"), End: []byte("c"), Seq: 9},
		{Start: []byte("a"), End: []byte("c"), Seq: 3},
		{Start: []byte("c"), End: []byte("f"), Seq: 5},
		{Start: []byte("m"), End: []byte("n"), Seq: 7},
	}}
	data, m := writeTable(t, spec, WriterOptions{FilterBitsPerKey: 10})
	if m.HasPoints || m.NumRangeDeletions != 4 || m.SmallestSeq != 3 || m.LargestSeq != 9 {
		t.Fatalf("metadata %+v", m)
	}
	if want := base.MakeInternalKey(nil, []byte("a"), 9, base.KindRangeDelete); !bytes.Equal(m.Smallest, want) {
		t.Fatalf("smallest %s", base.FormatInternalKey(m.Smallest))
	}
	if !bytes.Equal(m.Largest, base.MakeRangeDeleteSentinel(nil, []byte("n"))) {
		t.Fatalf("largest %s", base.FormatInternalKey(m.Largest))
	}
	r := openTable(t, data, cache.New(1<<20))
	defer r.Close()
	rng := rand.New(rand.NewPCG(8, 8))
	checkMetadata(t, r, m, spec, WriterOptions{FilterBitsPerKey: 10})
	if got := r.RangeTombstones(); len(got) != 4 || string(got[3].Start) != "m" || got[1].Seq != 3 {
		t.Fatalf("tombstones %v", got)
	}
	it := r.NewIter()
	if it.First(); it.Valid() || it.Error() != nil {
		t.Fatal("tombstone-only table has point entries")
	}
	if it.SeekLT([]byte("zzzzzzzzzz")); it.Valid() || it.Error() != nil {
		t.Fatal("tombstone-only table has point entries")
	}
	it.Close()
	if _, _, _, found, err := getCopy(r, []byte("b"), base.SeqNumMax, hashOf([]byte("b"))); found || err != nil {
		t.Fatalf("Get in tombstone-only table: %v %v", found, err)
	}
	_ = rng
}

func TestBoundsFromTombstoneAndPoints(t *testing.T) {
	// Largest comes from a point at the tombstone's end key: the
	// sentinel sorts before it.
	spec := tableSpec{
		points:     []kv{{base.MakeInternalKey(nil, []byte("b"), 5, base.KindSet), []byte("x")}, {base.MakeInternalKey(nil, []byte("d"), 1, base.KindSet), nil}},
		tombstones: []base.RangeTombstone{{Start: []byte("a"), End: []byte("d"), Seq: 3}},
	}
	_, m := writeTable(t, spec, WriterOptions{})
	if !bytes.Equal(m.Smallest, base.MakeInternalKey(nil, []byte("a"), 3, base.KindRangeDelete)) ||
		!bytes.Equal(m.Largest, spec.points[1].key) {
		t.Fatalf("bounds [%s, %s]", base.FormatInternalKey(m.Smallest), base.FormatInternalKey(m.Largest))
	}
}

func TestWriterRejects(t *testing.T) {
	k := func(uk string, seq base.SeqNum, kind base.Kind) []byte {
		return base.MakeInternalKey(nil, []byte(uk), seq, kind)
	}
	w := NewWriter(&bytesFile{}, WriterOptions{})
	if _, err := w.Finish(); !errors.Is(err, base.ErrInvalidArgument) {
		t.Fatalf("Finish of an empty table: %v", err)
	}
	w = NewWriter(&bytesFile{}, WriterOptions{})
	mustInvalid := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, base.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
	if err := w.Add(k("b", 5, base.KindSet), nil); err != nil {
		t.Fatal(err)
	}
	mustInvalid("same key", w.Add(k("b", 5, base.KindSet), nil))
	mustInvalid("older key", w.Add(k("a", 9, base.KindSet), nil))
	mustInvalid("same user key, newer seq", w.Add(k("b", 6, base.KindSet), nil))
	mustInvalid("range delete kind", w.Add(k("c", 1, base.KindRangeDelete), nil))
	mustInvalid("short key", w.Add([]byte("abc"), nil))
	mustInvalid("unknown kind", w.Add(k("c", 1, base.Kind(9)), nil))
	if err := w.Add(k("b", 4, base.KindDelete), nil); err != nil {
		t.Fatal(err)
	}
	mustInvalid("empty tombstone", w.AddRangeTombstone([]byte("x"), []byte("x"), 1))
	if err := w.AddRangeTombstone([]byte("c"), []byte("e"), 5); err != nil {
		t.Fatal(err)
	}
	mustInvalid("same start, other end", w.AddRangeTombstone([]byte("c"), []byte("f"), 4))
	mustInvalid("same start, newer seq", w.AddRangeTombstone([]byte("c"), []byte("e"), 6))
	mustInvalid("overlapping", w.AddRangeTombstone([]byte("d"), []byte("g"), 1))
	if err := w.AddRangeTombstone([]byte("e"), []byte("g"), 9); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(k("z", 1, base.KindSet), nil); err == nil {
		t.Fatal("Add after Finish succeeded")
	}
	if _, err := w.Finish(); err == nil {
		t.Fatal("second Finish succeeded")
	}
}

// errFile fails every write.
type errFile struct{ bytesFile }

func (f *errFile) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterWriteError(t *testing.T) {
	w := NewWriter(&errFile{}, WriterOptions{BlockSize: 10})
	var err error
	for i := 0; i < 100000 && err == nil; i++ {
		err = w.Add(base.MakeInternalKey(nil, fmt.Appendf(nil, "%08d", i), 1, base.KindSet), make([]byte, 100))
	}
	if err == nil {
		_, err = w.Finish()
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write error not reported: %v", err)
	}
}

func TestWithMemFS(t *testing.T) {
	fs := vfs.NewMem()
	f, err := fs.Create("000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	spec := randomSpec(rng, 500, 2, true)
	w := NewWriter(f, WriterOptions{Compression: SnappyCompression, FilterBitsPerKey: 10})
	for _, p := range spec.points {
		if err := w.Add(p.key, p.value); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range spec.tombstones {
		if err := w.AddRangeTombstone(tb.Start, tb.End, tb.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rf, err := fs.Open("000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(rf, ReaderOptions{FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, rng, r, spec)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestIterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	spec := randomSpec(rng, 3000, 2, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 256})
	f := &countingFile{File: &bytesFile{data: data}}
	r, err := NewReader(f, ReaderOptions{FileNum: 1}) // No cache: count every block read.
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for q := 0; q < 100; q++ {
		var lower, upper []byte
		if rng.IntN(4) != 0 {
			lower = base.UserKey(spec.points[rng.IntN(len(spec.points))].key)
		}
		if rng.IntN(4) != 0 {
			upper = base.UserKey(spec.points[rng.IntN(len(spec.points))].key)
		}
		var want []kv
		for _, p := range spec.points {
			uk := base.UserKey(p.key)
			if (lower == nil || bytes.Compare(uk, lower) >= 0) && (upper == nil || bytes.Compare(uk, upper) < 0) {
				want = append(want, p)
			}
		}
		it := r.NewIterWithBounds(lower, upper)
		before := f.reads.Load()
		if got := collect(it); !equalKVs(got, want) {
			t.Fatalf("bounds [%q, %q): forward %d entries, want %d", lower, upper, len(got), len(want))
		}
		if lower != nil && upper != nil {
			// Only the blocks holding entries in range are read, and at
			// most one more at each end.
			if n := f.reads.Load() - before; n > int64(len(want))+2 {
				t.Fatalf("bounds [%q, %q) with %d entries read %d blocks", lower, upper, len(want), n)
			}
		}
		if got := collectReverse(it); !equalKVs(got, want) {
			t.Fatalf("bounds [%q, %q): reverse %d entries, want %d", lower, upper, len(got), len(want))
		}
		if len(want) > 0 {
			checkSeeks(t, rng, it, want, 20)
		} else {
			it.SeekGE(spec.points[0].key)
			if it.Valid() {
				t.Fatal("valid iterator over an empty range")
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// rewriteFooterVersion sets the footer's version and recomputes its CRC.
func rewriteFooterVersion(data []byte, v uint32) []byte {
	data = slices.Clone(data)
	ft := data[len(data)-footerLen:]
	binary.LittleEndian.PutUint32(ft[footerHandlesLen:], v)
	binary.LittleEndian.PutUint32(ft[footerHandlesLen+4:], crc32.Checksum(ft[:footerHandlesLen+4], crcTable))
	return data
}

func TestUnknownFormatVersion(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	data, _ := writeTable(t, randomSpec(rng, 100, 1, false), WriterOptions{})
	_, err := NewReader(&bytesFile{data: rewriteFooterVersion(data, 7)}, ReaderOptions{})
	if !errors.Is(err, ErrUnknownFormatVersion) || base.IsCorruption(err) || !strings.Contains(err.Error(), "7") {
		t.Fatalf("NewReader of version 7: %v", err)
	}
	// The same version byte changed without fixing the CRC is damage.
	bad := slices.Clone(data)
	bad[len(bad)-footerLen+footerHandlesLen] = 7
	if _, err := NewReader(&bytesFile{data: bad}, ReaderOptions{}); !base.IsCorruption(err) {
		t.Fatalf("NewReader with a damaged version: %v", err)
	}
}

func TestBadMagicAndTruncation(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	data, _ := writeTable(t, randomSpec(rng, 300, 1, true), WriterOptions{BlockSize: 256, FilterBitsPerKey: 10})
	bad := slices.Clone(data)
	bad[len(bad)-1] ^= 1
	if _, err := NewReader(&bytesFile{data: bad}, ReaderOptions{}); !base.IsCorruption(err) || !strings.Contains(err.Error(), "magic") {
		t.Fatalf("bad magic: %v", err)
	}
	for n := 0; n < len(data); n++ {
		f := &bytesFile{data: data[:n]}
		if _, err := NewReader(f, ReaderOptions{}); !base.IsCorruption(err) {
			t.Fatalf("table truncated to %d of %d bytes: %v", n, len(data), err)
		}
		if f.closed {
			t.Fatal("NewReader closed the file on error")
		}
	}
	// A table whose tail is intact but whose middle is cut out.
	cut := append(slices.Clone(data[:len(data)/2]), data[len(data)-footerLen:]...)
	if _, err := NewReader(&bytesFile{data: cut}, ReaderOptions{}); !base.IsCorruption(err) {
		t.Fatalf("table with its middle cut out: %v", err)
	}
}

func TestReaderClose(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	data, _ := writeTable(t, randomSpec(rng, 10, 1, false), WriterOptions{})
	f := &bytesFile{data: data}
	r, err := NewReader(f, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil || !f.closed {
		t.Fatalf("Close: %v, file closed %v", err, f.closed)
	}
	if err := r.Close(); !errors.Is(err, base.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConcurrentReaders runs Gets and iterators of two tables sharing one
// small cache from several goroutines (meaningful under -race).
func TestConcurrentReaders(t *testing.T) {
	c := cache.New(64 << 10) // Small: blocks are evicted while in use.
	checkCacheClosed(t, c)
	type table struct {
		r    *Reader
		spec tableSpec
	}
	var tables []table
	for i := 0; i < 2; i++ {
		rng := rand.New(rand.NewPCG(20, uint64(i)))
		spec := randomSpec(rng, 1500, 2, false)
		data, _ := writeTable(t, spec, WriterOptions{BlockSize: 512, Compression: SnappyCompression, FilterBitsPerKey: 10})
		r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		tables = append(tables, table{r, spec})
	}
	errc := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(21, uint64(g)))
			tb := tables[g%2]
			var err error
			for i := 0; i < 300 && err == nil; i++ {
				p := tb.spec.points[rng.IntN(len(tb.spec.points))]
				uk := base.UserKey(p.key)
				want, _ := modelGet(tb.spec.points, uk, base.SeqNumMax)
				val, _, _, found, gerr := getCopy(tb.r, uk, base.SeqNumMax, hashOf(uk))
				switch {
				case gerr != nil:
					err = gerr
				case !found || !bytes.Equal(val, want.value):
					err = fmt.Errorf("Get(%q) = %q, %v", uk, val, found)
				}
				if i%50 == 0 {
					it := tb.r.NewIter()
					if got := collect(it); !equalKVs(got, tb.spec.points) {
						err = fmt.Errorf("concurrent scan returned %d entries", len(got))
					}
					it.Close()
				}
			}
			errc <- err
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestIterPinsBlock reads other keys through a tiny cache between every
// step of an iterator, evicting every block and reusing its memory many
// times over: the iterator's current key and value must stay intact until
// its next positioning call, because it holds its block's handle.
func TestIterPinsBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 31))
	spec := randomSpec(rng, 2000, 2, false)
	data, _ := writeTable(t, spec, WriterOptions{BlockSize: 512, Compression: SnappyCompression, FilterBitsPerKey: 10})
	c := cache.New(16 << 10) // A few blocks.
	checkCacheClosed(t, c)
	r, err := NewReader(&bytesFile{data: data}, ReaderOptions{Cache: c, CacheID: c.NewID(), FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	churn := func() {
		for i := 0; i < 20; i++ {
			p := spec.points[rng.IntN(len(spec.points))]
			if _, _, _, found, err := getCopy(r, base.UserKey(p.key), base.SeqNumMax, hashOf(base.UserKey(p.key))); !found || err != nil {
				t.Fatalf("churn Get: %v %v", found, err)
			}
		}
	}
	it := r.NewIter()
	defer it.Close()
	i := 0
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value() // Views, valid until Next.
		churn()
		if !bytes.Equal(k, spec.points[i].key) || !bytes.Equal(v, spec.points[i].value) {
			t.Fatalf("entry %d changed under the iterator", i)
		}
		i++
	}
	if err := it.Error(); err != nil || i != len(spec.points) {
		t.Fatalf("%d entries, %v", i, err)
	}
	// Point lookups: the value is intact until its handle's release.
	for q := 0; q < 200; q++ {
		p := spec.points[rng.IntN(len(spec.points))]
		want, _ := modelGet(spec.points, base.UserKey(p.key), base.SeqNumMax)
		v, _, _, found, rel, err := r.Get(base.UserKey(p.key), base.SeqNumMax, hashOf(base.UserKey(p.key)))
		if err != nil || !found {
			t.Fatal(found, err)
		}
		churn()
		if !bytes.Equal(v, want.value) {
			t.Fatalf("Get's value changed before its release")
		}
		rel.Release()
	}
}
