package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// Log compaction must not stall appends (see doc.go, "Raft"). raft calls
// LogStore.DeleteRange(first, min(snapshotIndex, last-TrailingLogs)) after
// every snapshot, from its snapshot goroutine; a follower does the same
// after installing one. On a raft-boltdb-format log, cluster/boltlog
// deletes that range inside the appends' own transactions. raft-wal's
// DeleteRange of a prefix commits one small metadata transaction and
// removes whole segment files, which asyncDeleteFiler (below) moves out
// of the write lock.

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
// removes the segment files that fell out of the log. Each is a
// preallocated file (64 MiB then, Config.RaftWALSegmentSize now), and
// removing a dozen of them took a second on a busy disk (see
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
