//go:build linux

package lsm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// walChunkBytes is how much of a mapped WAL is reserved (fallocate),
// mapped and faulted in at a time. A multiple of the page size and of
// record.BlockSize. Faulting a chunk in dirties all of it, so a WAL closed
// early (a small memtable's) may write up to one chunk of zeros that
// Close's truncation did not cancel in time: 1 MiB bounds that.
const walChunkBytes = 1 << 20

// mmapWAL is a WAL file on the operating system's file system that the
// record writer appends to through a shared memory mapping instead of
// write(2): appending a record is a copy into the page cache, with no
// system call. The guarantee of a NoSync write is unchanged: once Write
// returns, the bytes are in the kernel's page cache (the mapping is
// MAP_SHARED, so they belong to the file, not to the process) and survive a
// kill of the process; Sync (fsync) makes them durable as before.
//
// Space is reserved chunk by chunk (1 MiB) with fallocate before a chunk is mapped,
// so that a full disk is an error from Write, never a SIGBUS on a store
// into a hole. The file is therefore longer than what was written, with a
// zero-filled tail, which the record reader reads as a clean end (see
// package record); Close truncates it to the bytes written. Only the chunk
// being written is mapped: earlier chunks are unmapped when the writer
// moves past them, so the WAL adds at most one chunk to the process's
// resident memory.
type mmapWAL struct {
	*os.File
	// off is the number of bytes written; reserved the file size after
	// the last fallocate (a multiple of walChunkBytes).
	off, reserved int64
	// chunk is the mapping of [chunkOff, chunkOff+walChunkBytes), or nil.
	chunk    []byte
	chunkOff int64
	err      error
}

// newWALFile wraps a newly created WAL file for mmap appends when it is an
// operating-system file and the file system supports fallocate; otherwise
// it returns f as it is (writes use write(2)).
func newWALFile(f vfs.File, o *Options) vfs.File {
	if o.DisableWALMmap {
		return f
	}
	osf, ok := f.(*os.File)
	if !ok {
		return f
	}
	w := &mmapWAL{File: osf}
	if err := w.reserve(); err != nil {
		// No fallocate here (some file systems): fall back to write(2).
		// The file is still empty.
		return f
	}
	return w
}

// reserve extends the file by one chunk of allocated space.
func (w *mmapWAL) reserve() error {
	if err := unix.Fallocate(int(w.Fd()), 0, w.reserved, walChunkBytes); err != nil {
		return fmt.Errorf("lsm: reserving WAL space: %w", err)
	}
	w.reserved += walChunkBytes
	return nil
}

// Write copies p into the file through the mapping.
func (w *mmapWAL) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		if w.chunk == nil || w.off >= w.chunkOff+walChunkBytes {
			if err := w.nextChunk(); err != nil {
				w.err = err
				return n, err
			}
		}
		c := copy(w.chunk[w.off-w.chunkOff:], p)
		p = p[c:]
		w.off += int64(c)
		n += c
	}
	return n, nil
}

// nextChunk maps the chunk holding w.off, reserving it first if needed.
func (w *mmapWAL) nextChunk() error {
	if w.chunk != nil {
		if err := unix.Munmap(w.chunk); err != nil {
			return fmt.Errorf("lsm: unmapping WAL: %w", err)
		}
		w.chunk = nil
	}
	start := w.off / walChunkBytes * walChunkBytes
	for w.reserved < start+walChunkBytes {
		if err := w.reserve(); err != nil {
			return err
		}
	}
	m, err := unix.Mmap(int(w.Fd()), start, walChunkBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("lsm: mapping WAL: %w", err)
	}
	// Fault the whole chunk in, writable, with one call rather than one
	// page fault per page on the commit path (page faults are costly in
	// virtual machines). Best effort: kernels before 5.14 refuse it.
	_ = unix.Madvise(m, unix.MADV_POPULATE_WRITE)
	w.chunk, w.chunkOff = m, start
	return nil
}

// Sync makes the written bytes durable: fsync writes back the file's dirty
// pages whether a write(2) or a store through a mapping dirtied them.
func (w *mmapWAL) Sync() error {
	if w.err != nil {
		return w.err
	}
	return w.File.Sync()
}

// Close unmaps the file, truncates it to the bytes written and closes it.
// The truncation need not be durable: the longer file ends in zeros, a
// clean end to the reader.
func (w *mmapWAL) Close() error {
	var errs []error
	if w.chunk != nil {
		errs = append(errs, unix.Munmap(w.chunk))
		w.chunk = nil
	}
	if w.err == nil {
		errs = append(errs, w.File.Truncate(w.off))
	}
	errs = append(errs, w.File.Close())
	w.err = errors.New("lsm: WAL closed")
	return errors.Join(errs...)
}
