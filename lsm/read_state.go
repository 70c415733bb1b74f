package lsm

import (
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/version"
)

// readState is the immutable picture a reader works from: the memtables and
// the current version. The DB holds one reference to the current readState;
// each reader takes another for as long as it reads, which keeps the
// version's files from being deleted.
type readState struct {
	d    *DB
	refs atomic.Int32
	// mems are newest first: mems[0] is the mutable memtable.
	mems    []*memTable
	version *version.Version
	// minLatestSeq is the oldest snapshot a read of the latest state may
	// use with this readState: blob GC retires a blob file only once no
	// snapshot older than its rewrite's sequence number exists, but a read
	// of the latest state loads its sequence number before the readState,
	// and may have loaded it before the rewrite. Such a read reloads it.
	minLatestSeq base.SeqNum

	tableTombsOnce sync.Once
	tableTombs     *rangedel.Set
	tableTombsErr  error
}

// tryRef takes a reference unless the count already reached zero (the
// readState is being retired).
func (s *readState) tryRef() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *readState) unref() {
	if s.refs.Add(-1) == 0 {
		s.version.Unref() // wakes the cleaner if files became obsolete
		for _, m := range s.mems {
			m.unref()
		}
	}
}

// loadReadState returns the current readState with a reference the caller
// must drop with unref. It takes no lock.
func (d *DB) loadReadState() *readState {
	for {
		s := d.readState.Load()
		if s == nil {
			return nil
		}
		if s.tryRef() {
			return s
		}
	}
}

// updateReadStateLocked publishes a readState for the current memtables and
// version.
// REQUIRES: d.mu held.
func (d *DB) updateReadStateLocked() {
	s := &readState{d: d, version: d.mu.versions.Current(), minLatestSeq: d.mu.blobGC.minLatestSeq}
	s.version.Ref()
	s.refs.Store(1)
	s.mems = make([]*memTable, 0, len(d.mu.imm)+1)
	s.mems = append(s.mems, d.mu.mem)
	for i := len(d.mu.imm) - 1; i >= 0; i-- {
		s.mems = append(s.mems, d.mu.imm[i])
	}
	for _, m := range s.mems {
		m.ref() // d.mu holds the lists' reference
	}
	if old := d.readState.Swap(s); old != nil {
		old.unref()
	}
}

// tableTombstones returns the range tombstones of every table in the
// version, fragmented, building them on first use.
func (s *readState) tableTombstones() (*rangedel.Set, error) {
	s.tableTombsOnce.Do(func() {
		var all []base.RangeTombstone
		for level := range s.version.Levels {
			for _, f := range s.version.Levels[level] {
				if f.NumRangeDeletions == 0 {
					continue
				}
				r, err := s.d.tables.get(f)
				if err != nil {
					s.tableTombsErr = err
					return
				}
				all = append(all, r.RangeTombstones()...)
			}
		}
		s.tableTombs = rangedel.NewSet(all)
	})
	return s.tableTombs, s.tableTombsErr
}

// tombstoneSets returns every fragmented tombstone set a reader of s must
// consult.
func (s *readState) tombstoneSets() ([]*rangedel.Set, error) {
	sets := make([]*rangedel.Set, 0, len(s.mems)+1)
	for _, m := range s.mems {
		if ts := m.tombstoneSet(); ts.Len() > 0 {
			sets = append(sets, ts)
		}
	}
	tt, err := s.tableTombstones()
	if err != nil {
		return nil, err
	}
	if tt.Len() > 0 {
		sets = append(sets, tt)
	}
	return sets, nil
}
