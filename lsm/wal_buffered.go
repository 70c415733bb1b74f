package lsm

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// WALBufferBytes bounds the WAL bytes that Options.WALBufferedWrites keeps
// in memory, not yet handed to the operating system: a write waits while
// this many are, so that at most WALBufferBytes plus one commit group's are
// lost if the process dies.
const WALBufferBytes = 1 << 20

// A bufferedWAL's flusher is woken when walFlushBytes are buffered, when a
// Sync waits, or walFlushDelay after a byte entered an empty buffer,
// rather than at every append: waking a goroutine per small write costs
// more CPU than the write (a futex wake-up, a context switch).
const (
	walFlushBytes = 64 << 10
	walFlushDelay = time.Millisecond
)

// errWALFinished is returned by a write to a bufferedWAL after finish.
var errWALFinished = errors.New("lsm: write to a finished WAL")

// bufferedWAL is a WAL file whose writes are buffered in memory and written
// to the file by a goroutine (the flusher), as Pebble's record.LogWriter
// does; see Options.WALBufferedWrites for what that gives up. The commit
// leader's record writer appends to it (Write: a copy into memory, no system
// call), and Sync asks the flusher to write and fsync everything appended
// so far and waits for it (a group sync: the flusher syncs what it has
// written, which covers every Sync asked for meanwhile).
//
// The flusher writes the buffers in the order they were appended, whole,
// so the file is always a prefix of the appended bytes. It is the only one
// to write or sync the file until finish, which waits for it to write out
// what is left and exit; after that Sync and Close reach the file directly.
//
// An error writing or syncing the file is sticky: Write and Sync return it
// from then on (the commit pipeline then makes it the DB's background
// error), as the file's state is unknown.
type bufferedWAL struct {
	// File is the WAL file (possibly a mapped WAL, wal_mmap_linux.go).
	vfs.File

	mu sync.Mutex
	// cond is broadcast when the flusher has work (see walFlushBytes)
	// and when it has written, synced or failed.
	cond sync.Cond
	// buf holds the bytes appended and not yet taken by the flusher;
	// spare is the buffer the flusher last wrote out, for reuse.
	buf, spare []byte
	// Invariant: synced <= written <= appended, and appended-written is
	// len(buf) plus what the flusher is writing.
	appended, written, synced int64
	// syncWanted is the largest offset a Sync waits to see synced.
	syncWanted int64
	// timer sets flushDue walFlushDelay after it is armed (timerArmed):
	// Invariant: while buf is not empty, timerArmed or flushDue is set, or
	// buf holds walFlushBytes, so every byte is written out within about
	// walFlushDelay.
	timer      *time.Timer
	timerArmed bool
	flushDue   bool
	err        error
	// stopping: finish asked the flusher to write out the buffer and
	// exit; no Write is accepted. done is closed when the flusher exits.
	stopping bool
	done     chan struct{}
}

// newBufferedWAL wraps f and starts its flusher.
func newBufferedWAL(f vfs.File) *bufferedWAL {
	w := &bufferedWAL{File: f, done: make(chan struct{})}
	w.cond.L = &w.mu
	w.timer = time.AfterFunc(time.Hour, w.flushTimer)
	w.timer.Stop()
	go w.flushLoop()
	return w
}

// Write appends p to the buffer. It waits while WALBufferBytes are not yet
// written to the file.
func (w *bufferedWAL) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.stopping && w.appended-w.written >= WALBufferBytes {
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.stopping {
		return 0, errWALFinished
	}
	w.buf = append(w.buf, p...)
	w.appended += int64(len(p))
	switch {
	case len(w.buf) >= walFlushBytes || w.flushDue:
		w.cond.Broadcast()
	case !w.timerArmed && !w.flushDue:
		w.timerArmed = true
		w.timer.Reset(walFlushDelay)
	}
	return len(p), nil
}

// flushTimer wakes the flusher for the bytes buffered walFlushDelay ago.
func (w *bufferedWAL) flushTimer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timerArmed = false
	w.flushDue = true
	w.cond.Broadcast()
}

// Sync returns once every byte appended before the call is written to the
// file and fsynced.
func (w *bufferedWAL) Sync() error {
	w.mu.Lock()
	if w.err != nil {
		defer w.mu.Unlock()
		return w.err
	}
	select {
	case <-w.done:
		// finish ran: everything is written, and the file is ours.
		w.mu.Unlock()
		return w.File.Sync()
	default:
	}
	defer w.mu.Unlock()
	target := w.appended
	if target > w.syncWanted {
		w.syncWanted = target
		w.cond.Broadcast()
	}
	for w.err == nil && w.synced < target {
		w.cond.Wait()
	}
	return w.err
}

// flushLoop is the flusher: it writes out the buffer, and syncs the file
// when a Sync waits, until finish stops it or a write fails.
func (w *bufferedWAL) flushLoop() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.err == nil && w.syncWanted <= w.synced && !w.stopping &&
			(len(w.buf) == 0 || (len(w.buf) < walFlushBytes && !w.flushDue)) {
			w.cond.Wait()
		}
		if w.err != nil || (len(w.buf) == 0 && w.syncWanted <= w.synced) {
			return // failed, or stopping with nothing left to do
		}
		data := w.buf
		w.buf, w.spare = w.spare[:0], nil
		w.flushDue = false
		doSync := w.syncWanted > w.synced
		w.mu.Unlock()
		var err error
		if len(data) > 0 {
			_, err = w.File.Write(data)
		}
		if err == nil && doSync {
			err = w.File.Sync()
		}
		w.mu.Lock()
		if err != nil {
			w.err = fmt.Errorf("lsm: background WAL write: %w", err)
			w.cond.Broadcast()
			return
		}
		w.written += int64(len(data))
		if doSync {
			// Everything written is synced, including every byte a
			// waiting Sync asked for (it was appended before it asked).
			w.synced = w.written
		}
		w.spare = data[:0]
		w.cond.Broadcast()
	}
}

// finish makes the flusher write out the buffer and exit, then finishes
// the file (finishFileWAL). Later Writes fail; Sync and Close work.
func (w *bufferedWAL) finish() error {
	w.mu.Lock()
	w.stopping = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
	w.timer.Stop()
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	return finishFileWAL(w.File)
}

// Close finishes the WAL (see finish) and closes the file.
func (w *bufferedWAL) Close() error {
	return errors.Join(w.finish(), w.File.Close())
}

// finishWAL ends a WAL that takes no more writes before its final sync:
// a buffered WAL writes out its buffer and stops its flusher, and a mapped
// WAL is unmapped and truncated (finishFileWAL).
func finishWAL(f vfs.File) error {
	if w, ok := f.(*bufferedWAL); ok {
		return w.finish()
	}
	return finishFileWAL(f)
}
