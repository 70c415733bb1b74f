package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func blobTestOptions(fs vfs.FS, minBlobSize int) *Options {
	o := testOptions(fs)
	o.MinBlobSize = minBlobSize
	o.BlobTargetFileSizeBytes = 32 << 10
	// Plain records: tests compute sizes and offsets from RecordLen.
	// TestBlobCompressed covers Snappy files.
	o.BlobCompression = NoCompression
	return o
}

// blobValueFor returns a value of n bytes that encodes key and version.
func blobValueFor(key string, ver, n int) []byte {
	p := fmt.Sprintf("%s@%d:", key, ver)
	if n < len(p) {
		n = len(p)
	}
	return append([]byte(p), bytes.Repeat([]byte{byte('a' + ver%26)}, n-len(p))...)
}

// waitBlobFilesOnDisk waits until the blob files in dir are want() (re-read
// each time): obsolete files are deleted by the cleaner goroutine once the
// last version holding them is released, which may be a background job's
// after the call under test returned.
func waitBlobFilesOnDisk(t testing.TB, fs vfs.FS, dir string, want func() []base.FileNum) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		disk, w := listBlobFiles(t, fs, dir), want()
		if slices.Equal(disk, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("blob files on disk %v, want %v", disk, w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// putBlobKeys puts every step-th key of k000..k199 with blobValueFor(key,
// version, size), recording it in model.
func putBlobKeys(t testing.TB, d *DB, model map[string][]byte, step, version, size int) {
	t.Helper()
	for i := 0; i < 200; i += step {
		k := fmt.Sprintf("k%03d", i)
		v := blobValueFor(k, version, size)
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
		model[k] = v
	}
}

func listBlobFiles(t testing.TB, fs vfs.FS, dir string) []base.FileNum {
	t.Helper()
	return filesOnDisk(t, fs, dir, base.FileTypeBlob)
}

// filesOnDisk lists the numbers of dir's files of type ft, sorted.
func filesOnDisk(t testing.TB, fs vfs.FS, dir string, ft base.FileType) []base.FileNum {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []base.FileNum
	for _, n := range names {
		if typ, num, ok := base.ParseFilename(n); ok && typ == ft {
			out = append(out, num)
		}
	}
	slices.Sort(out)
	return out
}

func checkModel(t testing.TB, d *DB, model map[string][]byte) {
	t.Helper()
	for k, want := range model {
		got, err := d.Get([]byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get(%s) = %d bytes, %v; want %d bytes", k, len(got), err, len(want))
		}
	}
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(keys) || string(it.Key()) != keys[i] || !bytes.Equal(it.Value(), model[keys[i]]) {
			t.Fatalf("forward iteration at %d: key %q", i, it.Key())
		}
		i++
	}
	if i != len(keys) {
		t.Fatalf("forward iteration saw %d keys, want %d (err %v)", i, len(keys), it.Error())
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		i--
		if string(it.Key()) != keys[i] || !bytes.Equal(it.Value(), model[keys[i]]) {
			t.Fatalf("backward iteration at %d: key %q", i, it.Key())
		}
	}
	if i != 0 {
		t.Fatalf("backward iteration stopped at %d", i)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBlobSeparation writes values around MinBlobSize, overwrites and
// deletes, flushes, compacts and reopens: every value reads back through
// Get and iterators; blob files appear with separation and are deleted
// once compactions have dropped every index into them.
func TestBlobSeparation(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fs := vfs.NewMem()
	cache := blob.NewCache(1 << 20)
	o := blobTestOptions(fs, 64)
	o.BlobCache = cache
	o.BlobGCDiscardRatio = -1 // no GC: files must go by garbage accounting alone
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	for round := range 6 {
		for i := range 300 {
			k := fmt.Sprintf("k%04d", rng.IntN(400))
			switch rng.IntN(10) {
			case 0:
				if err := d.Delete([]byte(k), NoSync); err != nil {
					t.Fatal(err)
				}
				delete(model, k)
			default:
				v := blobValueFor(k, round*1000+i, []int{10, 63, 64, 65, 500, 3000}[rng.IntN(6)])
				if err := d.Put([]byte(k), v, NoSync); err != nil {
					t.Fatal(err)
				}
				model[k] = v
			}
		}
		if round%2 == 1 {
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		checkModel(t, d, model)
	}
	if len(listBlobFiles(t, fs, "db")) == 0 {
		t.Fatal("no blob files with MinBlobSize 64")
	}
	if m := d.Metrics(); m.Blob.Files == 0 || m.Blob.BytesWritten == 0 {
		t.Fatalf("blob metrics %+v", m.Blob)
	}
	// Overwrite everything with small values and compact: every blob
	// index is dropped, so every blob file must go.
	for k := range model {
		v := []byte("small")
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
		model[k] = v
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	checkModel(t, d, model)
	if m := d.Metrics(); m.Blob.Files != 0 {
		t.Fatalf("after overwriting every separated value and compacting, %d blob files remain: %+v", m.Blob.Files, m.Blob)
	}
	waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return nil })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if m := cache.Metrics(); m.Outstanding != m.Count {
		t.Fatalf("leaked blob cache buffers after Close: %+v", m)
	}
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}
	if m := cache.Metrics(); m.MappedBytes != 0 {
		t.Fatalf("cache still maps %d bytes after Close", m.MappedBytes)
	}
}

// TestBlobReopenAndGarbage: separated values survive reopening (WAL replay
// separates at recovery too), and garbage accounting across compactions
// matches what was overwritten.
func TestBlobReopenAndGarbage(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 100)
	o.BlobGCDiscardRatio = -1
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	putBlobKeys(t, d, model, 1, 0, 1000)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	// Overwrite half; these stay in the WAL across the reopen.
	putBlobKeys(t, d, model, 2, 1, 1000)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, "db", o)
	checkModel(t, d, model)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	checkModel(t, d, model)
	m := d.Metrics()
	rec := int64(blob.RecordLen(4, 1000))
	if m.Blob.GarbageBytes+m.Blob.LiveBytes == 0 || m.Blob.LiveBytes != 200*rec {
		t.Fatalf("live %d garbage %d, want live %d", m.Blob.LiveBytes, m.Blob.GarbageBytes, 200*rec)
	}
	if m.Blob.GarbageBytes != 100*rec {
		// The first flush's files hold the 100 overwritten records.
		t.Fatalf("garbage %d, want %d", m.Blob.GarbageBytes, 100*rec)
	}
	d.Close()
}

// TestBlobCacheHitTakesNoMutex proves the seed's point: a Get that hits
// the blob cache takes no blob cache shard lock and makes no lookup in
// the blob reader cache (whose Get takes a mutex); the DB-wide mutex is
// never on the read path at all. Fails with metadataFirst (Titan's old
// order).
func TestBlobCacheHitTakesNoMutex(t *testing.T) {
	for _, metadataFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("metadataFirst=%v", metadataFirst), func(t *testing.T) {
			fs := vfs.NewMem()
			d := mustOpen(t, "db", blobTestOptions(fs, 64))
			defer d.Close()
			d.blobs.metadataFirst = metadataFirst
			v := blobValueFor("key", 1, 4096)
			d.Put([]byte("key"), v, NoSync)
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			if got, err := d.Get([]byte("key")); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("cold Get: %v", err)
			}
			before := d.Metrics().Blob
			locks := d.blobs.cache.Locks()
			const n = 100
			for range n {
				if got, err := d.Get([]byte("key")); err != nil || !bytes.Equal(got, v) {
					t.Fatalf("warm Get: %v", err)
				}
			}
			after := d.Metrics().Blob
			if after.Cache.Hits-before.Cache.Hits != n {
				t.Fatalf("%d hits, want %d", after.Cache.Hits-before.Cache.Hits, n)
			}
			lookups := after.FileCacheLookups - before.FileCacheLookups
			shardLocks := d.blobs.cache.Locks() - locks
			if metadataFirst {
				if lookups != n {
					t.Fatalf("metadata-first order made %d reader-cache lookups, want %d", lookups, n)
				}
				return
			}
			if lookups != 0 || shardLocks != 0 {
				t.Fatalf("%d cache-hit Gets made %d reader-cache lookups and %d shard locks, want 0 and 0", n, lookups, shardLocks)
			}
		})
	}
}

// corruptFile flips one byte of a file at off (negative: from the end).
func corruptFile(t testing.TB, fs vfs.FS, name string, off int64) {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(data))
	}
	data[off] ^= 0x5a
	w, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Sync()
	w.Close()
}

// TestBlobCorruption damages a record below the cache and reads it through
// a cold cache: the read fails with a corruption error, never a wrong
// value; other keys still read.
func TestBlobCorruption(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	d := mustOpen(t, "db", o)
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		d.Put([]byte(k), blobValueFor(k, 0, 200), NoSync)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	files := listBlobFiles(t, fs, "db")
	if len(files) != 1 {
		t.Fatalf("blob files %v", files)
	}
	// Record 3 starts at header + 3 records; damage its value.
	rec := int64(blob.RecordLen(2, 200))
	corruptFile(t, fs, base.MakeFilepath("db", base.FileTypeBlob, files[0]), blob.HeaderLen+3*rec+50)
	d = mustOpen(t, "db", o)
	defer d.Close()
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		got, err := d.Get([]byte(k))
		if i == 3 {
			if !IsCorruption(err) {
				t.Fatalf("Get of the damaged record: %q, %v", got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, blobValueFor(k, 0, 200)) {
			t.Fatalf("Get(%s): %v", k, err)
		}
	}
	it, _ := d.NewIter(nil)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); !IsCorruption(err) || n != 3 {
		t.Fatalf("iteration over the damaged record: %d keys, %v", n, err)
	}
}

// TestBlobCheckpoint: a checkpoint carries the blob files and a DB opened
// from it reads every separated value.
func TestBlobCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	for i := range 100 {
		k := fmt.Sprintf("k%03d", i)
		v := blobValueFor(k, 0, 100+i*10)
		d.Put([]byte(k), v, NoSync)
		model[k] = v
	}
	if err := d.Checkpoint("ckpt"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if len(listBlobFiles(t, fs, "ckpt")) == 0 {
		t.Fatal("checkpoint holds no blob file")
	}
	d2 := mustOpen(t, "ckpt", o)
	checkModel(t, d2, model)
	d2.Close()
}

// TestBlobOrphansDeleted: a blob file that no manifest names (a crash
// during a flush with separation) is removed at Open.
func TestBlobOrphansDeleted(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	d := mustOpen(t, "db", o)
	d.Put([]byte("a"), blobValueFor("a", 0, 100), NoSync)
	d.Close()
	orphan := base.MakeFilepath("db", base.FileTypeBlob, 999)
	f, _ := fs.Create(orphan)
	f.Write([]byte("half a blob file"))
	f.Close()
	d = mustOpen(t, "db", o)
	defer d.Close()
	waitSwept(t, d) // the sweep runs after Open returns
	if _, err := fs.Stat(orphan); err == nil {
		t.Fatal("orphan blob file survived Open")
	}
	if v, err := d.Get([]byte("a")); err != nil || !bytes.Equal(v, blobValueFor("a", 0, 100)) {
		t.Fatalf("Get: %v", err)
	}
}

// TestBlobDanglingIndex: an index into a blob file the version does not
// hold is corruption, not a read of some other file.
func TestBlobDanglingIndex(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", blobTestOptions(fs, 64))
	defer d.Close()
	rs := d.loadReadState()
	defer rs.unref()
	idx := blob.Index{FileNum: 12345, Offset: blob.HeaderLen, Len: 100}.AppendEncoded(nil)
	_, err := d.blobValue(rs.version, []byte("k"), idx, nil)
	if !IsCorruption(err) || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("dangling index: %v", err)
	}
	if _, err := d.blobValue(rs.version, []byte("k"), []byte{9}, nil); !IsCorruption(err) || errors.Is(err, ErrNotFound) {
		t.Fatalf("garbage index: %v", err)
	}
}

// coldBlobScanDB writes n keys k0000.. with 1000-byte separated values in
// blob file order, flushes, and reopens the DB so its caches are cold.
func coldBlobScanDB(t *testing.T, n int) (vfs.FS, *Options, *DB, map[string][]byte) {
	t.Helper()
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobTargetFileSizeBytes = 64 << 20
	o.MemTableSizeBytes = 4 << 20
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	for i := range n {
		k := fmt.Sprintf("k%04d", i)
		v := blobValueFor(k, 0, 1000)
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
		model[k] = v
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	return fs, o, mustOpen(t, "db", o), model
}

// TestBlobScanReadsAheadInManyFiles: a scan over keys written in random
// order meets the records of every flush's blob file in turn. With 20
// such files interleaved (one more than the old 8 readahead slots could
// keep), it still reads each file in windows, not one read per value.
func TestBlobScanReadsAheadInManyFiles(t *testing.T) {
	const files, perFile = 20, 50
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobTargetFileSizeBytes = 64 << 20
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	// Flush f holds keys f, f+files, f+2*files, ...: every file's records
	// are spread over the whole key range.
	for f := range files {
		for i := range perFile {
			k := fmt.Sprintf("k%04d", i*files+f)
			v := blobValueFor(k, 0, 1000)
			if err := d.Put([]byte(k), v, NoSync); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.Metrics().Blob.Files; n < files {
		t.Fatalf("%d blob files, want %d", n, files)
	}
	d.Close()
	d = mustOpen(t, "db", o) // cold caches
	defer d.Close()
	before := d.Metrics().Blob.FileCacheLookups
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for ok := it.First(); ok; ok = it.Next() {
		if !bytes.Equal(it.Value(), model[string(it.Key())]) {
			t.Fatalf("value of %s", it.Key())
		}
		seen++
	}
	if err := it.Close(); err != nil || seen != files*perFile {
		t.Fatalf("scan: %d keys, %v", seen, err)
	}
	reads := d.Metrics().Blob.FileCacheLookups - before
	t.Logf("%d values in %d files scanned with %d blob reads", seen, files, reads)
	if reads > int64(seen/4) {
		t.Fatalf("scan of %d values in %d files made %d blob reads: readahead lost between files", seen, files, reads)
	}
}

// TestBlobScanReadsAhead: a scan over separated values that lie in blob
// file order, through a cold blob cache, reads the file in windows, not
// one positioned read per value (counted as reader-cache lookups, one per
// read); backwards and point reads still read one record each.
func TestBlobScanReadsAhead(t *testing.T) {
	const n = 1000
	_, _, d, model := coldBlobScanDB(t, n) // cold caches
	defer d.Close()
	before := d.Metrics().Blob.FileCacheLookups
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for ok := it.First(); ok; ok = it.Next() {
		if !bytes.Equal(it.Value(), model[string(it.Key())]) {
			t.Fatalf("value of %s", it.Key())
		}
		seen++
	}
	if err := it.Close(); err != nil || seen != n {
		t.Fatalf("scan: %d keys, %v", seen, err)
	}
	reads := d.Metrics().Blob.FileCacheLookups - before
	t.Logf("%d values scanned with %d blob reads", n, reads)
	if reads > n/8 {
		t.Fatalf("scan of %d values made %d blob reads: no readahead", n, reads)
	}
}
