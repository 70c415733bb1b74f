package main

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// meter is a raft.LogStore wrapper that measures how long each append
// (StoreLogs) waits behind log compaction (DeleteRange).
//
// It serializes the store's writes (StoreLogs, DeleteRange) on its own
// mutex, as both stores already do inside (bbolt admits one write
// transaction at a time; raft-wal holds its write lock for both), so that
// who waits for whom is observable: an append's wait for the mutex, where
// the mutex was held by a DeleteRange, is wait attributable to log
// compaction; the rest of its time is its own write (or a wait behind
// another append). Below cluster's batched trim (cluster.OpenRaftLogStore's
// wrap) it sees every batch as its own DeleteRange, so the wait it
// measures is the one the batching bounds.
type meter struct {
	raft.LogStore

	write sync.Mutex // the store's writes, one at a time

	mu struct {
		sync.Mutex
		deletes []window // hold intervals of DeleteRange calls
		appends []appendSample
	}
}

// appendSample is one StoreLogs call.
type appendSample struct {
	start    time.Time
	waited   time.Duration // for the write mutex
	total    time.Duration // the whole call
	trimWait time.Duration // of waited, while a DeleteRange held the mutex
	resolved bool          // trimWait computed
}

// IsMonotonic implements raft.MonotonicLogStore for the wrapped store.
func (m *meter) IsMonotonic() bool {
	mm, ok := m.LogStore.(raft.MonotonicLogStore)
	return ok && mm.IsMonotonic()
}

func (m *meter) StoreLog(l *raft.Log) error { return m.StoreLogs([]*raft.Log{l}) }

func (m *meter) StoreLogs(logs []*raft.Log) error {
	t0 := time.Now()
	m.write.Lock()
	t1 := time.Now()
	err := m.LogStore.StoreLogs(logs)
	m.write.Unlock()
	t2 := time.Now()
	m.mu.Lock()
	m.mu.appends = append(m.mu.appends, appendSample{start: t0, waited: t1.Sub(t0), total: t2.Sub(t0)})
	m.mu.Unlock()
	return err
}

func (m *meter) DeleteRange(lo, hi uint64) error {
	m.write.Lock()
	t0 := time.Now()
	err := m.LogStore.DeleteRange(lo, hi)
	t1 := time.Now()
	m.write.Unlock()
	m.mu.Lock()
	m.mu.deletes = append(m.mu.deletes, window{t0, t1})
	m.mu.Unlock()
	return err
}

// reset forgets what was measured.
func (m *meter) reset() {
	m.mu.Lock()
	m.mu.deletes, m.mu.appends = nil, nil
	m.mu.Unlock()
}

// samples returns the appends with their wait behind DeleteRange holds,
// and the DeleteRange holds.
func (m *meter) samples() ([]appendSample, []window) {
	m.mu.Lock()
	apps := slices.Clone(m.mu.appends)
	dels := slices.Clone(m.mu.deletes)
	m.mu.Unlock()
	slices.SortFunc(dels, func(a, b window) int { return a.start.Compare(b.start) })
	for i := range apps {
		a := &apps[i]
		w := window{a.start, a.start.Add(a.waited)}
		// Holds are disjoint (one mutex): the overlap of the wait with
		// them is the time a DeleteRange held what the append waited for.
		j, _ := slices.BinarySearchFunc(dels, w.start, func(d window, t time.Time) int {
			return d.end.Compare(t)
		})
		for ; j < len(dels) && dels[j].start.Before(w.end); j++ {
			lo, hi := maxTime(w.start, dels[j].start), minTime(w.end, dels[j].end)
			if hi.After(lo) {
				a.trimWait += hi.Sub(lo)
			}
		}
	}
	return apps, dels
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
