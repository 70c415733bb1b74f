package main

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The store "bolt-batched" is raft-boltdb under the batched log trim that
// cluster used before cluster/boltlog (until 2026-12-02), kept here as the
// bench's reference for "before", as bolt-unbatched is for the trim in one
// transaction. Its text is cluster/logstore.go's as it was then.

// Log trimming in bounded batches (cluster/logstore.go before boltlog).
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
// Its bound is one batch, and a batch is one bbolt commit (two fsyncs):
// an append waited up to 742 ms for one on this machine (bench/RESULTS.md,
// 2026-12-01), which cluster/boltlog removes by trimming inside the
// appends' own transactions.

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
