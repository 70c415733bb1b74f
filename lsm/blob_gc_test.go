package lsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func gcTestDB(t *testing.T, fs vfs.FS) (*DB, map[string][]byte) {
	t.Helper()
	return gcTestDBOverwriting(t, fs, 2)
}

// gcTestDBOverwriting is gcTestDB overwriting every step-th key.
func gcTestDBOverwriting(t *testing.T, fs vfs.FS, step int) (*DB, map[string][]byte) {
	t.Helper()
	o := blobTestOptions(fs, 64)
	o.BlobGCDiscardRatio = -1 // GC only when the test says
	o.BlobGCBytesPerSec = -1
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	putBlobKeys(t, d, model, 1, 0, 500)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	// Overwrite every step-th key and compact: that share of the first
	// files' records becomes garbage the version knows of.
	putBlobKeys(t, d, model, step, 1, 500)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	return d, model
}

// blobBytesOnDisk sums the sizes of the blob files nums of DB "db" that
// are on disk (one may be deleted while the sum is taken).
func blobBytesOnDisk(fs vfs.FS, nums []base.FileNum) int64 {
	var total int64
	for _, n := range nums {
		if st, err := fs.Stat(base.MakeFilepath("db", base.FileTypeBlob, n)); err == nil {
			total += st.Size()
		}
	}
	return total
}

func blobFilesOf(d *DB) []base.FileNum {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []base.FileNum
	for n := range d.mu.versions.Current().BlobFiles {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestBlobGCRewritesAndRetires: GC rewrites the files with garbage, every
// value still reads, the old files leave the version and the disk, and
// what is on disk is exactly what the version holds.
func TestBlobGCRewritesAndRetires(t *testing.T) {
	fs := vfs.NewMem()
	d, model := gcTestDB(t, fs)
	defer d.Close()
	before := d.Metrics().Blob
	if before.GarbageBytes == 0 {
		t.Fatalf("no garbage recorded: %+v", before)
	}
	old := blobFilesOf(d)
	if err := d.BlobGC(0.3); err != nil {
		t.Fatal(err)
	}
	checkModel(t, d, model)
	after := d.Metrics().Blob
	t.Logf("before %+v\nafter %+v", before, after)
	if after.GCBytesRead == 0 || after.GCBytesWritten == 0 || after.GarbageBytes >= before.GarbageBytes {
		t.Fatalf("GC did nothing: before %+v after %+v", before, after)
	}
	if after.FileBytes >= before.FileBytes {
		t.Fatalf("GC did not shrink the blob files: %d → %d bytes", before.FileBytes, after.FileBytes)
	}
	for _, n := range old {
		if m, ok := d.mu.versions.Current().BlobFile(n); ok && m.GarbageRatio() >= 0.3 {
			t.Fatalf("file %s with garbage ratio %.2f survived GC", n, m.GarbageRatio())
		}
	}
	waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return blobFilesOf(d) })
	// And after reopening.
	d.Close()
	d = mustOpen(t, "db", d.opts)
	checkModel(t, d, model)
}

// TestBlobGCConcurrentWriteWins writes new values for some keys after GC
// copied their records and before it commits the new indexes: the
// conditional update must leave those keys alone (without the check, GC
// would revert them to the copied, older values).
func TestBlobGCConcurrentWriteWins(t *testing.T) {
	fs := vfs.NewMem()
	d, model := gcTestDB(t, fs)
	defer d.Close()
	d.blobs.beforeGCCommit = func() {
		d.blobs.beforeGCCommit = nil // once: the first file's copies race
		for i := 1; i < 200; i += 4 {
			k := fmt.Sprintf("k%03d", i)
			v := blobValueFor(k, 2, 300+i)
			if i%8 == 1 {
				v = []byte("small")
			}
			if err := d.Put([]byte(k), v, NoSync); err != nil {
				t.Error(err)
			}
			model[k] = v
		}
		k := "k005"
		if err := d.Delete([]byte(k), NoSync); err != nil {
			t.Error(err)
		}
		delete(model, k)
	}
	if err := d.BlobGC(0); err != nil {
		t.Fatal(err)
	}
	d.blobs.beforeGCCommit = nil
	checkModel(t, d, model)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	checkModel(t, d, model)
}

// TestBlobGCSnapshotsAndIterators: a snapshot taken before GC keeps
// reading the old values through the old file, which is retired only once
// the snapshot is closed; an iterator open across GC and retirement reads
// on from its pinned version.
func TestBlobGCSnapshotsAndIterators(t *testing.T) {
	fs := vfs.NewMem()
	d, model := gcTestDB(t, fs)
	defer d.Close()
	snapModel := maps_clone(model)
	snap, err := d.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("empty")
	}
	old := blobFilesOf(d)
	// Overwrite some keys after the snapshot, then GC everything.
	for i := 0; i < 200; i += 3 {
		k := fmt.Sprintf("k%03d", i)
		v := blobValueFor(k, 3, 700)
		d.Put([]byte(k), v, NoSync)
		model[k] = v
	}
	if err := d.BlobGC(0); err != nil {
		t.Fatal(err)
	}
	// The snapshot holds the old files in the version.
	cur := blobFilesOf(d)
	for _, n := range old {
		if !slices.Contains(cur, n) {
			t.Fatalf("file %s retired while a snapshot could read it (now %v)", n, cur)
		}
	}
	for k, want := range snapModel {
		got, err := snap.Get([]byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("snapshot Get(%s) after GC: %v", k, err)
		}
	}
	checkModel(t, d, model)
	if err := snap.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.BlobGC(2); err != nil { // waits for background work, retires
		t.Fatal(err)
	}
	cur = blobFilesOf(d)
	for _, n := range old {
		if slices.Contains(cur, n) {
			t.Fatalf("file %s not retired after the snapshot closed (now %v)", n, cur)
		}
	}
	// The iterator still reads every value of its (pre-GC) state.
	n := 1
	for it.Next() {
		n++
		if want := snapModel[string(it.Key())]; !bytes.Equal(it.Value(), want) {
			t.Fatalf("iterator value of %s changed", it.Key())
		}
	}
	if err := it.Close(); err != nil || n != len(snapModel) {
		t.Fatalf("iterator saw %d keys, %v", n, err)
	}
	d.BlobGC(2)
	d.Close()
	// Close leaves obsolete files to the sweep of the next Open.
	d = mustOpen(t, "db", d.opts)
	waitSwept(t, d)
	if disk := listBlobFiles(t, fs, "db"); !slices.Equal(disk, cur) {
		t.Fatalf("blob files on disk %v, in the version %v", disk, cur)
	}
	checkModel(t, d, model)
}

func maps_clone(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestBlobSpaceAmpBounded runs a steady random overwrite of 4 KiB values
// with the engine's default L0 trigger and blob GC settings and measures
// the blob files on disk against the live blob bytes (what the model
// holds): the median of the samples taken while the overwrite runs,
// without waiting for background work, must stay within 1.5× (the
// issue's bound), and at rest after every round, once background work is
// done, within 1.25× (BlobMaxSpaceAmp 1.15 and a margin; the old
// background GC left 1.26-1.72 at rest in this test, 1.6-2.2 in CI).
//
// Garbage becomes known only when a compaction drops an overwritten index
// (as in Titan), so a value overwritten in an L0 table not yet compacted
// still counts as live: with 4 L0 tables of a 1 MiB memtable each on 6 MiB
// of live values, up to 0.7× of garbage is out of blob GC's sight. Before
// blob GC by compaction this test compacted L0 at every flush
// (L0CompactionThreshold 1) to stay under 1.5× at rest. Now the compaction picker
// merges L0 when the garbage it may hide puts the ratio past
// BlobMaxSpaceAmp, compactions relocate the live records of the files
// with garbage, and writes slow down while that falls behind
// (blob_relocate.go). Loaded, the machine delays the compactions, which
// shows in the samples taken while writing (p95 is logged, not checked).
func TestBlobSpaceAmpBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~100 MB")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fs := vfs.NewMem()
	o := &Options{
		FS:                      fs,
		MemTableSizeBytes:       1 << 20,
		TargetFileSizeBytes:     64 << 10,
		LBaseMaxBytes:           256 << 10,
		MinBlobSize:             4096,
		BlobCompression:         NoCompression, // live is computed from RecordLen
		BlobTargetFileSizeBytes: 1 << 20,
	}
	d := mustOpen(t, "db", o)
	defer d.Close()
	const keys = 1500
	const valueSize = 4096
	live := int64(keys) * int64(blob.RecordLen(5, valueSize))
	val := make([]byte, valueSize)
	put := func(i int) {
		k := fmt.Sprintf("k%04d", i)
		copy(val, k)
		val[valueSize-1] = byte(rng.Uint32())
		if err := d.Put([]byte(k), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	var worst float64
	var atRest []string
	var running []float64
	for round := range 12 {
		for j := range keys {
			put(rng.IntN(keys))
			if round >= 2 && j%100 == 99 {
				running = append(running, float64(blobBytesOnDisk(fs, listBlobFiles(t, fs, "db")))/float64(live))
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := waitBackgroundIdle(d); err != nil {
			t.Fatal(err)
		}
		// What is on disk. The cleaner goroutine deletes a file a
		// finished GC or compaction made obsolete as soon as the last
		// version holding it is released (TestBlobObsoleteDeletedAtLastRelease);
		// wait for it, not for another version change.
		waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return blobFilesOf(d) })
		amp := float64(blobBytesOnDisk(fs, listBlobFiles(t, fs, "db"))) / float64(live)
		atRest = append(atRest, fmt.Sprintf("%.2f", amp))
		if round >= 2 {
			worst = max(worst, amp)
		}
	}
	slices.Sort(running)
	median, p95 := running[len(running)/2], running[len(running)*95/100]
	m := d.Metrics().Blob
	t.Logf("space amp at rest per round: %v; worst %.2f; while overwriting (%d samples): median %.2f p95 %.2f max %.2f; relocated %d, forced compactions %d, slowdowns %d, GC read %d written %d",
		atRest, worst, len(running), median, p95, running[len(running)-1], m.RelocatedBytesWritten, m.ForcedCompactions, m.Slowdowns, m.GCBytesRead, m.GCBytesWritten)
	if worst > 1.25 {
		t.Errorf("blob space amplification at rest reached %.2f (> 1.25): %v", worst, atRest)
	}
	if median > 1.5 {
		t.Errorf("blob space amplification while overwriting: median %.2f (> 1.5)", median)
	}
}

// TestBlobForcedCompactionsStop: once an overwrite stops, the compactions
// the picker forces to relocate blob garbage (blob_relocate.go) run until
// the blob files are back within BlobMaxSpaceAmp of their live bytes and
// then stop: the DB goes idle, the picker has nothing more to do, and a
// further round of scheduling starts nothing. An endless loop of forced
// compactions would never let the DB go idle (the wait below would time
// out) or would show in the counter.
func TestBlobForcedCompactionsStop(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fs := vfs.NewMem()
	d := mustOpen(t, "db", &Options{
		FS:                      fs,
		MemTableSizeBytes:       256 << 10,
		TargetFileSizeBytes:     32 << 10,
		LBaseMaxBytes:           64 << 10,
		MinBlobSize:             1024,
		BlobCompression:         NoCompression,
		BlobTargetFileSizeBytes: 256 << 10,
	})
	defer d.Close()
	const keys = 1000
	val := make([]byte, 1024)
	model := map[string][]byte{}
	put := func(i int) {
		k := fmt.Sprintf("k%04d", i)
		for j := 0; j < len(val); j += 8 {
			binary.LittleEndian.PutUint64(val[j:], rng.Uint64())
		}
		model[k] = slices.Clone(val)
		if err := d.Put([]byte(k), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	// A snapshot and an iterator alive across the relocations.
	snap, err := d.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	snapModel := maps.Clone(model)
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for range 4 * keys {
		put(rng.IntN(keys))
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	idle := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return !d.mu.flushing && d.mu.compactions.running == 0 && !d.mu.blobGC.running && len(d.mu.imm) == 0
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !idle() {
		if time.Now().After(deadline) {
			t.Fatalf("background work still running after 2 minutes: %+v", d.Metrics().Blob)
		}
		time.Sleep(10 * time.Millisecond)
	}
	m := d.Metrics().Blob
	if m.ForcedCompactions == 0 || m.RelocatedBytesWritten == 0 {
		t.Fatalf("no forced compaction or relocation ran: %+v", m)
	}
	d.mu.Lock()
	amp := d.blobSpaceAmpLocked()
	v := d.mu.versions.Current()
	set := d.blobRelocationSetLocked(v)
	hides := d.l0HidesBlobGarbageLocked(v)
	c := d.pickCompactionLocked()
	if c != nil {
		// Undo the pick's marks before failing.
		for _, in := range c.inputs {
			for _, f := range in {
				f.Compacting = false
			}
		}
		d.mu.compactions.inProgress = nil
		c.version.Unref()
	}
	// Scheduling again starts nothing.
	d.maybeScheduleCompactionLocked()
	started := d.mu.compactions.running > 0
	d.mu.Unlock()
	t.Logf("at rest: counted space amp %.2f, relocation set %v, L0 hides garbage %v; %+v", amp, set, hides, m)
	if c != nil || started {
		t.Fatalf("the picker still finds a compaction at rest (forced %v): relocation set %v, L0 hides garbage %v", c != nil && c.forcedBlob, set, hides)
	}
	if amp > d.opts.BlobMaxSpaceAmp+0.01 && len(set) > 0 {
		t.Fatalf("idle with counted space amp %.2f and files to relocate %v", amp, set)
	}
	if err := waitBackgroundIdle(d); err != nil {
		t.Fatal(err)
	}
	if got := d.Metrics().Blob.ForcedCompactions; got != m.ForcedCompactions {
		t.Fatalf("forced compactions went on at rest: %d, then %d", m.ForcedCompactions, got)
	}
	checkModel(t, d, model)
	for k, want := range snapModel {
		got, err := snap.Get([]byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("snapshot: %s: %d bytes, %v", k, len(got), err)
		}
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := snapModel[string(it.Key())]; !bytes.Equal(it.Value(), want) {
			t.Fatalf("iterator: %s: %d bytes, want %d", it.Key(), len(it.Value()), len(want))
		}
		n++
	}
	if err := it.Error(); err != nil || n != len(snapModel) {
		t.Fatalf("iterator: %d keys of %d, %v", n, len(snapModel), err)
	}
}

// waitBackgroundIdle waits until no flush, compaction or blob GC runs and
// no memtable waits for a flush, and returns the DB's background error if
// one is set: after one, the memtables left queued are never flushed, and
// a caller that went on would check a DB that stopped half-way.
func waitBackgroundIdle(d *DB) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.mu.flushing || d.mu.compactions.running > 0 || d.mu.blobGC.running || (len(d.mu.imm) > 0 && d.mu.bgErr == nil) {
		d.mu.bgCond.Wait()
	}
	return d.mu.bgErr
}

// TestBlobGCRateLimited: blob GC paces its reads plus writes to
// BlobGCBytesPerSec. The bound checked is a lower bound on the time (a
// slow machine only makes GC slower), so it holds under load; without the
// limiter the same GC takes a few milliseconds.
func TestBlobGCRateLimited(t *testing.T) {
	fs := vfs.NewMem()
	// An eighth of the records become garbage: 1.125× space
	// amplification, under blobGCDebtSpaceAmp, past which GC stops pacing
	// itself.
	d, model := gcTestDBOverwriting(t, fs, 8)
	o := d.opts
	d.Close()
	const rate = 256 << 10
	o.BlobGCBytesPerSec = rate
	d = mustOpen(t, "db", o)
	defer d.Close()
	before := d.Metrics().Blob
	start := time.Now()
	if err := d.BlobGC(0.1); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	after := d.Metrics().Blob
	moved := (after.GCBytesRead - before.GCBytesRead) + (after.GCBytesWritten - before.GCBytesWritten)
	if moved < 64<<10 {
		t.Fatalf("GC moved only %d bytes: not a test of the limiter", moved)
	}
	floor := time.Duration(float64(moved) / rate * 0.8 * float64(time.Second))
	t.Logf("GC moved %d bytes in %v at %d B/s (floor %v)", moved, elapsed, rate, floor)
	if elapsed < floor {
		t.Fatalf("GC moved %d bytes in %v: faster than %d B/s allows (%v)", moved, elapsed, rate, floor)
	}
	checkModel(t, d, model)
}

// TestBlobSpaceAmpOverTime measures blob space amplification over a long
// steady random overwrite with the engine's defaults for blob GC (discard
// ratio, space-amp trigger, rate limit, L0 trigger), at a scale where the
// LSM is several flushes deep: 10,000 keys × 4 KiB values (40 MiB live),
// 2 MiB memtables and blob files. It samples the blob files on disk /
// the live record bytes every 2,500 overwrites, without waiting for
// background work (what a reader of the directory would see), and logs
// the series and its quartiles. A measurement, not a check: it runs only
// when CAIRN_BLOB_SPACEAMP_ROUNDS (rounds of 10,000 overwrites) is set;
// CAIRN_BLOB_GC_BYTES_PER_SEC overrides BlobGCBytesPerSec (-1: no limit),
// CAIRN_BLOB_MAX_SPACE_AMP BlobMaxSpaceAmp.
//
//	CAIRN_BLOB_SPACEAMP_ROUNDS=30 go test ./lsm -run TestBlobSpaceAmpOverTime -v
func TestBlobSpaceAmpOverTime(t *testing.T) {
	rounds, err := strconv.Atoi(os.Getenv("CAIRN_BLOB_SPACEAMP_ROUNDS"))
	if err != nil || rounds <= 0 {
		t.Skip("set CAIRN_BLOB_SPACEAMP_ROUNDS to run")
	}
	fs := vfs.NewMem()
	o := &Options{
		FS:                      fs,
		MemTableSizeBytes:       2 << 20,
		MinBlobSize:             4096,
		BlobCompression:         NoCompression, // live is computed from RecordLen
		BlobTargetFileSizeBytes: 2 << 20,
	}
	if r, err := strconv.ParseInt(os.Getenv("CAIRN_BLOB_GC_BYTES_PER_SEC"), 10, 64); err == nil {
		o.BlobGCBytesPerSec = r
	}
	if a, err := strconv.ParseFloat(os.Getenv("CAIRN_BLOB_MAX_SPACE_AMP"), 64); err == nil {
		o.BlobMaxSpaceAmp = a
	}
	d := mustOpen(t, "db", o)
	defer d.Close()
	const keys = 10_000
	const valueSize = 4096
	live := int64(keys) * int64(blob.RecordLen(6, valueSize))
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, valueSize)
	put := func(i int) {
		for j := 0; j < len(val); j += 8 {
			binary.LittleEndian.PutUint64(val[j:], rng.Uint64())
		}
		if err := d.Put(fmt.Appendf(nil, "k%05d", i), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	var samples []float64
	start := time.Now()
	for r := range rounds {
		for j := range keys {
			put(rng.IntN(keys))
			if (j+1)%2500 != 0 {
				continue
			}
			samples = append(samples, float64(blobBytesOnDisk(fs, listBlobFiles(t, fs, "db")))/float64(live))
		}
		m := d.Metrics().Blob
		t.Logf("round %d (%v): amp %.2f %.2f %.2f %.2f; version: %d blob files, %d MiB, live %d MiB, known garbage %d MiB; GC read %d MiB written %d MiB",
			r+1, time.Since(start).Round(time.Second), samples[len(samples)-4], samples[len(samples)-3],
			samples[len(samples)-2], samples[len(samples)-1], m.Files, m.FileBytes>>20, m.LiveBytes>>20, m.GarbageBytes>>20,
			m.GCBytesRead>>20, m.GCBytesWritten>>20)
	}
	// Quartiles after the first round (the initial fill has no garbage).
	s := slices.Clone(samples[4:])
	slices.Sort(s)
	q := func(p float64) float64 { return s[int(p*float64(len(s)-1))] }
	m := d.Metrics()
	elapsed := time.Since(start)
	t.Logf("space amp over %d samples: min %.2f p25 %.2f median %.2f p75 %.2f p95 %.2f max %.2f; write amp %.2f; user bytes %d MiB, blob bytes written %d MiB, GC read %d MiB written %d MiB",
		len(s), s[0], q(0.25), q(0.5), q(0.75), q(0.95), s[len(s)-1], m.WriteAmplification,
		int64(rounds+1)*keys*valueSize>>20, m.Blob.BytesWritten>>20, m.Blob.GCBytesRead>>20, m.Blob.GCBytesWritten>>20)
	t.Logf("overwrite: %v, %.1f MB/s; relocated by compactions %d MiB, forced compactions %d, blob slowdowns %d, compactions %d",
		elapsed.Round(time.Millisecond), float64(int64(rounds)*keys*valueSize)/elapsed.Seconds()/1e6,
		m.Blob.RelocatedBytesWritten>>20, m.Blob.ForcedCompactions, m.Blob.Slowdowns, m.Compactions)
}

// TestBlobGCUnpacedWhenBehind: blob GC paced far below the write rate
// (1 KiB/s) still brings the blob files back to about 1.5× their live
// bytes once a random overwrite has pushed them past it, because a GC that
// has fallen behind stops pacing itself. Before, the paced jobs would have
// needed hours for the ~10 MB here and the directory stayed at ~2.5×.
func TestBlobGCUnpacedWhenBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~30 MB")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fs := vfs.NewMem()
	d := mustOpen(t, "db", &Options{
		FS:                      fs,
		MemTableSizeBytes:       1 << 20,
		TargetFileSizeBytes:     64 << 10,
		LBaseMaxBytes:           256 << 10,
		L0CompactionThreshold:   1,
		MinBlobSize:             4096,
		BlobCompression:         NoCompression,
		BlobTargetFileSizeBytes: 1 << 20,
		BlobGCBytesPerSec:       1 << 10,
		// The background job's pacing is under test, not compactions.
		DisableBlobCompactionGC: true,
	})
	defer d.Close()
	const keys = 1500
	const valueSize = 4096
	live := int64(keys) * int64(blob.RecordLen(5, valueSize))
	val := make([]byte, valueSize)
	model := make([]byte, keys) // the last byte of each key's value
	put := func(i int) {
		k := fmt.Sprintf("k%04d", i)
		copy(val, k)
		model[i] = byte(rng.Uint32())
		val[valueSize-1] = model[i]
		if err := d.Put([]byte(k), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	for range 4 * keys {
		put(rng.IntN(keys))
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	amp := func() float64 { return float64(blobBytesOnDisk(fs, blobFilesOf(d))) / float64(live) }
	// GC keeps going, paced, below 1.5× (the bound is on the garbage
	// compactions have found, so allow a little above it).
	deadline := time.Now().Add(2 * time.Minute)
	for a := amp(); a > 1.6 || d.Metrics().Blob.GCUnpacedJobs == 0; a = amp() {
		if time.Now().After(deadline) {
			t.Fatalf("space amp %.2f after 2 minutes of GC: %+v", a, d.Metrics().Blob)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := d.Metrics().Blob
	t.Logf("space amp %.2f; unpaced GC jobs %d; GC read %d written %d", amp(), m.GCUnpacedJobs, m.GCBytesRead, m.GCBytesWritten)
	for i := range keys {
		k := fmt.Sprintf("k%04d", i)
		got, err := d.Get([]byte(k))
		if err != nil || len(got) != valueSize || got[valueSize-1] != model[i] || string(got[:len(k)]) != k {
			t.Fatalf("%s: %d bytes, %v", k, len(got), err)
		}
	}
}

// TestBlobFillForcesNoCompactions: a fill of new keys hides no blob
// garbage in L0, and once an L0 compaction has found so, the picker stops
// forcing L0 compactions for it (which would rewrite the base level's
// tables at every flush for nothing). Before the estimate, every flush of
// this fill forced one.
func TestBlobFillForcesNoCompactions(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", &Options{
		FS:                      fs,
		MemTableSizeBytes:       256 << 10,
		TargetFileSizeBytes:     32 << 10,
		LBaseMaxBytes:           64 << 10,
		MinBlobSize:             1024,
		BlobCompression:         NoCompression,
		BlobTargetFileSizeBytes: 256 << 10,
	})
	defer d.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1024)
	for _, i := range rng.Perm(4000) {
		binary.LittleEndian.PutUint64(val, rng.Uint64())
		if err := d.Put(fmt.Appendf(nil, "k%05d", i), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := waitBackgroundIdle(d); err != nil {
		t.Fatal(err)
	}
	m := d.Metrics()
	t.Logf("%d flushes, %d compactions, %d forced", m.Flushes, m.Compactions, m.Blob.ForcedCompactions)
	if m.Blob.ForcedCompactions > 1 {
		t.Fatalf("a fill of new keys forced %d compactions (%d flushes)", m.Blob.ForcedCompactions, m.Flushes)
	}
}
