package lsm

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/version"
)

// readState is the immutable picture a reader works from: the memtables and
// the current version. The DB holds it until it publishes the next one
// (retire); each reader takes a reference for as long as it reads, which
// keeps the version's files from being deleted. The last of the DB and the
// readers to let go releases the version and the memtables.
//
// The reader references are counted in stripes, each on a cache line of
// its own, a reader's stripe chosen at random: with one counter, every Get
// on two cores moved that line between them twice (ref and unref).
type readState struct {
	d *DB
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

	// retired is set when the DB lets go of the readState (it published
	// another, or closed); no reference can be taken after it.
	retired atomic.Bool
	// released is set by whoever releases the version and memtables, so
	// that it happens once.
	released atomic.Bool
	_        [64]byte // keep the fields above, read by every reader, off the stripes' lines
	refs     [readStateStripes]struct {
		n atomic.Int32
		_ [60]byte
	}
}

// readStateStripes is the number of counters reader references spread
// over.
const readStateStripes = 8

// readRef is a reader's reference to a readState: unref drops it.
type readRef struct {
	*readState
	stripe uint32
}

// tryRef takes a reference on stripe i unless the readState is retired.
//
// Why a retired readState is released exactly when its last reference
// goes: a tryRef that succeeds loaded retired as false, so its increment
// came before retire's store; every sum that can release (retire's, or an
// unref's after it loaded retired as true) reads the stripes after that
// store, so it counts the reference until its unref. A tryRef that fails
// undoes its increment with unref, which releases if its increment was
// what kept a concurrent sum above zero.
func (s *readState) tryRef(i uint32) bool {
	s.refs[i].n.Add(1)
	if s.retired.Load() {
		s.unrefStripe(i)
		return false
	}
	return true
}

func (s *readState) unrefStripe(i uint32) {
	s.refs[i].n.Add(-1)
	if s.retired.Load() {
		s.maybeRelease()
	}
}

// unref drops the reader's reference.
func (r readRef) unref() { r.readState.unrefStripe(r.stripe) }

// retire drops the DB's hold on s: it is released now if no reader holds
// it, otherwise by its last reader's unref.
func (s *readState) retire() {
	s.retired.Store(true)
	s.maybeRelease()
}

// maybeRelease releases the version and memtables if no reader holds a
// reference and no one released them yet. REQUIRES: s.retired.
func (s *readState) maybeRelease() {
	var n int32
	for i := range s.refs {
		n += s.refs[i].n.Load()
	}
	if n != 0 || !s.released.CompareAndSwap(false, true) {
		return
	}
	s.version.Unref() // wakes the cleaner if files became obsolete
	for _, m := range s.mems {
		m.unref()
	}
}

// loadReadState returns the current readState with a reference the caller
// must drop with unref (a nil readState if the DB is closed). It takes no
// lock.
func (d *DB) loadReadState() readRef {
	i := uint32(rand.Uint64() % readStateStripes)
	for {
		s := d.readState.Load()
		if s == nil {
			return readRef{}
		}
		if s.tryRef(i) {
			return readRef{s, i}
		}
	}
}

// updateReadStateLocked publishes a readState for the current memtables and
// version.
// REQUIRES: d.mu held.
func (d *DB) updateReadStateLocked() {
	s := &readState{d: d, version: d.mu.versions.Current(), minLatestSeq: d.mu.blobGC.minLatestSeq}
	s.version.Ref()
	s.mems = make([]*memTable, 0, len(d.mu.imm)+1)
	s.mems = append(s.mems, d.mu.mem)
	for i := len(d.mu.imm) - 1; i >= 0; i-- {
		s.mems = append(s.mems, d.mu.imm[i])
	}
	for _, m := range s.mems {
		m.ref() // d.mu holds the lists' reference
	}
	if old := d.readState.Swap(s); old != nil {
		old.retire()
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
