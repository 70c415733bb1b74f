package main

import (
	"slices"
	"sync"
	"time"

	"github.com/cairnkv/cairn/cluster/boltlog"
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
// another append). Below the batched trim (bolt-batched) it sees every
// batch as its own DeleteRange, so the wait it measures is the one the
// batching bounds.
//
// cluster/boltlog (boltdb) returns from a DeleteRange of a prefix at once
// and trims inside the appends' transactions, or in background
// transactions on an idle node: the meter observes the store
// (boltlog.Store.SetObserver) and counts as wait attributable to log
// compaction an append's wait for the store's write lock while a
// background trim held it, plus the time the append's own transaction
// spent deleting entries.
type meter struct {
	raft.LogStore

	write sync.Mutex // the store's writes, one at a time
	// inner is the boltlog observer's report of the StoreLogs in
	// progress. REQUIRES: write held.
	inner boltlog.Write

	mu struct {
		sync.Mutex
		deletes []window // hold intervals of DeleteRange calls and background trims
		appends []appendSample
		// commits of transactions that only trim (bbolt: two fsyncs
		// each): DeleteRange calls on raft-boltdb, background trims
		// and immediate deletes on boltlog.
		trimCommits int
		trimmed     int // entries boltlog deleted inside appends
		// boltlog's compactions: from raft's DeleteRange of a prefix
		// until the store's first index passed its end (raft's own
		// compactLogs timer sees only the DeleteRange call, which
		// returns at once).
		compactions []window
		open        window // the compaction in progress, if openHi != 0
		openHi      uint64
	}
	observed bool // a boltlog store: commits counted by the observer
}

// appendSample is one StoreLogs call.
type appendSample struct {
	start    time.Time
	waited   time.Duration // for the write mutex
	total    time.Duration // the whole call
	trimWait time.Duration // of waited, while a DeleteRange held the mutex
	// boltlog only: the wait inside the store for its write lock, and the
	// time its transaction spent deleting trimmed entries.
	innerStart, innerLocked time.Time
	trimTime                time.Duration
	txTime                  time.Duration // the store's transaction, lock held
	trimmed                 int
}

// observe makes m meter the boltlog store s (see meter).
func (m *meter) observe(s *boltlog.Store) {
	m.observed = true
	s.SetObserver(func(w boltlog.Write) {
		switch w.Kind {
		case boltlog.Append:
			m.inner = w // called inside m.StoreLogs, m.write held
		case boltlog.Trim, boltlog.Delete:
			m.mu.Lock()
			m.mu.trimCommits++
			if w.Kind == boltlog.Trim { // a Delete is inside m.DeleteRange's window
				m.mu.deletes = append(m.mu.deletes, window{w.Locked, w.End})
			}
			m.mu.Unlock()
			if w.Kind == boltlog.Trim {
				m.compactionProgress(0)
			}
		}
	})
}

// compactionProgress opens a boltlog compaction up to hi (if not 0) and
// closes the one in progress once the store's first index passed it.
func (m *meter) compactionProgress(hi uint64) {
	first, err := m.LogStore.FirstIndex()
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil && m.mu.openHi != 0 && first > m.mu.openHi {
		m.mu.open.end = now
		m.mu.compactions = append(m.mu.compactions, m.mu.open)
		m.mu.openHi = 0
	}
	if hi != 0 && err == nil && first <= hi {
		if m.mu.openHi == 0 {
			m.mu.open = window{start: now}
		}
		m.mu.openHi = max(m.mu.openHi, hi)
	}
}

// compactions returns boltlog's completed compactions.
func (m *meter) compactions() []window {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mu.compactions)
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
	m.inner = boltlog.Write{}
	err := m.LogStore.StoreLogs(logs)
	inner := m.inner
	m.write.Unlock()
	t2 := time.Now()
	a := appendSample{start: t0, waited: t1.Sub(t0), total: t2.Sub(t0)}
	if !inner.Start.IsZero() {
		a.innerStart, a.innerLocked = inner.Start, inner.Locked
		a.trimTime, a.trimmed = inner.TrimTime, inner.Trimmed
		a.txTime = inner.End.Sub(inner.Locked)
	}
	m.mu.Lock()
	m.mu.appends = append(m.mu.appends, a)
	m.mu.trimmed += a.trimmed
	open := m.mu.openHi != 0
	m.mu.Unlock()
	if open {
		m.compactionProgress(0)
	}
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
	if !m.observed {
		m.mu.trimCommits++
	}
	m.mu.Unlock()
	if m.observed && err == nil {
		m.compactionProgress(hi)
	}
	return err
}

// reset forgets what was measured.
func (m *meter) reset() {
	m.mu.Lock()
	m.mu.deletes, m.mu.appends = nil, nil
	m.mu.trimCommits, m.mu.trimmed = 0, 0
	m.mu.compactions = nil
	m.mu.Unlock()
}

// samples returns the appends with their wait attributable to log
// compaction, the DeleteRange (and background trim) holds, and the count
// of transactions that only trimmed.
func (m *meter) samples() ([]appendSample, []window, int) {
	m.mu.Lock()
	apps := slices.Clone(m.mu.appends)
	dels := slices.Clone(m.mu.deletes)
	commits := m.mu.trimCommits
	m.mu.Unlock()
	slices.SortFunc(dels, func(a, b window) int { return a.start.Compare(b.start) })
	for i := range apps {
		a := &apps[i]
		a.trimWait = overlap(window{a.start, a.start.Add(a.waited)}, dels)
		if !a.innerStart.IsZero() {
			a.trimWait += overlap(window{a.innerStart, a.innerLocked}, dels) + a.trimTime
		}
	}
	return apps, dels, commits
}

// overlap returns how long w overlaps the holds dels, sorted and disjoint
// (one lock): the time a hold kept what w waited for.
func overlap(w window, dels []window) time.Duration {
	var d time.Duration
	j, _ := slices.BinarySearchFunc(dels, w.start, func(d window, t time.Time) int {
		return d.end.Compare(t)
	})
	for ; j < len(dels) && dels[j].start.Before(w.end); j++ {
		lo, hi := maxTime(w.start, dels[j].start), minTime(w.end, dels[j].end)
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
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
