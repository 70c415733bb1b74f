package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// Tests of WAL tracking: the manifest records how far each live WAL is
// durable, and recovery treats damage below that as corruption, not as a
// torn tail (see "Recovery" in doc.go).

// readMemFile returns the contents of name in fs.
func readMemFile(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeMemFile replaces the contents of the existing file name in fs,
// durably.
func writeMemFile(t testing.TB, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// walFiles returns the paths of the WALs in dir, ascending.
func walFiles(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range names {
		if ft, _, ok := base.ParseFilename(name); ok && ft == base.FileTypeLog {
			out = append(out, filepath.Join(dir, name))
		}
	}
	slices.Sort(out)
	return out
}

// recordSpans returns the [start, end) offsets of the records of a log.
func recordSpans(t testing.TB, data []byte) [][2]int64 {
	t.Helper()
	r := record.NewReader(bytes.NewReader(data))
	var spans [][2]int64
	for {
		if _, err := r.Next(); err == io.EOF {
			return spans
		} else if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, [2]int64{r.LastRecordOffset(), r.EndOffset()})
	}
}

// checkAcked opens dir on fs and checks that either Open fails with a
// corruption error, or every key of want reads back its exact value. It
// returns whether Open failed, or a description of a violation.
func checkAcked(fs vfs.FS, dir string, o Options, want map[string][]byte) (openFailed bool, problem string) {
	o.FS = fs
	d, err := Open(dir, &o)
	if err != nil {
		if !IsCorruption(err) {
			return true, fmt.Sprintf("Open failed with an error that is not corruption: %v", err)
		}
		return true, ""
	}
	defer d.Close()
	var lost, wrong []string
	for k, v := range want {
		got, err := d.Get([]byte(k))
		switch {
		case errors.Is(err, ErrNotFound):
			lost = append(lost, k)
		case err != nil:
			if !IsCorruption(err) {
				return false, fmt.Sprintf("Get(%q): %v", k, err)
			}
		case !bytes.Equal(got, v):
			wrong = append(wrong, k)
		}
	}
	if len(lost)+len(wrong) > 0 {
		slices.Sort(lost)
		slices.Sort(wrong)
		return false, fmt.Sprintf("Open succeeded, but %d acknowledged keys are gone (%q) and %d have a wrong value (%q)",
			len(lost), lost[:min(3, len(lost))], len(wrong), wrong[:min(3, len(wrong))])
	}
	return false, ""
}

// TestWALByteFlipProbe is the probe of issue "[robust]" item 1 as a test: a
// DB with a compacted table, a flushed table and an unflushed WAL tail is
// closed cleanly; then one byte of the WAL is flipped — every byte of its
// last records, and a stride across the rest — and the DB reopened. Open
// must fail with a corruption error, or every acknowledged key must read
// back its exact value: never a silent loss, never a wrong value.
//
// Before the manifest recorded WAL sizes, a flip inside the last complete
// record looked like a torn tail: Open dropped the record and its key
// silently.
func TestWALByteFlipProbe(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewMem()
	o := Options{MemTableSizeBytes: 256 << 10, BlockSizeBytes: 1 << 10}
	o.FS = fs
	d := mustOpen(t, "/db", &o)
	want := make(map[string][]byte)
	put := func(from, to int) {
		for i := from; i < to; i++ {
			k := fmt.Sprintf("key-%05d", i)
			v := fmt.Appendf(nil, "value-%d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(60)))
			if err := d.Put([]byte(k), v, NoSync); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	put(0, 800)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	put(800, 1400)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	put(1400, 2000) // the WAL tail
	m := d.Metrics()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("levels: %v", m.Levels)
	clean := fs.CrashClone()
	wals := walFiles(t, clean, "/db")
	wal := wals[len(wals)-1] // older ones are obsolete
	data := readMemFile(t, clean, wal)
	spans := recordSpans(t, data)
	if len(spans) != 600 {
		t.Fatalf("the WAL holds %d records, want 600", len(spans))
	}

	// Every byte of the last 4 records, and a stride across the rest.
	var offsets []int64
	lastFrom := spans[len(spans)-4][0]
	stride := int64(53)
	if testing.Short() {
		stride = 211
	}
	for off := rng.Int64N(stride); off < lastFrom; off += stride {
		offsets = append(offsets, off)
	}
	for off := lastFrom; off < int64(len(data)); off++ {
		offsets = append(offsets, off)
	}
	t.Logf("WAL %s: %d bytes, %d records; flipping %d positions", wal, len(data), len(spans), len(offsets))

	var openFailed, losses int
	for _, off := range offsets {
		trial := clean.CrashClone()
		damaged := slices.Clone(data)
		mask := byte(1 + rng.IntN(255))
		damaged[off] ^= mask
		writeMemFile(t, trial, wal, damaged)
		failed, problem := checkAcked(trial, "/db", o, want)
		if problem != "" {
			losses++
			if losses <= 5 {
				t.Errorf("byte %d of %d of %s flipped with %#02x: %s", off, len(data), wal, mask, problem)
			}
			continue
		}
		if failed {
			openFailed++
		}
	}
	if losses > 0 {
		t.Fatalf("%d of %d flips lost or changed acknowledged data silently", losses, len(offsets))
	}
	t.Logf("%d flips failed Open with a corruption error; the other %d were harmless", openFailed, len(offsets)-openFailed)
}

// TestWALSyncedDamageIsCorruption: a WAL synced but not closed when the
// machine crashed. Damage below the synced size the manifest records is
// corruption; a torn or unsynced tail past it still recovers silently.
func TestWALSyncedDamageIsCorruption(t *testing.T) {
	for _, tc := range []struct {
		name        string
		recordBytes int64
		values      int // value size
	}{
		{"record-every-4KiB", 4 << 10, 100},
		{"default", 0, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			o := Options{MemTableSizeBytes: 4 << 20, WALSyncRecordBytes: tc.recordBytes}
			o.FS = fs
			o.testInitialMemTableBytes = o.MemTableSizeBytes // one WAL
			d := mustOpen(t, "/db", &o)
			want := make(map[string][]byte)
			synced := 0
			for i := 0; d.mu.log.recordedSize < 2*d.opts.WALSyncRecordBytes || i%7 != 0; i++ {
				k := fmt.Sprintf("key-%05d", i)
				v := bytes.Repeat([]byte{byte(i)}, tc.values)
				if err := d.Put([]byte(k), v, Sync); err != nil {
					t.Fatal(err)
				}
				want[k] = v
				synced++
			}
			d.mu.Lock()
			recorded := d.mu.log.recordedSize
			d.mu.Unlock()
			// An unsynced tail, which the crash loses.
			for i := range 20 {
				if err := d.Put(fmt.Appendf(nil, "unsynced-%d", i), []byte("x"), NoSync); err != nil {
					t.Fatal(err)
				}
			}
			crashed := fs.CrashClone()
			// Crash images whose WAL keeps a random part of the unsynced
			// tail: a real torn write past the recorded size.
			var torn []*vfs.MemFS
			for s := range 10 {
				torn = append(torn, fs.CrashCloneTorn(rand.New(rand.NewPCG(uint64(s), 9))))
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			wal := walFiles(t, crashed, "/db")[0]
			data := readMemFile(t, crashed, wal)
			spans := recordSpans(t, data)
			t.Logf("%d synced puts; WAL %d bytes after the crash, %d recorded in the manifest", synced, len(data), recorded)
			if recorded <= 0 || recorded > int64(len(data)) {
				t.Fatalf("recorded synced size %d, WAL holds %d bytes", recorded, len(data))
			}
			// keysBelow returns the acknowledged keys whose records end at
			// or below off.
			keysBelow := func(off int64) map[string][]byte {
				m := make(map[string][]byte)
				for i, s := range spans {
					if s[1] <= off && i < synced {
						k := fmt.Sprintf("key-%05d", i)
						m[k] = want[k]
					}
				}
				return m
			}
			mustRecover := func(what string, fs vfs.FS, o Options, want map[string][]byte) {
				t.Helper()
				if failed, problem := checkAcked(fs, "/db", o, want); failed || problem != "" {
					t.Fatalf("%s: the DB does not recover (Open failed: %t): %s", what, failed, problem)
				}
			}
			mustBeCorrupt := func(what string, fs vfs.FS) {
				t.Helper()
				o := o
				o.FS = fs
				d, err := Open("/db", &o)
				if err == nil {
					d.Close()
					t.Fatalf("%s: Open succeeded, want a corruption error", what)
				}
				if !IsCorruption(err) {
					t.Fatalf("%s: Open failed with %v, want a corruption error", what, err)
				}
			}
			damage := func(mutate func(b []byte) []byte) *vfs.MemFS {
				trial := crashed.CrashClone()
				writeMemFile(t, trial, wal, mutate(slices.Clone(data)))
				return trial
			}

			mustRecover("the crash image", crashed.CrashClone(), o, want)
			for i, tfs := range torn {
				mustRecover(fmt.Sprintf("torn crash image %d", i), tfs, o, want)
			}

			// A flip in the synced part: in the first, middle and last
			// records below the recorded size, at several bytes each.
			var lastBelow int
			for i, s := range spans {
				if s[1] <= recorded {
					lastBelow = i
				}
			}
			for _, i := range []int{0, lastBelow / 2, lastBelow} {
				s := spans[i]
				for _, off := range []int64{s[0], s[0] + 4, s[0] + 7, (s[0] + s[1]) / 2, s[1] - 1} {
					trial := damage(func(b []byte) []byte { b[off] ^= 0x20; return b })
					mustBeCorrupt(fmt.Sprintf("byte %d (record %d) flipped, synced size %d", off, i, recorded), trial)
					// Point-in-time recovery is the operator's way out: it
					// recovers the records before the damage.
					pit := o
					pit.WALRecovery = WALRecoverPointInTime
					mustRecover("point-in-time recovery after a flip", trial, pit, keysBelow(s[0]))
				}
			}
			// Truncated below the synced size, or missing.
			for _, cut := range []int64{0, recorded / 2, spans[lastBelow][0] + 3, recorded - 1} {
				trial := damage(func(b []byte) []byte { return b[:cut] })
				mustBeCorrupt(fmt.Sprintf("WAL cut at %d, synced size %d", cut, recorded), trial)
			}
			missing := crashed.CrashClone()
			if err := missing.Remove(wal); err != nil {
				t.Fatal(err)
			}
			mustBeCorrupt("WAL removed", missing)
			pit := o
			pit.WALRecovery = WALRecoverPointInTime
			mustRecover("WAL removed, point-in-time recovery", missing.CrashClone(), pit, nil)

			// Past the recorded size, a torn tail is still a torn tail:
			// a cut in the middle of any later record, or a flip in the
			// last record, loses only what follows.
			tornCount := 0
			for i, s := range spans {
				if s[0] < recorded {
					continue
				}
				cut := (s[0] + s[1]) / 2
				mustRecover(fmt.Sprintf("WAL cut at %d (record %d), synced size %d", cut, i, recorded),
					damage(func(b []byte) []byte { return b[:cut] }), o, keysBelow(cut))
				tornCount++
			}
			if tornCount == 0 {
				t.Fatal("no record past the recorded size: the test checks nothing past it")
			}
			last := spans[len(spans)-1]
			mustRecover("last record flipped",
				damage(func(b []byte) []byte { b[(last[0]+last[1])/2] ^= 0x20; return b }), o, keysBelow(last[0]))
		})
	}
}

// TestWALClosedAtSwitchIsTracked: a WAL that a memtable switch closed is
// complete; damage to its last record before its memtable is flushed is
// corruption, even though a later WAL exists and recovery used to take the
// damage for a torn tail.
func TestWALClosedAtSwitchIsTracked(t *testing.T) {
	fs := vfs.NewMem()
	o := Options{MemTableSizeBytes: 64 << 10, MemTableStopWritesThreshold: 10}
	o.FS = fs
	d := mustOpen(t, "/db", &o)
	want := make(map[string][]byte)
	// Hold flushes back so that the switched-out WAL stays live: the
	// background flush of the first memtable is what the crash interrupts.
	d.mu.Lock()
	d.mu.flushing = true // no flush starts
	d.mu.Unlock()
	for i := 0; len(walFiles(t, fs, "/db")) < 2; i++ {
		k := fmt.Sprintf("key-%05d", i)
		v := bytes.Repeat([]byte{'v'}, 200)
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	crashed := fs.CrashClone()
	d.mu.Lock()
	d.mu.flushing = false
	d.mu.Unlock()
	d.Close()
	wals := walFiles(t, crashed, "/db")
	first := wals[0]
	data := readMemFile(t, crashed, first)
	spans := recordSpans(t, data)
	last := spans[len(spans)-1]
	trial := crashed.CrashClone()
	damaged := slices.Clone(data)
	damaged[(last[0]+last[1])/2] ^= 1
	writeMemFile(t, trial, first, damaged)
	if failed, problem := checkAcked(trial, "/db", o, want); !failed || problem != "" {
		t.Fatalf("the last record of the switched-out WAL %s damaged: Open failed %t (want true), %s", first, failed, problem)
	}
}

// TestOpenDBWrittenBeforeWALTracking opens a DB whose manifest predates
// the WAL synced-size field (testdata/db-before-wal-tracking: 300 keys, a
// compacted table, 100 keys in the WAL), then reopens it: the old format
// opens, its WAL replays untracked, and the new manifest tracks the new WAL.
func TestOpenDBWrittenBeforeWALTracking(t *testing.T) {
	fs := vfs.NewMem()
	src := filepath.Join("testdata", "db-before-wal-tracking")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/db", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeMemFile(t, fs, filepath.Join("/db", e.Name()), b)
	}
	if err := vfs.SyncDir(fs, "/db"); err != nil {
		t.Fatal(err)
	}
	if manifest := readMemFile(t, fs, "/db/MANIFEST-000001"); bytes.Contains(manifest, []byte{0x81, 0x40}) {
		t.Fatal("the fixture's manifest already holds the WAL synced-size tag")
	}
	want := make(map[string][]byte)
	for i := range 300 {
		want[fmt.Sprintf("key-%04d", i)] = fmt.Appendf(nil, "value-%04d", i)
	}
	o := Options{FS: fs}
	for round := range 2 {
		if failed, problem := checkAcked(fs, "/db", o, want); failed || problem != "" {
			t.Fatalf("round %d: Open failed %t: %s", round, failed, problem)
		}
	}
	vs, err := version.Load(fs, "/db", version.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	tracked := vs.WALsSynced()
	// The WAL replayed at the last Open may still be on disk: Close does
	// not wait for obsolete files to be deleted (the next Open's sweep
	// removes it). The manifest tracks the newest one, and only it.
	wals := walFiles(t, fs, "/db")
	var newest base.FileNum
	if len(wals) > 0 {
		_, newest, _ = base.ParseFilename(filepath.Base(wals[len(wals)-1]))
	}
	if _, ok := tracked[newest]; len(tracked) != 1 || !ok {
		t.Fatalf("after a clean Close, the manifest tracks WALs %v, want the newest WAL of %q", tracked, wals)
	}
}

// TestWALTrackingMessage pins the corruption message, which names the
// offsets an operator needs.
func TestWALTrackingMessage(t *testing.T) {
	fs := vfs.NewMem()
	o := Options{FS: fs}
	d := mustOpen(t, "/db", &o)
	for i := range 10 {
		if err := d.Put(fmt.Appendf(nil, "k%d", i), []byte("v"), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wal := walFiles(t, fs, "/db")[0]
	data := readMemFile(t, fs, wal)
	data[len(data)-2] ^= 1
	writeMemFile(t, fs, wal, data)
	_, err := Open("/db", &o)
	if !IsCorruption(err) || !strings.Contains(err.Error(), "below the") {
		t.Fatalf("Open = %v, want a corruption error naming the synced size", err)
	}
	t.Log(err)
}

// TestObsoleteWALRemovedAtOpen: a WAL deleted after its memtable was
// flushed, whose deletion never reached the disk (no directory sync before
// the crash), is deleted by the next Open instead of lingering forever.
func TestObsoleteWALRemovedAtOpen(t *testing.T) {
	fs := vfs.NewMem()
	o := Options{FS: fs}
	d := mustOpen(t, "/db", &o)
	if err := d.Put([]byte("k"), []byte("v"), Sync); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	d.Close()
	before := walFiles(t, crashed, "/db")
	if len(before) < 2 {
		t.Fatalf("the crash image holds WALs %q: the test needs the flushed one to linger", before)
	}
	o.FS = crashed
	d = mustOpen(t, "/db", &o)
	defer d.Close()
	waitSwept(t, d) // the sweep runs after Open returns
	after := walFiles(t, crashed, "/db")
	for _, w := range after {
		if w == before[0] {
			t.Fatalf("obsolete WAL %s still there after Open: %q", w, after)
		}
	}
	if v, err := d.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get(k) = %q, %v", v, err)
	}
}

// TestFlushReturnsAfterWALsRemoved: when Flush returns, the WALs of the
// memtables it flushed are gone from the directory, not still waiting for
// the flush goroutine to remove them (a Compact that then only moves
// tables would otherwise report the old WALs in its disk use).
func TestFlushReturnsAfterWALsRemoved(t *testing.T) {
	fs := vfs.NewMem()
	// Removing a WAL is slow here, as on a loaded machine: the window in
	// which a Flush that did not wait for it would see it is wide.
	slowRemove := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if ft, _, ok := base.ParseFilename(filepath.Base(path)); op == errorfs.OpRemove && ok && ft == base.FileTypeLog {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	d := mustOpen(t, "/db", testOptions(errorfs.Wrap(fs, slowRemove)))
	defer d.Close()
	for round := 0; round < 5; round++ {
		for i := 0; i < 50; i++ {
			k := fmt.Sprintf("k%02d-%03d", round, i)
			if err := d.Put([]byte(k), bytes.Repeat([]byte("v"), 200), NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		current := base.MakeFilepath("/db", base.FileTypeLog, d.mu.log.num)
		d.mu.Unlock()
		if wals := walFiles(t, fs, "/db"); len(wals) != 1 || wals[0] != current {
			t.Fatalf("round %d: after Flush the directory holds WALs %q; want only the current one, %s", round, wals, current)
		}
	}
}
