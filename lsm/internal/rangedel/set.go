package rangedel

import (
	"bytes"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Set is an immutable, fragmented set of range tombstones for reads: the
// tombstones of one memtable or one table. Lookups are binary searches and
// never allocate. A Set is safe for concurrent use. A nil *Set is an empty
// set.
type Set struct {
	// frags are sorted and non-overlapping (checkFragments holds).
	frags []Fragment
}

// NewSet fragments ts into a Set. The Set aliases the tombstones' keys,
// which must not be modified afterwards.
func NewSet(ts []base.RangeTombstone) *Set {
	return &Set{frags: FragmentTombstones(ts)}
}

// NewSetFromFragments returns a Set over frags, which must already be
// sorted, non-overlapping and well formed (as stored in a table's range
// deletion block). Since such fragments come from disk, a violation is
// reported as a corruption error rather than a panic. The Set aliases frags.
func NewSetFromFragments(frags []Fragment) (*Set, error) {
	if err := checkFragments(frags); err != nil {
		return nil, base.CorruptionErrorf("rangedel: %w", err)
	}
	return &Set{frags: frags}, nil
}

// All returns the set's fragments in key order. The caller must not modify
// them.
func (s *Set) All() []Fragment {
	if s == nil {
		return nil
	}
	return s.frags
}

// Len returns the number of fragments.
func (s *Set) Len() int { return len(s.All()) }

// MaxCoveringSeq returns the largest sequence number below snap of a
// tombstone covering ukey, or 0 if no tombstone visible at snap covers ukey.
// A point entry of ukey written at seq is deleted for a reader at snap iff
// seq < MaxCoveringSeq(ukey, snap). It does not allocate.
func (s *Set) MaxCoveringSeq(ukey []byte, snap base.SeqNum) base.SeqNum {
	if s == nil {
		return 0
	}
	// The first fragment ending after ukey is the only one that can
	// contain it.
	frags := s.frags
	lo, hi := 0, len(frags)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bytes.Compare(frags[mid].End, ukey) <= 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(frags) || bytes.Compare(frags[lo].Start, ukey) > 0 {
		return 0
	}
	// Seqs descend: find the first one below snap.
	seqs := frags[lo].Seqs
	lo, hi = 0, len(seqs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if seqs[mid] >= snap {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(seqs) {
		return 0
	}
	return seqs[lo]
}

// Covers reports whether the point entry of ukey written at seq is deleted
// by a tombstone of the set, for a reader at snapshot snap.
func (s *Set) Covers(ukey []byte, seq, snap base.SeqNum) bool {
	return s.MaxCoveringSeq(ukey, snap) > seq
}
