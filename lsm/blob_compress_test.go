package lsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// blobFileCompression returns the compression named in blob file n's
// header.
func blobFileCompression(t *testing.T, d *DB, n base.FileNum) blob.Compression {
	t.Helper()
	r, release, err := d.blobs.files.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	return r.Compression()
}

// TestBlobCompressed: with BlobCompression Snappy the blob files are
// Snappy files, a fraction of the plain size for compressible values;
// every value reads back through a cold Get (decoded into the cache), a
// warm one (a hit decodes nothing) and iterators (decoded from the
// readahead window). Reopened with compression off, the Snappy files
// still read, new files are plain, and blob GC rewrites Snappy records
// into plain ones.
func TestBlobCompressed(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobCompression = SnappyCompression
	o.BlobGCDiscardRatio = -1
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	putBlobKeys(t, d, model, 1, 0, 2000) // compressible
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20 { // incompressible
		k := fmt.Sprintf("r%02d", i)
		v := make([]byte, 3000)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
		model[k] = v
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	m := d.Metrics().Blob
	plain := int64(200*blob.RecordLen(4, 2000) + 20*blob.RecordLen(3, 3000))
	if m.Files == 0 || m.FileBytes > plain/2 {
		t.Fatalf("snappy blob files hold %d bytes, plain records %d", m.FileBytes, plain)
	}
	for _, n := range blobFilesOf(d) {
		if c := blobFileCompression(t, d, n); c != blob.CompressionSnappy {
			t.Fatalf("blob file %s is %s", n, c)
		}
	}
	checkModel(t, d, model) // cold Gets fill the cache, iterators decode
	hits := d.Metrics().Blob.Cache.Hits
	checkModel(t, d, model) // warm
	if d.Metrics().Blob.Cache.Hits <= hits {
		t.Fatal("no blob cache hit on the second pass")
	}
	d.Close()

	o.BlobCompression = NoCompression
	d = mustOpen(t, "db", o)
	defer d.Close()
	checkModel(t, d, model)
	old := blobFilesOf(d)
	putBlobKeys(t, d, model, 2, 1, 2000)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.BlobGC(0); err != nil {
		t.Fatal(err)
	}
	checkModel(t, d, model)
	for _, n := range blobFilesOf(d) {
		for _, o := range old {
			if n == o {
				t.Fatalf("blob file %s survived GC", n)
			}
		}
		if c := blobFileCompression(t, d, n); c != blob.CompressionNone {
			t.Fatalf("blob file %s written with compression off is %s", n, c)
		}
	}
}

// TestBlobCompressedCorruption damages a record of a Snappy blob file
// below the cache, one stored compressed and one stored raw (a value that
// does not compress), and reads it through a cold cache, by Get and by an
// iterator: a corruption error, never a wrong value.
func TestBlobCompressedCorruption(t *testing.T) {
	for _, kind := range []string{"compressed", "raw"} {
		t.Run(kind, func(t *testing.T) { testBlobCompressedCorruption(t, kind) })
	}
}

// randomBlobValue is a value of n random bytes derived from key: Snappy
// does not shrink it, so a Snappy blob file stores it raw.
func randomBlobValue(key string, n int) []byte {
	var seed uint64
	for _, c := range key {
		seed = seed*31 + uint64(c)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(rng.Uint32())
	}
	return v
}

func testBlobCompressedCorruption(t *testing.T, kind string) {
	valueFor := func(k string) []byte {
		if kind == "raw" {
			return randomBlobValue(k, 2000)
		}
		return blobValueFor(k, 0, 2000)
	}
	want := blob.CompressionSnappy
	if kind == "raw" {
		want = blob.CompressionNone
	}
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobCompression = SnappyCompression
	d := mustOpen(t, "db", o)
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		if err := d.Put([]byte(k), valueFor(k), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	files := listBlobFiles(t, fs, "db")
	if len(files) != 1 {
		t.Fatalf("blob files %v", files)
	}
	// Find record 3's offset from its index.
	var x blob.Index
	if _, err := d.getWith([]byte("k3"), 0, func(_ *readState, _, v []byte, kind base.Kind, _, _ base.SeqNum) ([]byte, error) {
		var err error
		x, err = blob.DecodeIndex(v)
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	if x.Compression != want {
		t.Fatalf("%s value stored %s", kind, x.Compression)
	}
	if c := blobFileCompression(t, d, files[0]); c != blob.CompressionSnappy {
		t.Fatalf("blob file is %s", c)
	}
	d.Close()
	corruptFile(t, fs, base.MakeFilepath("db", base.FileTypeBlob, files[0]), int64(x.Offset+x.Len/2))
	d = mustOpen(t, "db", o)
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		got, err := d.Get([]byte(k))
		if i == 3 {
			if !IsCorruption(err) {
				t.Fatalf("Get of the damaged record: %d bytes, %v", len(got), err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, valueFor(k)) {
			t.Fatalf("Get(%s): %v", k, err)
		}
	}
	d.Close()
	d = mustOpen(t, "db", o) // a cold cache again
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if !bytes.Equal(it.Value(), valueFor(string(it.Key()))) {
			t.Fatalf("iterator returned a wrong value for %s", it.Key())
		}
		n++
	}
	if err := it.Close(); !IsCorruption(err) || n != 3 {
		t.Fatalf("iteration over the damaged record: %d keys, %v", n, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
