package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/trace"
)

func readTrace(t *testing.T, data []byte) (trace.Header, []trace.Record) {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var recs []trace.Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return r.Header(), recs
		} else if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
}

// TestTraceRecordsCacheLookups checks that a trace holds one record per
// block and blob cache lookup, agreeing with the caches' own hit and miss
// counts, with the Get fields the spec asks for.
func TestTraceRecordsCacheLookups(t *testing.T) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.CacheSizeBytes = 8 << 10 // small: both hits and misses
	o.MinBlobSize = 512
	o.BlobCompression = NoCompression // a blob record's size is its value's
	d := mustOpen(t, "db", o)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 2000
	key := func(i int) []byte { return fmt.Appendf(nil, "key%05d", i) }
	for i := range n {
		v := make([]byte, 20)
		if i%10 == 0 {
			v = make([]byte, 600) // separated into a blob file
		}
		if err := d.Put(key(i), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen so that tables are opened (and their pinned blocks read)
	// while the trace runs.
	d = mustOpen(t, "db", o)
	defer d.Close()

	var buf bytes.Buffer
	if err := d.StartTrace(trace.Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	if err := d.StartTrace(trace.Options{}, io.Discard); !errors.Is(err, trace.ErrTraceRunning) {
		t.Fatalf("second StartTrace: %v", err)
	}
	before := d.Metrics()
	snap, err := d.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	const gets = 300
	getKeys := map[uint64][]byte{}
	fromSnap := map[uint64]bool{}
	for g := range gets {
		k := key(rng.IntN(n + n/10)) // some missing
		getKeys[uint64(g+1)] = k
		var err error
		if g%3 == 0 {
			fromSnap[uint64(g+1)] = true
			_, err = snap.Get(k)
		} else {
			_, err = d.Get(k)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	snap.Close()
	it, err := d.NewIter(&IterOptions{LowerBound: key(100), UpperBound: key(400)})
	if err != nil {
		t.Fatal(err)
	}
	scanned := 0
	for it.First(); it.Valid(); it.Next() {
		_ = it.Value()
		scanned++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	after := d.Metrics()
	if err := d.EndTrace(); err != nil {
		t.Fatal(err)
	}
	if after.Compactions != before.Compactions || after.Flushes != before.Flushes {
		t.Fatal("background work ran during the trace")
	}
	// No records once the trace ended.
	traced := buf.Len()
	d.Get(key(1))
	if buf.Len() != traced {
		t.Fatal("a record was written after EndTrace")
	}

	h, recs := readTrace(t, buf.Bytes())
	if h.MajorVersion != trace.MajorVersion || h.MinorVersion != trace.MinorVersion {
		t.Fatalf("header %+v", h)
	}
	last := h.StartTimestamp
	for _, r := range recs {
		if r.AccessTimestamp < last {
			t.Fatalf("timestamp %d after %d", r.AccessTimestamp, last)
		}
		last = r.AccessTimestamp
	}
	var dataHits, dataMisses, blobHits, blobMisses int64
	pinned := map[trace.BlockType]int{}
	byCaller := map[trace.Caller]int{}
	for _, r := range recs {
		byCaller[r.Caller]++
		if r.Pinned {
			pinned[r.Type]++
			if r.CacheHit || !r.NoInsert || r.Caller != trace.CallerFlush {
				t.Fatalf("pinned block record %+v", r)
			}
			continue
		}
		_, file, off, err := trace.BlockKeyParts(r.BlockKey)
		if err != nil || file != r.FileNumber {
			t.Fatalf("block key %x of %+v: file %d offset %d, %v", r.BlockKey, r, file, off, err)
		}
		switch r.Type {
		case trace.BlockData:
			if r.CacheHit {
				dataHits++
			} else {
				dataMisses++
			}
			if r.Level < 0 || r.BlockSize == 0 {
				t.Fatalf("data record %+v", r)
			}
		case trace.BlockBlob:
			if r.CacheHit {
				blobHits++
			} else {
				blobMisses++
			}
			if r.Level != -1 || r.BlockSize < 600 {
				t.Fatalf("blob record %+v", r)
			}
		default:
			t.Fatalf("unexpected record %+v", r)
		}
		switch r.Caller {
		case trace.CallerGet:
			want, ok := getKeys[r.GetID]
			if !ok || !bytes.Equal(r.ReferencedKey, want) || r.FromUserSnapshot != fromSnap[r.GetID] {
				t.Fatalf("Get record %+v: want key %q, snapshot %v", r, want, fromSnap[r.GetID])
			}
			if r.Type == trace.BlockData {
				if r.NumKeysInBlock == 0 || r.ReferencedKeyExists != (r.ReferencedDataSize > 0) {
					t.Fatalf("Get data record %+v", r)
				}
			}
		case trace.CallerIterator:
			if r.GetID != 0 || r.ReferencedKey != nil {
				t.Fatalf("iterator record %+v", r)
			}
		default:
			t.Fatalf("unexpected caller in %+v", r)
		}
	}
	if got, want := dataHits, after.BlockCache.Hits-before.BlockCache.Hits; got != want {
		t.Errorf("trace has %d data-block hits, the block cache counted %d", got, want)
	}
	if got, want := dataMisses, after.BlockCache.Misses-before.BlockCache.Misses; got != want {
		t.Errorf("trace has %d data-block misses, the block cache counted %d", got, want)
	}
	if got, want := blobHits, after.Blob.Cache.Hits-before.Blob.Cache.Hits; got != want {
		t.Errorf("trace has %d blob hits, the blob cache counted %d", got, want)
	}
	if got, want := blobMisses, after.Blob.Cache.Misses-before.Blob.Cache.Misses; got != want {
		t.Errorf("trace has %d blob misses, the blob cache counted %d", got, want)
	}
	if dataHits == 0 || dataMisses == 0 || blobHits+blobMisses == 0 {
		t.Errorf("want data hits, misses and blob lookups: %d %d %d", dataHits, dataMisses, blobHits+blobMisses)
	}
	if pinned[trace.BlockIndex] == 0 || pinned[trace.BlockFilter] == 0 {
		t.Errorf("no pinned index or filter records at table open: %v", pinned)
	}
	if byCaller[trace.CallerGet] == 0 || byCaller[trace.CallerIterator] == 0 {
		t.Errorf("records by caller: %v", byCaller)
	}
}

// TestTraceGetFields checks the data-block fields of a Get against the
// table: the key is found in its block, which holds the keys written.
func TestTraceGetFields(t *testing.T) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.BlockSizeBytes = 64 << 10 // one data block
	o.FilterBitsPerKey = -1     // so that a missing key reads the block
	d := mustOpen(t, "db", o)
	defer d.Close()
	for i := range 37 {
		if err := d.Put(fmt.Appendf(nil, "k%02d", i), []byte("value"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := d.StartTrace(trace.Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	d.Get([]byte("k07"))
	d.Get([]byte("k07x")) // between keys: the block is read, the key is not there
	// GetFunc is a Get too (the FSM reads with it).
	if err := d.GetFunc([]byte("k07"), func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	d.EndTrace()
	_, recs := readTrace(t, buf.Bytes())
	var data []trace.Record
	for _, r := range recs {
		if r.Type == trace.BlockData {
			data = append(data, r)
		}
	}
	if len(data) != 3 {
		t.Fatalf("%d data-block records, want 3: %+v", len(data), recs)
	}
	found, missing, viewed := data[0], data[1], data[2]
	if viewed.Caller != trace.CallerGet || viewed.GetID != 3 || !viewed.ReferencedKeyExists || string(viewed.ReferencedKey) != "k07" {
		t.Errorf("GetFunc's record: %+v", viewed)
	}
	if found.GetID != 1 || !found.ReferencedKeyExists || found.NumKeysInBlock != 37 ||
		found.ReferencedDataSize != uint64(len("k07")+8+len("value")) || string(found.ReferencedKey) != "k07" {
		t.Errorf("found key: %+v", found)
	}
	if missing.GetID != 2 || missing.ReferencedKeyExists || missing.ReferencedDataSize != 0 || missing.NumKeysInBlock != 37 {
		t.Errorf("missing key: %+v", missing)
	}
}
