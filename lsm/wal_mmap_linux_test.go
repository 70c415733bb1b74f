//go:build linux

package lsm

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestMmapWALRecords writes records across several mapped chunks and reads
// them back twice: through another descriptor while the writer is still
// open (what recovery sees after a kill: the file may be longer than what
// was written, with a zero tail), and after Close, which truncates the file
// to the bytes written.
func TestMmapWALRecords(t *testing.T) {
	wf, name := createMmapWAL(t, t.TempDir(), "000001.log")
	w := record.NewWriter(wf)
	rng := rand.New(rand.NewPCG(1, 2))
	var want [][]byte
	total := 0
	for total < 3*walChunkBytes+12345 {
		rec := make([]byte, rng.IntN(100_000))
		for i := range rec {
			rec[i] = byte(rng.Uint32())
		}
		if _, err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(4) == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, rec)
		total += len(rec)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	size := w.Size()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	// A mapped last chunk leaves the file a whole number of chunks long,
	// with a zero tail; one written with pwrite (these records average
	// 50 KB, see walMmapMaxWriteBytes) leaves it as long as what was
	// written.
	if fi.Size() < size || fi.Size() > size && fi.Size()%walChunkBytes != 0 {
		t.Fatalf("open mapped WAL: file size %d, want %d bytes written or a whole number of chunks above", fi.Size(), size)
	}
	checkWALRecords(t, "while open", name, want, size)
	if err := wf.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(name); err != nil || fi.Size() != size {
		t.Fatalf("closed mapped WAL: size %v (%v), want %d", fi.Size(), err, size)
	}
	checkWALRecords(t, "after close", name, want, size)
	if _, err := wf.Write([]byte("x")); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

// TestMmapWALDisabled checks that DisableWALMmap keeps write(2).
func TestMmapWALDisabled(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "000001.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if wf := newWALFile(f, &Options{DisableWALMmap: true}); wf != f {
		t.Fatalf("DisableWALMmap: got %T, want the file itself", wf)
	}
}

// TestMmapWALChunkEdges: a WAL closed before any write (its first chunk is
// being prepared in the background) ends empty; writes that end exactly on
// chunk boundaries, and one write spanning several chunks, land byte for
// byte (each chunk is prepared ahead, taken at the boundary, and the left
// one unmapped in the background), and finishWAL truncates the reserved
// tail before the final sync.
func TestMmapWALChunkEdges(t *testing.T) {
	dir := t.TempDir()
	w, name := createMmapWAL(t, dir, "000001.log")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(name); err != nil || fi.Size() != 0 {
		t.Fatalf("WAL closed unwritten: size %v (%v), want 0", fi.Size(), err)
	}

	w, name = createMmapWAL(t, dir, "000002.log")
	rng := rand.New(rand.NewPCG(3, 4))
	var want []byte
	write := func(n int) {
		t.Helper()
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if k, err := w.Write(p); err != nil || k != n {
			t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
		}
		want = append(want, p...)
	}
	write(walChunkBytes / 2)          // starts preparing chunk 1
	write(walChunkBytes / 2)          // ends exactly at the boundary
	write(1)                          // takes chunk 1
	write(walChunkBytes - 1)          // ends exactly at the next boundary
	write(2*walChunkBytes + 4096 + 7) // spans chunks 2, 3 and into 4
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) || bytes.ContainsFunc(got[len(want):], func(r rune) bool { return r != 0 }) {
		t.Fatalf("open WAL: %d bytes on disk do not start with the %d written followed by zeros", len(got), len(want))
	}
	// finishWAL, as a memtable switch does before the final fsync: the
	// reserved zeros past the written bytes are cut off first, so that
	// the fsync does not write them back.
	if err := finishWAL(w); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(name); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("finished WAL: size %v (%v), want %d", fi.Size(), err, len(want))
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Write after finishWAL succeeded")
	}
	if err := w.Sync(); err != nil {
		t.Fatalf("Sync after finishWAL: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err = os.ReadFile(name); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("closed WAL: %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}

// walMappings counts the mappings of file name in /proc/self/maps.
func walMappings(t *testing.T, name string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	return bytes.Count(maps, []byte(" "+name+"\n"))
}

// TestMmapWALModeByWriteSize: the WAL maps its chunks while the writes
// are small and writes them with pwrite(2) while they are large
// (walMmapMaxWriteBytes), chunk by chunk, in both directions; whatever the
// mode, every record reads back, while the WAL is open and after Close.
// Before, every chunk was mapped and faulted in whatever the writes' size:
// with 4 KiB records the background faulting cost more than the write(2)
// system calls it saved.
func TestMmapWALModeByWriteSize(t *testing.T) {
	w, name := createMmapWAL(t, t.TempDir(), "000001.log")
	rw := record.NewWriter(w)
	rng := rand.New(rand.NewPCG(5, 6))
	var want [][]byte
	// phase writes records of about size bytes, one Write each, until
	// chunks more chunks are full, then reports how many mappings of the
	// file are left once the chunks left behind are unmapped.
	phase := func(size, chunks int) int {
		t.Helper()
		end := rw.Size() + int64(chunks)*walChunkBytes
		for rw.Size() < end {
			rec := make([]byte, size/2+rng.IntN(size))
			for i := range rec {
				rec[i] = byte(rng.Uint32())
			}
			if _, err := rw.WriteRecord(rec); err != nil {
				t.Fatal(err)
			}
			if err := rw.Flush(); err != nil {
				t.Fatal(err)
			}
			want = append(want, rec)
		}
		w.retiring.Wait()
		return walMappings(t, name)
	}
	if n := phase(100, 3); n == 0 {
		t.Fatal("100-byte records: the WAL is not mapped")
	}
	if n := phase(4096, 3); n != 0 {
		t.Fatalf("4 KiB records: %d mappings of the WAL, want none (pwrite)", n)
	}
	if n := phase(100, 3); n == 0 {
		t.Fatal("100-byte records again: the WAL is not mapped")
	}
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	size := rw.Size()
	checkWALRecords(t, "while open", name, want, size)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := walMappings(t, name); n != 0 {
		t.Fatalf("closed WAL: %d mappings left", n)
	}
	checkWALRecords(t, "after close", name, want, size)
}

// checkWALRecords reads the WAL file name and checks that it holds exactly
// want, ending cleanly at offset size.
func checkWALRecords(t *testing.T, stage, name string, want [][]byte, size int64) {
	t.Helper()
	rf, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	r := record.NewReader(rf)
	for i, rec := range want {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("%s: record %d: %v", stage, i, err)
		}
		if !bytes.Equal(got, rec) {
			t.Fatalf("%s: record %d differs", stage, i)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("%s: after the last record: %v, want io.EOF", stage, err)
	}
	if r.TornTail() || r.EndOffset() != size {
		t.Fatalf("%s: torn tail %v, end offset %d, want a clean end at %d", stage, r.TornTail(), r.EndOffset(), size)
	}
}

// createMmapWAL creates the WAL file name in dir as Open would, and skips
// the test where the WAL would not be mapped (no fallocate).
func createMmapWAL(t *testing.T, dir, name string) (*mmapWAL, string) {
	t.Helper()
	name = filepath.Join(dir, name)
	f, err := vfs.Default.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := newWALFile(f, &Options{}).(*mmapWAL)
	if !ok {
		t.Skip("no fallocate on this file system: the WAL uses write(2)")
	}
	return w, name
}
