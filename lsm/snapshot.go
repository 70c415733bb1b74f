package lsm

import (
	"slices"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Snapshot is a consistent, read-only view of a DB at one point in time.
// Compactions keep every version of a key a live snapshot can see. Close it
// when done: an open snapshot holds back garbage collection of overwritten
// and deleted data.
type Snapshot struct {
	db     *DB
	seq    base.SeqNum
	closed atomic.Bool
}

// snapshotList is the set of open snapshots' sequence numbers.
// REQUIRES: d.mu held for every method.
type snapshotList struct {
	seqs []base.SeqNum // ascending, with repeats
}

func (l *snapshotList) add(s base.SeqNum) {
	i, _ := slices.BinarySearch(l.seqs, s)
	l.seqs = slices.Insert(l.seqs, i, s)
}

func (l *snapshotList) remove(s base.SeqNum) {
	if i, ok := slices.BinarySearch(l.seqs, s); ok {
		l.seqs = slices.Delete(l.seqs, i, i+1)
	}
}

// list returns a copy of the open snapshots, ascending.
func (l *snapshotList) list() []base.SeqNum { return slices.Clone(l.seqs) }

// NewSnapshot returns a snapshot of the DB's current state.
func (d *DB) NewSnapshot() (*Snapshot, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &Snapshot{db: d, seq: base.SeqNum(d.visibleSeq.Load())}
	d.mu.snapshots.add(s.seq)
	return s, nil
}

// Get reads key as of the snapshot.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.db.get(key, s.seq)
}

// NewIter returns an iterator over the snapshot; o.Snapshot is ignored.
func (s *Snapshot) NewIter(o *IterOptions) (*Iterator, error) {
	var opts IterOptions
	if o != nil {
		opts = *o
	}
	opts.Snapshot = s
	return s.db.NewIter(&opts)
}

// Close releases the snapshot.
func (s *Snapshot) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	d := s.db
	d.mu.Lock()
	d.mu.snapshots.remove(s.seq)
	d.maybeScheduleBlobGCLocked() // blob GC may retire files it held
	d.mu.Unlock()
	return nil
}
