package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The spec's constants (RocksDB's block_cache_tracer_test.cc).
const (
	kBlockSize          = 1024
	kBlockKeyPrefix     = "test-block-"
	kCFID               = 0
	kLevel              = 1
	kSSTFDNumber        = 100
	kRefKeyPrefix       = "test-get-"
	kNumKeysInBlock     = 1024
	kReferencedDataSize = 10
)

func getCaller(keyID uint32) Caller {
	switch keyID % 5 {
	case 0:
		return CallerFlush // RocksDB's kPrefetch
	case 1:
		return CallerCompaction
	case 2:
		return CallerGet
	case 3:
		return CallerMultiGet
	default:
		return CallerIterator
	}
}

// makeRecord fills every field, Get-only ones included, as the spec does:
// the writer must drop those that do not apply.
func makeRecord(keyID uint32, typ BlockType) Record {
	return Record{
		Type:                typ,
		BlockSize:           kBlockSize + uint64(keyID),
		BlockKey:            []byte(fmt.Sprintf("%s%d", kBlockKeyPrefix, keyID)),
		AccessTimestamp:     nowMicros(),
		CFID:                kCFID,
		CFName:              DefaultCFName,
		Caller:              getCaller(keyID),
		Level:               kLevel,
		FileNumber:          kSSTFDNumber + uint64(keyID),
		GetID:               uint64(keyID) + 1,
		FromUserSnapshot:    true,
		ReferencedKey:       []byte(fmt.Sprintf("%s%d", kRefKeyPrefix, keyID)),
		ReferencedKeyExists: true,
		NumKeysInBlock:      kNumKeysInBlock,
		ReferencedDataSize:  kReferencedDataSize + uint64(keyID),
	}
}

func writeBlockAccess(t *testing.T, w *Writer, from uint32, typ BlockType, n uint32) {
	t.Helper()
	for i := range n {
		r := makeRecord(from+i, typ)
		if err := w.WriteRecord(&r); err != nil {
			t.Fatal(err)
		}
	}
}

func verifyAccess(t *testing.T, rr RecordReader, from uint32, typ BlockType, n uint32) {
	t.Helper()
	for i := range n {
		keyID := from + i
		r, err := rr.Next()
		if err != nil {
			t.Fatalf("record %d: %v", keyID, err)
		}
		want := makeRecord(keyID, typ)
		if r.Type != typ || r.BlockSize != want.BlockSize || !bytes.Equal(r.BlockKey, want.BlockKey) ||
			r.CFID != kCFID || r.CFName != DefaultCFName || r.Caller != want.Caller || r.Level != kLevel ||
			r.FileNumber != want.FileNumber || r.CacheHit || r.NoInsert || r.Pinned {
			t.Fatalf("record %d: got %+v, want %+v", keyID, r, want)
		}
		if r.Caller.IsGet() {
			if r.GetID != uint64(keyID)+1 || !r.FromUserSnapshot || !bytes.Equal(r.ReferencedKey, want.ReferencedKey) {
				t.Fatalf("record %d: Get fields %+v", keyID, r)
			}
		} else if r.GetID != ReservedGetID || r.FromUserSnapshot || len(r.ReferencedKey) != 0 {
			t.Fatalf("record %d: Get fields written for caller %s: %+v", keyID, r.Caller, r)
		}
		if typ == BlockData && r.Caller.IsGet() {
			if !r.ReferencedKeyExists || r.NumKeysInBlock != kNumKeysInBlock || r.ReferencedDataSize != want.ReferencedDataSize {
				t.Fatalf("record %d: data-block Get fields %+v", keyID, r)
			}
			continue
		}
		if r.ReferencedKeyExists || r.NumKeysInBlock != 0 || r.ReferencedDataSize != 0 {
			t.Fatalf("record %d: data-block Get fields written for %s/%s: %+v", keyID, typ, r.Caller, r)
		}
	}
}

func tracePath(t *testing.T) string { return filepath.Join(t.TempDir(), "block_cache_trace") }

func createFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func openTrace(t *testing.T, path string) RecordReader {
	t.Helper()
	rr, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rr.(*File).Close() })
	return rr
}

func checkVersion(t *testing.T, h Header) {
	t.Helper()
	if h.MajorVersion != MajorVersion || h.MinorVersion != MinorVersion || h.StartTimestamp == 0 {
		t.Fatalf("header %+v", h)
	}
}

func expectEnd(t *testing.T, rr RecordReader) {
	t.Helper()
	if r, err := rr.Next(); err != io.EOF {
		t.Fatalf("after the last record: %+v, %v; want io.EOF", r, err)
	}
}

func TestAtomicWriteBeforeStartTrace(t *testing.T) {
	path := tracePath(t)
	f := createFile(t, path)
	var tr Tracer
	r := makeRecord(0, BlockData)
	if err := tr.WriteBlockAccess(&r); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenFile(path); !IsCorrupt(err) {
		t.Fatalf("reading a trace never started: %v, want a corruption error (no header)", err)
	}
}

func TestAtomicWrite(t *testing.T) {
	path := tracePath(t)
	f := createFile(t, path)
	var tr Tracer
	if err := tr.StartTrace(Options{}, f); err != nil {
		t.Fatal(err)
	}
	r := makeRecord(0, BlockData)
	if err := tr.WriteBlockAccess(&r); err != nil {
		t.Fatal(err)
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	rr := openTrace(t, path)
	checkVersion(t, rr.Header())
	verifyAccess(t, rr, 0, BlockData, 1)
	expectEnd(t, rr)
}

func TestConsecutiveStartTrace(t *testing.T) {
	path := tracePath(t)
	f := createFile(t, path)
	var tr Tracer
	if err := tr.StartTrace(Options{}, f); err != nil {
		t.Fatal(err)
	}
	if err := tr.StartTrace(Options{}, f); !errors.Is(err, ErrTraceRunning) {
		t.Fatalf("second StartTrace: %v, want ErrTraceRunning", err)
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	if err := tr.EndTrace(); !errors.Is(err, ErrNotTracing) {
		t.Fatalf("second EndTrace: %v, want ErrNotTracing", err)
	}
	// The refused start wrote nothing: the file holds one header.
	rr := openTrace(t, path)
	checkVersion(t, rr.Header())
	expectEnd(t, rr)
}

func TestAtomicNoWriteAfterEndTrace(t *testing.T) {
	path := tracePath(t)
	f := createFile(t, path)
	var tr Tracer
	if err := tr.StartTrace(Options{}, f); err != nil {
		t.Fatal(err)
	}
	r := makeRecord(0, BlockData)
	if err := tr.WriteBlockAccess(&r); err != nil {
		t.Fatal(err)
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteBlockAccess(&r); err != nil {
		t.Fatal(err)
	}
	rr := openTrace(t, path)
	checkVersion(t, rr.Header())
	verifyAccess(t, rr, 0, BlockData, 1)
	expectEnd(t, rr)
}

func TestNextGetID(t *testing.T) {
	var tr Tracer
	for range 2 {
		if id := tr.NextGetID(); id != 0 {
			t.Fatalf("NextGetID before StartTrace = %d, want 0", id)
		}
	}
	if err := tr.StartTrace(Options{}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 2; want++ {
		if id := tr.NextGetID(); id != want {
			t.Fatalf("NextGetID = %d, want %d", id, want)
		}
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	if id := tr.NextGetID(); id != 0 {
		t.Fatalf("NextGetID after EndTrace = %d, want 0", id)
	}
	if err := tr.StartTrace(Options{}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if id := tr.NextGetID(); id != 1 {
		t.Fatalf("NextGetID after a new StartTrace = %d, want 1", id)
	}
	if a := tr.NewAccess(CallerGet, 0, false); a.GetID != 2 {
		t.Fatalf("NewAccess get id = %d, want 2", a.GetID)
	}
	if a := tr.NewAccess(CallerIterator, 0, true); a.GetID != ReservedGetID || a.FromUserSnapshot {
		t.Fatalf("NewAccess for an iterator: %+v", a)
	}
	tr.EndTrace()
	if a := tr.NewAccess(CallerGet, 0, false); a != nil {
		t.Fatalf("NewAccess while idle = %+v, want nil", a)
	}
}

func TestMixedBlocks(t *testing.T) {
	path := tracePath(t)
	f := createFile(t, path)
	w := NewWriter(f)
	if err := w.WriteHeader(Header{StartTimestamp: nowMicros(), MajorVersion: MajorVersion, MinorVersion: MinorVersion}); err != nil {
		t.Fatal(err)
	}
	types := []BlockType{BlockUncompressionDict, BlockData, BlockFilter, BlockIndex, BlockRangeDel, BlockBlob}
	for i, typ := range types {
		writeBlockAccess(t, w, uint32(10*i), typ, 10)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rr := openTrace(t, path)
	checkVersion(t, rr.Header())
	for i, typ := range types {
		verifyAccess(t, rr, uint32(10*i), typ, 10)
	}
	expectEnd(t, rr)
}

func TestHumanReadableTrace(t *testing.T) {
	r := makeRecord(0, BlockData)
	r.GetID = 1
	r.Caller = CallerGet
	r.FromUserSnapshot = true
	r.ReferencedDataSize = kReferencedDataSize
	r.ReferencedKey = []byte("get_key,with \"quotes\"\n")
	r.BlockKey = AppendBlockKey(nil, 111, 2, 333)
	path := tracePath(t)
	f := createFile(t, path)
	w := NewHumanWriter(f)
	if err := w.WriteHeader(Header{StartTimestamp: 7, MajorVersion: MajorVersion, MinorVersion: MinorVersion}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(&r); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rr := openTrace(t, path)
	if !rr.(*File).HumanReadable {
		t.Fatal("OpenFile did not detect the human-readable format")
	}
	if h := rr.Header(); h.StartTimestamp != 7 || h.MajorVersion != MajorVersion || h.MinorVersion != MinorVersion {
		t.Fatalf("header %+v", h)
	}
	got, err := rr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != BlockData || got.BlockSize != kBlockSize || got.CFID != kCFID || got.CFName != DefaultCFName ||
		got.Caller != CallerGet || got.Level != kLevel || got.FileNumber != kSSTFDNumber || got.CacheHit || got.NoInsert ||
		got.GetID != 1 || !got.FromUserSnapshot || !got.ReferencedKeyExists || got.NumKeysInBlock != kNumKeysInBlock ||
		got.ReferencedDataSize != kReferencedDataSize || !bytes.Equal(got.BlockKey, r.BlockKey) ||
		!bytes.Equal(got.ReferencedKey, r.ReferencedKey) || got.AccessTimestamp != r.AccessTimestamp {
		t.Fatalf("got %+v\nwant %+v", got, r)
	}
	id, file, off, err := BlockKeyParts(got.BlockKey)
	if err != nil || id != 111 || file != 2 || off != 333 {
		t.Fatalf("BlockKeyParts = %d, %d, %d, %v; want 111, 2, 333", id, file, off, err)
	}
	expectEnd(t, rr)
}

// TestBinaryHumanAgree converts a mixed trace to the human-readable
// format and back and checks both read the same records.
func TestBinaryHumanAgree(t *testing.T) {
	var bin, human bytes.Buffer
	w, hw := NewWriter(&bin), NewHumanWriter(&human)
	h := Header{StartTimestamp: 42, MajorVersion: 3, MinorVersion: 4}
	w.WriteHeader(h)
	hw.WriteHeader(h)
	for i := range uint32(60) {
		r := makeRecord(i, BlockType(1+i%6))
		r.CacheHit, r.NoInsert, r.Pinned = i%2 == 0, i%3 == 0, i%7 == 0
		r.Level = int32(i%8) - 1
		w.WriteRecord(&r)
		hw.WriteRecord(&r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := hw.Flush(); err != nil {
		t.Fatal(err)
	}
	br, err := NewReader(&bin)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := NewHumanReader(&human)
	if err != nil {
		t.Fatal(err)
	}
	if br.Header() != h || hr.Header() != h {
		t.Fatalf("headers %+v %+v, want %+v", br.Header(), hr.Header(), h)
	}
	for i := 0; ; i++ {
		a, aerr := br.Next()
		b, berr := hr.Next()
		if aerr != berr {
			t.Fatalf("record %d: errors %v and %v", i, aerr, berr)
		}
		if aerr == io.EOF {
			if i != 60 {
				t.Fatalf("%d records, want 60", i)
			}
			return
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("record %d:\nbinary %+v\nhuman  %+v", i, a, b)
		}
	}
}

func TestSamplingByBlock(t *testing.T) {
	var buf bytes.Buffer
	var tr Tracer
	if err := tr.StartTrace(Options{SamplingFrequency: 4}, &buf); err != nil {
		t.Fatal(err)
	}
	const blocks, accesses = 400, 3
	for a := range accesses {
		for b := range blocks {
			r := Record{Type: BlockData, Caller: CallerIterator, BlockKey: AppendBlockKey(nil, 1, uint64(b), uint64(a*0))}
			tr.WriteBlockAccess(&r)
		}
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	rr, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for {
		r, err := rr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		count[string(r.BlockKey)]++
	}
	for k, n := range count {
		if n != accesses {
			t.Fatalf("block %x traced %d of %d times: sampling must be all or nothing per block", k, n, accesses)
		}
	}
	// 1 in 4 of 400 blocks: 100 expected; allow a wide margin.
	if len(count) < 50 || len(count) > 150 {
		t.Fatalf("%d of %d blocks sampled at 1 in 4", len(count), blocks)
	}
}

func TestMaxTraceFileSize(t *testing.T) {
	var buf bytes.Buffer
	var tr Tracer
	const limit = 4096
	if err := tr.StartTrace(Options{MaxTraceFileSizeBytes: limit}, &buf); err != nil {
		t.Fatal(err)
	}
	stopped := tr.Stopped()
	written := 0
	for i := range uint32(1000) {
		r := makeRecord(i, BlockData)
		if err := tr.WriteBlockAccess(&r); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
		default:
			written++
		}
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the trace did not stop at its size limit")
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > limit || buf.Len() < limit-200 {
		t.Fatalf("trace of %d bytes with a limit of %d", buf.Len(), limit)
	}
	rr, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := rr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("a trace stopped by its size limit must end cleanly: %v", err)
		}
		n++
	}
	if n != written {
		t.Fatalf("%d records read, %d written before the stop", n, written)
	}
}

// TestConcurrentStartEnd races writers against start and end: every trace
// must read back whole (no record torn by EndTrace), and StartTrace never
// succeeds twice at once.
func TestConcurrentStartEnd(t *testing.T) {
	var tr Tracer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint32(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := makeRecord(i+uint32(g)<<20, BlockData)
				r.GetID = tr.NextGetID()
				tr.WriteBlockAccess(&r)
			}
		}()
	}
	for range 50 {
		var buf bytes.Buffer
		if err := tr.StartTrace(Options{}, &buf); err != nil {
			t.Fatal(err)
		}
		if err := tr.StartTrace(Options{}, io.Discard); !errors.Is(err, ErrTraceRunning) {
			t.Fatalf("second start: %v", err)
		}
		if err := tr.EndTrace(); err != nil {
			t.Fatal(err)
		}
		n := buf.Len()
		rr, err := NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := rr.Next(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if buf.Len() != n {
			t.Fatal("a record was written after EndTrace returned")
		}
	}
	close(stop)
	wg.Wait()
}

// TestTracerRecordSizes writes through the Tracer (which encodes a record
// on its stack, in recordStackLen bytes, before copying it into the trace
// under its lock) records whose keys fit that room and records that
// outgrow it: each reads back whole and checksummed.
func TestTracerRecordSizes(t *testing.T) {
	var buf bytes.Buffer
	var tr Tracer
	if err := tr.StartTrace(Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 1, 100, recordStackLen - 60, recordStackLen, recordStackLen + 1, 5000, 70_000}
	for i, n := range sizes {
		r := makeRecord(uint32(5*i+2), BlockData) // A Get: the key is written.
		r.ReferencedKey = bytes.Repeat([]byte{byte('a' + i)}, n)
		if err := tr.WriteBlockAccess(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.EndTrace(); err != nil {
		t.Fatal(err)
	}
	rr, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		r, err := rr.Next()
		if err != nil {
			t.Fatalf("record with a %d-byte key: %v", n, err)
		}
		if want := bytes.Repeat([]byte{byte('a' + i)}, n); !bytes.Equal(r.ReferencedKey, want) || r.GetID != uint64(5*i+2)+1 {
			t.Fatalf("record with a %d-byte key read back as %d bytes, get id %d", n, len(r.ReferencedKey), r.GetID)
		}
	}
	expectEnd(t, rr)
}
