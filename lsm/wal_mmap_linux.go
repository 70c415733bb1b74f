//go:build linux

package lsm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// walChunkBytes is how much of a mapped WAL is reserved (fallocate),
// mapped and faulted in at a time. A multiple of the page size and of
// record.BlockSize. Faulting a chunk in dirties all of it, so a WAL closed
// early (a small memtable's) may write up to one chunk of zeros that
// Close's truncation did not cancel in time: 1 MiB bounds that.
const walChunkBytes = 1 << 20

// walMmapMaxWriteBytes: a chunk is mapped only while the writes into the
// WAL average fewer bytes than this; with larger writes it is written with
// pwrite(2). The system call is a fixed cost per write that a mapping saves,
// while a mapping costs per page: the background goroutine faults each page
// in (MADV_POPULATE_WRITE, one fault per 4 KiB page on a freshly reserved
// range, several microseconds each in a virtual machine) and unmaps it
// again, on a 2-core machine competing with the writer, and the writer
// waits for it at a chunk boundary when it writes faster than pages are
// faulted in. Measured on ext4 in a 2-core VM, 256 MiB of records through
// record.Writer, one Write each, per record: 100 bytes 0.5 µs mapped vs
// 2.4 µs by write(2); 1000 bytes 1.7 vs 2.4; 2000 bytes 6.3 vs 6.8; 4 KiB
// 16 vs 5.9 (the writer waits for the faulting at chunk boundaries).
const walMmapMaxWriteBytes = 2048

// mmapWAL is a WAL file on the operating system's file system that the
// record writer appends to through a shared memory mapping instead of
// write(2): appending a record is a copy into the page cache, with no
// system call. The guarantee of a NoSync write is unchanged: once Write
// returns, the bytes are in the kernel's page cache (the mapping is
// MAP_SHARED, so they belong to the file, not to the process) and survive a
// kill of the process; Sync (fsync) makes them durable as before.
//
// Mapping pays when records are small; with large ones (walMmapMaxWriteBytes)
// a chunk is written with pwrite(2) instead, decided chunk by chunk from the
// mean size of the writes into the chunk before it, so that a WAL follows its
// workload. Both reach the same page cache: a mapped chunk and a written one
// are the same file to the reader, to fsync and to a crash.
//
// Space is reserved chunk by chunk (1 MiB) with fallocate before a chunk is mapped,
// so that a full disk is an error from Write, never a SIGBUS on a store
// into a hole (a chunk written with pwrite is not reserved: pwrite reports
// a full disk itself). With a mapped chunk the file is therefore longer
// than what was written, with a zero-filled tail, which the record reader
// reads as a clean end (see package record); Close truncates it to the
// bytes written.
//
// The system calls around a chunk stay off the writer's path: the next
// chunk is reserved, mapped and faulted in by a goroutine started once the
// writer is half-way through the current one (or at creation, for the
// first), and a chunk the writer has left is unmapped, and its writeback
// started (sync_file_range), by another. At a chunk boundary the writer
// only takes the prepared mapping (waiting for it if it is not ready).
// Early writeback leaves little for the fsync that closes the WAL at a
// memtable switch, which runs on the writer's path; it writes nothing the
// fsync would not have. At most two chunks are mapped at a time (the
// current one and the next), plus chunks being unmapped.
type mmapWAL struct {
	*os.File
	// off is the number of bytes written.
	off int64
	// reserved is the end of the last chunk reserved with fallocate (a
	// multiple of walChunkBytes). Only mapped chunks are reserved: a
	// pwrite reports a full disk itself. It belongs to whoever prepares
	// a chunk: at most one preparation runs at a time, and ahead's channel
	// orders them.
	reserved int64
	// inChunk: [chunkOff, chunkOff+walChunkBytes) is the current chunk,
	// written through chunk if that is not nil, else with pwrite.
	inChunk bool
	// chunk is the mapping of the current chunk, or nil.
	chunk    []byte
	chunkOff int64
	// chunkWrites counts the Writes that started in the current chunk.
	chunkWrites int64
	// ahead, if not nil, receives the mapping of the chunk at aheadOff,
	// being prepared in the background.
	ahead    chan preparedChunk
	aheadOff int64
	// retiring counts the chunks being unmapped in the background.
	retiring sync.WaitGroup
	// retireErr is the first error unmapping a chunk.
	retireErr atomic.Pointer[error]
	// finished: finish ran; Write fails, Sync and Close work.
	finished bool
	err      error
}

// preparedChunk is a background preparation's result.
type preparedChunk struct {
	m   []byte // nil: the chunk is written with pwrite
	err error
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
	if err := w.reserve(0); err != nil {
		// No fallocate here (some file systems): fall back to write(2).
		// The file is still empty.
		return f
	}
	w.prepareAhead(0, true)
	return w
}

// reserve allocates the chunk at start (extending the file to its end),
// unless it is already.
func (w *mmapWAL) reserve(start int64) error {
	if w.reserved >= start+walChunkBytes {
		return nil
	}
	if err := unix.Fallocate(int(w.Fd()), 0, start, walChunkBytes); err != nil {
		return fmt.Errorf("lsm: reserving WAL space: %w", err)
	}
	w.reserved = start + walChunkBytes
	return nil
}

// Write copies p into the file: through the current chunk's mapping, or
// with pwrite(2) if the chunk is not mapped (see walMmapMaxWriteBytes).
func (w *mmapWAL) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.finished {
		return 0, errors.New("lsm: write to a finished WAL")
	}
	n := 0
	for len(p) > 0 {
		if !w.inChunk || w.off >= w.chunkOff+walChunkBytes {
			if err := w.nextChunk(); err != nil {
				w.err = err
				return n, err
			}
			w.chunkWrites++ // a Write counts in every chunk it touches
		} else if n == 0 {
			w.chunkWrites++
		}
		var c int
		if w.chunk != nil {
			c = copy(w.chunk[w.off-w.chunkOff:], p)
		} else {
			q := p[:min(int64(len(p)), w.chunkOff+walChunkBytes-w.off)]
			var err error
			if c, err = pwriteFull(int(w.Fd()), q, w.off); err != nil {
				w.off += int64(c)
				w.err = fmt.Errorf("lsm: writing WAL: %w", err)
				return n + c, w.err
			}
		}
		p = p[c:]
		w.off += int64(c)
		n += c
	}
	if w.ahead == nil && w.off-w.chunkOff >= walChunkBytes/2 {
		w.prepareAhead(w.chunkOff+walChunkBytes, w.mapNext())
	}
	return n, nil
}

// mapNext reports whether the next chunk should be mapped: whether the
// writes into the current one averaged fewer than walMmapMaxWriteBytes.
func (w *mmapWAL) mapNext() bool {
	return w.chunkWrites == 0 || (w.off-w.chunkOff)/w.chunkWrites < walMmapMaxWriteBytes
}

// walPwrite is pwrite(2), a variable only so that tests can make it fail
// or write short: the WAL writes through its descriptor, beneath the FS
// seam (Options.FS) where the error-injecting FS works, and this is the
// one call on that path that can fail part-way through a record.
var walPwrite = unix.Pwrite

// pwriteFull writes all of p at off, retrying short writes.
func pwriteFull(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		c, err := walPwrite(fd, p[n:], off+int64(n))
		if c > 0 {
			n += c
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if c == 0 {
			return n, io.ErrShortWrite
		}
	}
	return n, nil
}

// prepareAhead starts preparing the chunk at start in the background, to
// be mapped, or, if not mapped, to be written with pwrite, which needs no
// preparation (no goroutine, no system call).
// REQUIRES: w.ahead == nil.
func (w *mmapWAL) prepareAhead(start int64, mapped bool) {
	ch := make(chan preparedChunk, 1)
	w.ahead, w.aheadOff = ch, start
	if !mapped {
		ch <- preparedChunk{}
		return
	}
	go func() {
		m, err := w.prepare(start)
		ch <- preparedChunk{m: m, err: err}
	}()
}

// takeAhead waits for the chunk being prepared and returns it.
// REQUIRES: w.ahead != nil.
func (w *mmapWAL) takeAhead() preparedChunk {
	r := <-w.ahead
	w.ahead = nil
	return r
}

// prepare reserves the chunk at start if needed, maps it and faults it in.
func (w *mmapWAL) prepare(start int64) ([]byte, error) {
	if err := w.reserve(start); err != nil {
		return nil, err
	}
	m, err := unix.Mmap(int(w.Fd()), start, walChunkBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("lsm: mapping WAL: %w", err)
	}
	// Fault the whole chunk in, writable, with one call rather than one
	// page fault per page on the commit path (page faults are costly in
	// virtual machines). Best effort: kernels before 5.14 refuse it.
	_ = unix.Madvise(m, unix.MADV_POPULATE_WRITE)
	return m, nil
}

// nextChunk makes the chunk holding w.off the mapped one: the chunk
// prepared ahead, or one prepared now if none is (or another is).
func (w *mmapWAL) nextChunk() error {
	if errp := w.retireErr.Load(); errp != nil {
		return *errp
	}
	mapped := true
	if w.inChunk {
		mapped = w.mapNext()
		w.retire(w.chunk, w.chunkOff)
		w.chunk, w.inChunk = nil, false
	}
	start := w.off / walChunkBytes * walChunkBytes
	if w.ahead != nil && w.aheadOff != start {
		if r := w.takeAhead(); r.err == nil {
			w.retire(r.m, -1)
		}
	}
	if w.ahead == nil {
		w.prepareAhead(start, mapped)
	}
	r := w.takeAhead()
	if r.err != nil {
		return r.err
	}
	w.chunk, w.chunkOff, w.inChunk, w.chunkWrites = r.m, start, true, 0
	return nil
}

// retire unmaps chunk m (if mapped) in the background and, if it was
// written (off >= 0), starts writing back its pages.
func (w *mmapWAL) retire(m []byte, off int64) {
	if m == nil && off < 0 {
		return
	}
	w.retiring.Add(1)
	go func() {
		defer w.retiring.Done()
		if m == nil {
			// Written with pwrite: nothing to unmap.
		} else if err := unix.Munmap(m); err != nil {
			err = fmt.Errorf("lsm: unmapping WAL: %w", err)
			w.retireErr.CompareAndSwap(nil, &err)
			return
		}
		if off >= 0 {
			// Best effort: only starts writeback; fsync still decides
			// durability.
			_ = unix.SyncFileRange(int(w.Fd()), off, walChunkBytes, unix.SYNC_FILE_RANGE_WRITE)
		}
	}()
}

// Sync makes the written bytes durable: fsync writes back the file's dirty
// pages whether a write(2) or a store through a mapping dirtied them.
func (w *mmapWAL) Sync() error {
	if w.err != nil {
		return w.err
	}
	return w.File.Sync()
}

// finishFileWAL ends a WAL file that takes no more writes before its final
// sync: a mapped WAL unmaps its chunks and is truncated to the bytes
// written, so that the fsync writes back no zero-filled space reserved past
// them (up to two chunks: the current one's rest and the one prepared
// ahead). See finishWAL.
func finishFileWAL(f vfs.File) error {
	if w, ok := f.(*mmapWAL); ok {
		return w.finish()
	}
	return nil
}

// finish unmaps the chunks, waits for those being unmapped and truncates
// the file to the bytes written. Later Writes fail; Sync and Close work.
func (w *mmapWAL) finish() error {
	if w.finished {
		return nil
	}
	var errs []error
	if w.chunk != nil {
		errs = append(errs, unix.Munmap(w.chunk))
		w.chunk = nil
	}
	w.inChunk = false
	if w.ahead != nil {
		if r := w.takeAhead(); r.err == nil && r.m != nil {
			errs = append(errs, unix.Munmap(r.m))
		}
	}
	w.retiring.Wait()
	if errp := w.retireErr.Load(); errp != nil {
		errs = append(errs, *errp)
	}
	if w.err == nil {
		errs = append(errs, w.File.Truncate(w.off))
	}
	w.finished = true
	if err := errors.Join(errs...); err != nil {
		if w.err == nil {
			w.err = err
		}
		return err
	}
	return nil
}

// Close unmaps the file, truncates it to the bytes written (see finish)
// and closes it. The truncation need not be durable: the longer file ends
// in zeros, a clean end to the reader.
func (w *mmapWAL) Close() error {
	ferr := w.finish()
	err := errors.Join(ferr, w.File.Close())
	w.err = errors.New("lsm: WAL closed")
	return err
}
