package cluster

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// Log trimming in bounded batches.
//
// After every snapshot raft deletes the compacted prefix of its log with
// one LogStore.DeleteRange(first, min(snapshotIndex, last-TrailingLogs)),
// called from its snapshot goroutine (raft.compactLogs; a follower does the
// same after installing a snapshot). raft-boltdb runs the whole range in
// one bbolt write transaction, and bbolt admits one writer at a time: every
// StoreLogs of the node (the leader's group commits, a follower's
// AppendEntries) waits until the trim commits. A trim of a large log took
// seconds (2.8 s at small scale, 44 s once on a contended disk), and all
// writes and linearizable reads stalled for as long.
//
// trimBatchingStore splits the range into transactions of a bounded
// duration, deleting from the low end up, so the log stays one contiguous
// range [first, last] after every step (a crash between steps leaves a
// shorter prefix deleted, which raft tolerates: it recomputes the range
// from FirstIndex on the next snapshot). Between two transactions bbolt's
// writer lock is free and a waiting StoreLogs takes it: a waiter that has
// been blocked for more than 1 ms puts Go's mutex into starvation mode,
// which hands the lock to it rather than to the trimmer's next Begin. So
// an append waits for at most one batch.
//
// The batch size adapts to the time a batch takes: it doubles while a batch
// takes less than half of trimBatchTarget and halves while it takes more,
// within [trimBatchMin, trimBatchMax] entries. Entries differ in size by
// orders of magnitude (a 16-byte put and a 16 MiB one), so a fixed count
// would either stall on large entries or crawl on small ones.
//
// raft-wal does not need this: its DeleteRange of a prefix commits one small
// metadata transaction and removes whole segment files, which
// asyncDeleteFiler (below) moves out of the write lock.

const (
	trimBatchTarget = 10 * time.Millisecond
	trimBatchMin    = 64
	trimBatchMax    = 16384
	trimBatchStart  = 512
)

// trimBatchingStore is a raft.LogStore whose DeleteRange deletes in
// bounded transactions; every other method is the wrapped store's.
type trimBatchingStore struct {
	raft.LogStore
	target   time.Duration // per-batch duration the batch size aims at
	min, max uint64        // bounds of the batch size, in entries

	mu struct {
		sync.Mutex
		batch uint64 // current batch size; Invariant: min <= batch <= max
	}
}

// newTrimBatchingStore wraps s (see trimBatchingStore).
func newTrimBatchingStore(s raft.LogStore) *trimBatchingStore {
	t := &trimBatchingStore{LogStore: s, target: trimBatchTarget, min: trimBatchMin, max: trimBatchMax}
	t.mu.batch = trimBatchStart
	return t
}

// IsMonotonic implements raft.MonotonicLogStore for the wrapped store.
func (t *trimBatchingStore) IsMonotonic() bool {
	m, ok := t.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// DeleteRange deletes the entries [lo, hi] in transactions of at most the
// current batch size, from lo upwards. Raft calls it only for a prefix of
// the log (compaction) or a suffix (a follower dropping a conflicting
// tail); both stay contiguous when cut in order from lo. On an error the
// entries before the failed batch are deleted and the rest are not.
func (t *trimBatchingStore) DeleteRange(lo, hi uint64) error {
	t.mu.Lock()
	batch := t.mu.batch
	t.mu.Unlock()
	for lo <= hi {
		end := hi
		if hi-lo >= batch {
			end = lo + batch - 1
		}
		start := time.Now()
		if err := t.LogStore.DeleteRange(lo, end); err != nil {
			return fmt.Errorf("cluster: deleting raft log [%d, %d]: %w", lo, end, err)
		}
		d := time.Since(start)
		switch {
		case d < t.target/2 && end-lo+1 == batch:
			batch = min(batch*2, t.max)
		case d > t.target:
			batch = max(batch/2, t.min)
		}
		if end == hi {
			break
		}
		lo = end + 1
		// Let a StoreLogs that was waiting for the lock run first.
		runtime.Gosched()
	}
	t.mu.Lock()
	t.mu.batch = batch
	t.mu.Unlock()
	return nil
}

// firstIndexStore is a raft.LogStore whose GetLog refuses entries below
// FirstIndex with raft.ErrLogNotFound.
//
// raft-wal v0.4.0 looks an index up in its open (tail) segment before it
// consults the segment tree, and a DeleteRange of a prefix only moves the
// first index in its metadata: an entry deleted by log compaction but
// still in the open segment is served. raft then replicates that entry to
// a follower behind the snapshot instead of sending the snapshot, and the
// log contradicts its own FirstIndex (raft-boltdb deletes the entries).
// FirstIndex is an atomic load of raft-wal's state, so the check is cheap.
type firstIndexStore struct {
	raft.LogStore
}

// IsMonotonic implements raft.MonotonicLogStore for the wrapped store.
func (s firstIndexStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// GetLog returns entry index, or raft.ErrLogNotFound below FirstIndex.
func (s firstIndexStore) GetLog(index uint64, l *raft.Log) error {
	first, err := s.LogStore.FirstIndex()
	if err != nil {
		return err
	}
	if index < first || first == 0 {
		return raft.ErrLogNotFound
	}
	return s.LogStore.GetLog(index, l)
}

// asyncDeleteFiler is raft-wal's segment filer with Delete moved off the
// caller's goroutine.
//
// raft-wal's DeleteRange of a log prefix commits the new first index to
// its metadata database and then, still holding the WAL's write lock,
// removes the segment files that fell out of the log. Each is a 64 MiB
// file, and removing a dozen of them took a second on a busy disk (see
// bench/RESULTS.md, 2026-12-01): every append waited that long. The
// removal needs no lock: the metadata commit already dropped the segments
// from the log, segment IDs are never reused, and a file left behind by a
// crash is removed by the next Open (raft-wal deletes every segment file
// its metadata does not name). So Delete hands the file to a goroutine.
type asyncDeleteFiler struct {
	types.SegmentFiler
	mu struct {
		sync.Mutex
		queue   [][2]uint64 // (baseIndex, ID) waiting for the goroutine
		closed  bool        // no goroutine: Delete runs inline
		running bool        // the goroutine is draining queue
	}
	idle sync.WaitGroup // one per running drain goroutine
}

func newAsyncDeleteFiler(dir string) *asyncDeleteFiler {
	return &asyncDeleteFiler{SegmentFiler: segment.NewFiler(dir, walfs.New())}
}

// Delete queues the removal of a segment file; it never fails (an error
// is for the next Open's cleanup to retry, as raft-wal itself treats it).
func (f *asyncDeleteFiler) Delete(baseIndex, id uint64) error {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return f.SegmentFiler.Delete(baseIndex, id)
	}
	f.mu.queue = append(f.mu.queue, [2]uint64{baseIndex, id})
	if !f.mu.running {
		f.mu.running = true
		f.idle.Add(1)
		go f.drain()
	}
	f.mu.Unlock()
	return nil
}

func (f *asyncDeleteFiler) drain() {
	defer f.idle.Done()
	for {
		f.mu.Lock()
		if len(f.mu.queue) == 0 {
			f.mu.running = false
			f.mu.Unlock()
			return
		}
		d := f.mu.queue[0]
		f.mu.queue = f.mu.queue[1:]
		f.mu.Unlock()
		// An error leaves the file to the next Open's cleanup.
		_ = f.SegmentFiler.Delete(d[0], d[1])
	}
}

// Close waits for queued removals; later Deletes run inline.
func (f *asyncDeleteFiler) Close() {
	f.mu.Lock()
	f.mu.closed = true
	f.mu.Unlock()
	f.idle.Wait()
}
