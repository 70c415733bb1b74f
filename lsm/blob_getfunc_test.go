package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestGetFunc: GetFunc hands fn the same value Get returns, from the
// memtable, a table and a blob file; ErrNotFound without calling fn for a
// missing or deleted key; fn's error comes back as is.
func TestGetFunc(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", blobTestOptions(fs, 64))
	defer d.Close()
	small, big := []byte("small"), blobValueFor("big", 1, 4096)
	d.Put([]byte("small"), small, NoSync)
	d.Put([]byte("big"), big, NoSync)
	d.Put([]byte("gone"), big, NoSync)
	d.Delete([]byte("gone"), NoSync)
	check := func(stage string) {
		t.Helper()
		for k, want := range map[string][]byte{"small": small, "big": big} {
			var got []byte
			if err := d.GetFunc([]byte(k), func(v []byte) error { got = bytes.Clone(v); return nil }); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: GetFunc(%s) = %q, %v", stage, k, got, err)
			}
		}
		for _, k := range []string{"gone", "none"} {
			if err := d.GetFunc([]byte(k), func([]byte) error { t.Fatalf("%s: fn called for %s", stage, k); return nil }); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: GetFunc(%s): %v, want ErrNotFound", stage, k, err)
			}
		}
		boom := errors.New("boom")
		if err := d.GetFunc([]byte("big"), func([]byte) error { return boom }); err != boom {
			t.Fatalf("%s: fn's error: got %v", stage, err)
		}
	}
	check("memtable")
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := d.Metrics().Blob.Files; n == 0 {
		t.Fatalf("no blob file after the flush")
	}
	check("flushed")
}

// TestGetFuncBlobHitAllocates: a blob cache hit through GetFunc copies
// nothing and allocates nothing (Get allocates the value's copy).
func TestGetFuncBlobHitAllocates(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", blobTestOptions(fs, 64))
	defer d.Close()
	v := blobValueFor("key", 1, 4096)
	d.Put([]byte("key"), v, NoSync)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	key := []byte("key")
	var n int
	fn := func(v []byte) error { n += len(v); return nil }
	if err := d.GetFunc(key, fn); err != nil { // warms the blob cache
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(100, func() {
		if err := d.GetFunc(key, fn); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("GetFunc of a cached blob value: %.1f allocations, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := d.Get(key); err != nil {
			t.Fatal(err)
		}
	}); a < 1 {
		t.Fatalf("Get: %.1f allocations, want the value's copy", a)
	}
}

// BenchmarkBlobGetView compares Get (a copy of the value) with GetFunc (a
// view) on readrandom with separation (4 KiB values, caches as in
// BenchmarkBlobReadRandom).
func BenchmarkBlobGetView(b *testing.B) {
	for _, api := range []string{"Get", "GetFunc"} {
		b.Run(api, func(b *testing.B) {
			d := blobBenchDB(b, 4096)
			n := blobBenchKeys()
			rng := rand.New(rand.NewPCG(3, 3))
			var key []byte
			var sum int
			fn := func(v []byte) error { sum += int(v[0]) + len(v); return nil }
			b.SetBytes(blobBenchValueSize)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				key = benchKey(key, uint64(rng.IntN(n)))
				var err error
				if api == "Get" {
					var v []byte
					v, err = d.Get(key)
					if err == nil {
						fn(v)
					}
				} else {
					err = d.GetFunc(key, fn)
				}
				if err != nil {
					b.Fatal(fmt.Errorf("%s: %w", key, err))
				}
			}
		})
	}
}

// TestBlobScanViews: a scan over a cold blob cache reads values through
// its readahead windows as views: no cache inserts, (almost) no
// allocations per step, every value right; a record damaged in the middle
// of a window fails the scan with a corruption error at that key.
func TestBlobScanViews(t *testing.T) {
	const n = 500
	fs, o, d, model := coldBlobScanDB(t, n)
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	var scanErr error
	allocs := testing.AllocsPerRun(1, func() {
		seen = 0
		for ok := it.First(); ok; ok = it.Next() {
			if !bytes.Equal(it.Value(), model[string(it.Key())]) {
				scanErr = fmt.Errorf("value of %s", it.Key())
				return
			}
			seen++
		}
	})
	if scanErr != nil {
		t.Fatal(scanErr)
	}
	if err := it.Close(); err != nil || seen != n {
		t.Fatalf("scan: %d keys, %v", seen, err)
	}
	// Two scans (AllocsPerRun warms up once): windows, readers, blocks.
	if allocs > n/10 {
		t.Fatalf("a scan of %d separated values made %.0f allocations", n, allocs)
	}
	if m := d.Metrics().Blob.Cache; m.Count != 0 {
		t.Fatalf("the scans put %d values in the blob cache, want none", m.Count)
	}
	d.Close()

	files := listBlobFiles(t, fs, "db")
	if len(files) != 1 {
		t.Fatalf("blob files %v", files)
	}
	const bad = 5 // inside the first window
	rec := int64(blob.RecordLen(5, 1000))
	corruptFile(t, fs, base.MakeFilepath("db", base.FileTypeBlob, files[0]), blob.HeaderLen+bad*rec+100)
	d = mustOpen(t, "db", o)
	defer d.Close()
	it, _ = d.NewIter(nil)
	seen = 0
	for ok := it.First(); ok; ok = it.Next() {
		if !bytes.Equal(it.Value(), model[string(it.Key())]) {
			t.Fatalf("wrong value of %s", it.Key())
		}
		seen++
	}
	if err := it.Close(); !IsCorruption(err) || seen != bad {
		t.Fatalf("scan over a damaged record: %d keys, %v; want %d and a corruption", seen, err, bad)
	}
}
