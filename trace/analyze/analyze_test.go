package analyze

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/trace"
)

func TestReuseDistances(t *testing.T) {
	// A(10) B(20) C(30) A B B D A
	seq := []struct {
		k    string
		size int64
	}{{"A", 10}, {"B", 20}, {"C", 30}, {"A", 10}, {"B", 20}, {"B", 20}, {"D", 40}, {"A", 10}}
	want := []struct {
		blocks, bytes int64
		seen          bool
	}{{0, 0, false}, {0, 0, false}, {0, 0, false}, {2, 50, true}, {2, 40, true}, {0, 0, true}, {0, 0, false}, {2, 60, true}}
	r := newReuseTracker()
	ids := map[string]int32{}
	for i, s := range seq {
		id, ok := ids[s.k]
		if !ok {
			id = int32(len(ids))
			ids[s.k] = id
		}
		b, by, seen := r.access(id, s.size)
		if b != want[i].blocks || by != want[i].bytes || seen != want[i].seen {
			t.Errorf("access %d (%s): got %d blocks %d bytes seen %v, want %+v", i, s.k, b, by, seen, want[i])
		}
	}
}

// The tracker's distances stay exact across its compactions.
func TestReuseDistancesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n, m = 20000, 50
	r := newReuseTracker()
	var hist []int32
	compactions, lastLen := 0, 0
	for i := 0; i < n; i++ {
		id := int32(rng.IntN(m))
		// Naive: distinct ids since id's previous access.
		want, seen := int64(0), false
		d := map[int32]bool{}
		for j := len(hist) - 1; j >= 0; j-- {
			if hist[j] == id {
				seen = true
				break
			}
			d[hist[j]] = true
		}
		if seen {
			want = int64(len(d))
		}
		got, gotBytes, gotSeen := r.access(id, int64(id)+1)
		if gotSeen != seen || got != want {
			t.Fatalf("access %d: got %d seen %v, want %d seen %v", i, got, gotSeen, want, seen)
		}
		var wantBytes int64
		for x := range d {
			wantBytes += int64(x) + 1
		}
		if seen && gotBytes != wantBytes {
			t.Fatalf("access %d: got %d bytes, want %d", i, gotBytes, wantBytes)
		}
		hist = append(hist, id)
		if len(r.cnt) < lastLen {
			compactions++
		}
		lastLen = len(r.cnt)
	}
	if compactions == 0 {
		t.Fatal("the tracker never compacted: the test does not cover it")
	}
}

func TestStats(t *testing.T) {
	mk := func(k string, typ trace.BlockType, c trace.Caller, level int32, hit bool, ts uint64) trace.Record {
		return trace.Record{BlockKey: []byte(k), Type: typ, Caller: c, Level: level, CacheHit: hit, BlockSize: 100, AccessTimestamp: ts, FileNumber: 7}
	}
	recs := []trace.Record{
		mk("a", trace.BlockData, trace.CallerGet, 0, false, 10),
		mk("a", trace.BlockData, trace.CallerGet, 0, true, 11),
		mk("a", trace.BlockData, trace.CallerIterator, 0, true, 12),
		mk("b", trace.BlockIndex, trace.CallerCompaction, 1, false, 13),
		mk("c", trace.BlockFilter, trace.CallerGet, 1, false, 14),
		mk("c", trace.BlockFilter, trace.CallerMultiGet, 1, true, 15),
		mk("d", trace.BlockBlob, trace.CallerGet, -1, false, 16),
	}
	// A pinned block read at table open is not a cache lookup.
	pinned := mk("p", trace.BlockIndex, trace.CallerFlush, -1, false, 12)
	pinned.Pinned, pinned.NoInsert = true, true
	recs = append(recs[:3], append([]trace.Record{pinned}, recs[3:]...)...)
	res := run(t, recs, Options{Top: 2, Sizes: []int64{1000}})
	if pt := res.Curve[0]; pt.Accesses != 7 {
		t.Errorf("the simulated cache saw %d accesses, want 7 (not the pinned one)", pt.Accesses)
	}
	st := res.Stats
	if st.Total != (Counter{7, 4}) {
		t.Errorf("total %+v", st.Total)
	}
	check := func(name string, got *Counter, want Counter) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	check("data", st.ByType[trace.BlockData], Counter{3, 1})
	check("index", st.ByType[trace.BlockIndex], Counter{1, 1})
	check("filter", st.ByType[trace.BlockFilter], Counter{2, 1})
	check("blob", st.ByType[trace.BlockBlob], Counter{1, 1})
	check("get", st.ByCaller[trace.CallerGet], Counter{4, 3})
	check("iterator", st.ByCaller[trace.CallerIterator], Counter{1, 0})
	check("L0", st.ByLevel[0], Counter{3, 1})
	check("L1", st.ByLevel[1], Counter{3, 2})
	check("unknown level", st.ByLevel[-1], Counter{1, 1})
	check("pinned index", st.Pinned[trace.BlockIndex], Counter{1, 1})
	if len(st.Pinned) != 1 || st.ByCaller[trace.CallerFlush] != nil {
		t.Errorf("pinned records counted as lookups: %+v %+v", st.Pinned, st.ByCaller)
	}
	if st.UniqueBlocks != 4 || st.UniqueBytes != 400 || st.AccessedOnce != 2 || st.Cold != 4 {
		t.Errorf("unique %d (%d bytes), once %d, cold %d", st.UniqueBlocks, st.UniqueBytes, st.AccessedOnce, st.Cold)
	}
	if len(st.Top) != 2 || string(st.Top[0].Key) != "a" || st.Top[0].Accesses != 3 || string(st.Top[1].Key) != "c" || st.Top[1].Accesses != 2 {
		t.Errorf("top %+v", st.Top)
	}
	if st.FirstTimestamp != 10 || st.LastTimestamp != 16 {
		t.Errorf("timestamps %d..%d", st.FirstTimestamp, st.LastTimestamp)
	}
	// a: distances 0, 0; c: 0.
	if st.ReuseBlocks.Total() != 3 || st.ReuseBlocks.Buckets[0] != 3 {
		t.Errorf("reuse histogram %+v", st.ReuseBlocks)
	}
	var out bytes.Buffer
	if err := WriteReport(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"By block type", "By caller", "By level", "Top 2 blocks", "Reuse distance", "accessed once 2", "compaction", "filter", "pinned blocks read at table open, outside the cache (not counted above): index 1"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
}

// Types restricts the simulated caches; Warmup leaves the first accesses
// uncounted.
func TestTypesAndWarmup(t *testing.T) {
	var recs []trace.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, rec(i%2, 10))
		b := rec(100+i, 10)
		b.Type = trace.BlockBlob
		recs = append(recs, b)
	}
	res := run(t, recs, Options{Sizes: []int64{1000}, Types: []trace.BlockType{trace.BlockData}})
	if pt := res.Curve[0]; pt.Accesses != 10 || pt.Misses != 2 {
		t.Errorf("data only: %+v", pt)
	}
	res = run(t, recs, Options{Sizes: []int64{1000}, Types: []trace.BlockType{trace.BlockData}, Warmup: 2})
	if pt := res.Curve[0]; pt.Accesses != 8 || pt.Misses != 0 {
		t.Errorf("data only after warm-up: %+v", pt)
	}
	res = run(t, recs, Options{Sizes: []int64{1000}, EntryOverhead: 90})
	// 12 distinct blocks of 100 bytes in 1000: the data blocks are
	// re-read 8 times with at most 2 blob blocks in between.
	if pt := res.Curve[0]; pt.Accesses != 20 || pt.Misses != 12 {
		t.Errorf("all types, overhead: %+v", pt)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Sizes: []int64{0}}, {Sizes: []int64{-5}}, {Sizes: []int64{10}, Policies: []Policy{"arc"}}, {EntryOverhead: -1}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// errReader returns some records, then an error.
type errReader struct {
	n   int
	err error
}

func (r *errReader) Header() trace.Header { return trace.Header{MajorVersion: 1} }

func (r *errReader) Next() (trace.Record, error) {
	if r.n == 0 {
		return trace.Record{}, r.err
	}
	r.n--
	return rec(r.n, 10), nil
}

func TestRunReadError(t *testing.T) {
	_, err := Run(&errReader{n: 3, err: fmt.Errorf("block 4: %w", trace.ErrCorrupt)}, Options{Sizes: []int64{100}})
	if !errors.Is(err, trace.ErrCorrupt) || !strings.Contains(err.Error(), "record 4") {
		t.Fatalf("got %v, want a corrupt-trace error naming record 4", err)
	}
	res, err := Run(&errReader{n: 3, err: io.EOF}, Options{Sizes: []int64{100}})
	if err != nil || res.Stats.Total.Accesses != 3 || res.Stats.Header.MajorVersion != 1 {
		t.Fatalf("got %v, %+v", err, res)
	}
}

func TestCSVAndPlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	recs := randomTrace(rng, 5000, 500, []uint64{4096}, 0.1)
	sizes := []int64{64 << 10, 256 << 10, 1 << 20, 2 << 20}
	res := run(t, recs, Options{Sizes: sizes, Policies: Policies})
	var buf bytes.Buffer
	if err := WriteCSV(&buf, res.Curve); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(sizes)*len(Policies) || strings.Join(rows[0], ",") != "size_bytes,policy,miss_ratio,accesses,misses" {
		t.Fatalf("csv: %v", rows)
	}
	if rows[1][0] != "65536" || rows[1][1] != "lru" || rows[1][3] != "5000" {
		t.Errorf("first row %v", rows[1])
	}
	buf.Reset()
	if err := WritePlot(&buf, res.Curve, PlotOptions{LiveSize: 512 << 10, LiveMissRatio: 0.4}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Errorf("plot is %v", b)
	}
	if err := WritePlot(io.Discard, nil, PlotOptions{}); err == nil {
		t.Error("plotting an empty curve succeeded")
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("8MiB, 32mb,1g,4096,1.5KiB")
	want := []int64{8 << 20, 32 << 20, 1 << 30, 4096, 1536}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	for _, bad := range []string{"", "x", "8XB", "0", "-1MiB", "1e30", "99999999999TiB"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) succeeded", bad)
		}
	}
	if _, err := ParsePolicies("lru,S3FIFO, clock"); err != nil {
		t.Error(err)
	}
	if _, err := ParsePolicies("lru,lfu"); err == nil {
		t.Error("lfu accepted")
	}
}
