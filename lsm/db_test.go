package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func testOptions(fs vfs.FS) *Options {
	return &Options{
		FS:                    fs,
		MemTableSizeBytes:     64 << 10,
		BlockSizeBytes:        256,
		L0CompactionThreshold: 2,
		TargetFileSizeBytes:   16 << 10,
		LBaseMaxBytes:         64 << 10,
	}
}

func mustOpen(t testing.TB, dir string, o *Options) *DB {
	t.Helper()
	d, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return d
}

func TestBasicOps(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", testOptions(fs))
	if err := d.Put([]byte("a"), []byte("1"), Sync); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("Get(a) = %q, %v", v, err)
	}
	if _, err := d.Get([]byte("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(b) err = %v, want ErrNotFound", err)
	}
	if err := d.Delete([]byte("a"), NoSync); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(a) after delete err = %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidArguments(t *testing.T) {
	d := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer d.Close()
	big := make([]byte, MaxKeySize+1)
	for name, err := range map[string]error{
		"empty key":      d.Put(nil, []byte("v"), Sync),
		"long key":       d.Put(big, []byte("v"), Sync),
		"reversed range": d.DeleteRange([]byte("b"), []byte("a"), Sync),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	// A batch with one bad op writes nothing.
	b := NewBatch()
	b.Set([]byte("ok"), []byte("v"))
	b.Set(big, []byte("v"))
	if err := d.Write(b, Sync); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Write = %v", err)
	}
	if _, err := d.Get([]byte("ok")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(ok) = %v, want ErrNotFound", err)
	}
}

func TestSecondOpenFails(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", testOptions(fs))
	defer d.Close()
	if _, err := Open("db", testOptions(fs)); err == nil {
		t.Fatal("second Open of the same directory succeeded")
	}
}

// model is the map a randomized test checks the DB against.
type model map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (m model) sortedKeys(lower, upper string) []string {
	var keys []string
	for k := range m {
		if (lower == "" || k >= lower) && (upper == "" || k < upper) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func checkIter(t *testing.T, it *Iterator, m model, lower, upper string, rng *rand.Rand) {
	t.Helper()
	keys := m.sortedKeys(lower, upper)
	// Forward scan.
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
		if want := m[string(it.Key())]; string(it.Value()) != want {
			t.Fatalf("iter value of %q = %q, want %q", it.Key(), it.Value(), want)
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("forward scan [%q,%q):\n got %q\nwant %q", lower, upper, got, keys)
	}
	// Backward scan.
	got = got[:0]
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, string(it.Key()))
	}
	slices.Reverse(got)
	if !slices.Equal(got, keys) {
		t.Fatalf("backward scan [%q,%q):\n got %q\nwant %q", lower, upper, got, keys)
	}
	// Random seeks and steps in both directions.
	pos := -1 // index into keys of the iterator's position; -1 or len: invalid
	for i := 0; i < 50; i++ {
		switch rng.IntN(6) {
		case 0:
			k := randKey(rng)
			it.SeekGE([]byte(k))
			pos = sort.SearchStrings(keys, k)
			if lower != "" && k < lower {
				pos = sort.SearchStrings(keys, lower)
			}
		case 1:
			k := randKey(rng)
			it.SeekLT([]byte(k))
			pos = sort.SearchStrings(keys, k) - 1
		case 2, 3:
			if pos >= 0 && pos < len(keys) {
				it.Next()
				pos++
			}
		case 4, 5:
			if pos >= 0 && pos < len(keys) {
				it.Prev()
				pos--
			}
		}
		if pos < 0 || pos >= len(keys) {
			if it.Valid() {
				t.Fatalf("step %d: iterator at %q, want exhausted", i, it.Key())
			}
			pos = -1
			continue
		}
		if !it.Valid() || string(it.Key()) != keys[pos] {
			t.Fatalf("step %d: iterator valid=%v key=%q, want %q", i, it.Valid(), it.Key(), keys[pos])
		}
	}
}

func randKey(rng *rand.Rand) string {
	return fmt.Sprintf("k%03d", rng.IntN(300))
}

// TestRandomizedAgainstModel applies random operations, with reopens,
// flushes and compactions, and checks every read against a map.
func TestRandomizedAgainstModel(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	fs := vfs.NewMem()
	opts := testOptions(fs)
	d := mustOpen(t, "db", opts)
	defer func() { d.Close() }()
	m := model{}
	type snap struct {
		s *Snapshot
		m model
	}
	var snaps []snap
	for i := 0; i < 3000; i++ {
		switch op := rng.IntN(100); {
		case op < 45:
			k, v := randKey(rng), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), rng.IntN(300)))
			if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		case op < 55:
			k := randKey(rng)
			if err := d.Delete([]byte(k), NoSync); err != nil {
				t.Fatal(err)
			}
			delete(m, k)
		case op < 58:
			a, b := randKey(rng), randKey(rng)
			if a > b {
				a, b = b, a
			}
			if err := d.DeleteRange([]byte(a), []byte(b), NoSync); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				if k >= a && k < b {
					delete(m, k)
				}
			}
		case op < 75:
			k := randKey(rng)
			v, err := d.Get([]byte(k))
			want, ok := m[k]
			if !ok {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("op %d: Get(%q) = %q, %v; want not found", i, k, v, err)
				}
			} else if err != nil || string(v) != want {
				t.Fatalf("op %d: Get(%q) = %q, %v; want %q", i, k, v, err, want)
			}
		case op < 80:
			lower, upper := "", ""
			if rng.IntN(2) == 0 {
				lower = randKey(rng)
			}
			if rng.IntN(2) == 0 {
				upper = randKey(rng)
			}
			var io IterOptions
			if lower != "" {
				io.LowerBound = []byte(lower)
			}
			if upper != "" {
				io.UpperBound = []byte(upper)
			}
			it, err := d.NewIter(&io)
			if err != nil {
				t.Fatal(err)
			}
			checkIter(t, it, m, lower, upper, rng)
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		case op < 83:
			s, err := d.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, snap{s, m.clone()})
		case op < 87 && len(snaps) > 0:
			j := rng.IntN(len(snaps))
			sn := snaps[j]
			it, err := sn.s.NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			checkIter(t, it, sn.m, "", "", rng)
			it.Close()
			if rng.IntN(3) == 0 {
				sn.s.Close()
				snaps = slices.Delete(snaps, j, j+1)
			}
		case op < 90:
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		case op < 92:
			if err := d.Compact(nil, nil); err != nil {
				t.Fatal(err)
			}
		case op < 94:
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d = mustOpen(t, "db", opts)
		}
	}
	for _, s := range snaps {
		s.s.Close()
	}
	t.Log(d.Metrics())
}

// TestCrashKeepsSyncedWrites crashes (keeping only synced data) at random
// points of a workload with flushes and compactions in flight and checks
// that every synced write survives.
func TestCrashKeepsSyncedWrites(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	fs := vfs.NewMem()
	opts := testOptions(fs)
	d := mustOpen(t, "db", opts)
	m := model{}
	for round := 0; round < 10; round++ {
		n := rng.IntN(2000)
		for i := 0; i < n; i++ {
			k := randKey(rng)
			if rng.IntN(10) == 0 {
				if err := d.Delete([]byte(k), Sync); err != nil {
					t.Fatal(err)
				}
				delete(m, k)
				continue
			}
			v := fmt.Sprintf("r%d-%d-%s", round, i, bytes.Repeat([]byte("y"), rng.IntN(200)))
			if err := d.Put([]byte(k), []byte(v), Sync); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}
		crashed := fs.CrashClone()
		d.Close()
		fs = crashed
		opts.FS = fs
		d = mustOpen(t, "db", opts)
		it, err := d.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		checkIter(t, it, m, "", "", rng)
		it.Close()
	}
	d.Close()
}

// TestFindFileAtSentinelBound: a file whose largest bound is a range-deletion
// sentinel at K does not hold K; the next file, which starts at K, does.
func TestFindFileAtSentinelBound(t *testing.T) {
	ik := func(k string, seq base.SeqNum) []byte { return base.MakeInternalKey(nil, []byte(k), seq, base.KindSet) }
	files := []*version.FileMetadata{
		{FileNum: 1, Smallest: ik("a", 5), Largest: base.MakeRangeDeleteSentinel(nil, []byte("k"))},
		{FileNum: 2, Smallest: ik("k", 9), Largest: ik("p", 3)},
	}
	for _, tc := range []struct {
		key  string
		want base.FileNum
	}{{"a", 1}, {"j", 1}, {"k", 2}, {"p", 2}, {"q", 0}, {"0", 0}} {
		f := findFileForUserKey(files, []byte(tc.key))
		var got base.FileNum
		if f != nil {
			got = f.FileNum
		}
		if got != tc.want {
			t.Errorf("findFileForUserKey(%q) = file %d, want %d", tc.key, got, tc.want)
		}
	}
}
