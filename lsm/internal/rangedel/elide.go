package rangedel

import (
	"github.com/cairnkv/cairn/lsm/internal/base"
)

// StripeIndex returns the snapshot stripe of seq: the number of snapshots S
// with S <= seq. snapshots must be sorted ascending.
//
// A snapshot S sees exactly the sequence numbers below S, so with snapshots
// S1 < S2 < ... < Sk the stripes are
//
//	stripe 0:  [0, S1)    seen by every snapshot and by the current state
//	stripe j:  [Sj, Sj+1) seen by S(j+1)..Sk and by the current state
//	stripe k:  [Sk, inf)  seen by the current state only
//
// Two sequence numbers in the same stripe are seen by exactly the same
// readers. Snapshots taken later are above every existing seq and so see
// what the current state sees.
func StripeIndex(seq base.SeqNum, snapshots []base.SeqNum) int {
	lo, hi := 0, len(snapshots)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if snapshots[mid] <= seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Elide returns the fragments a compaction must write, given the live
// snapshots (sorted ascending). It drops sequence numbers no reader needs and
// fragments left with none. frags must be well formed; they are not
// modified, and the result shares their keys.
//
// Rule 1, any level: within one stripe only the newest tombstone is kept. A
// reader sees either all or none of a stripe's tombstones; if it sees them,
// the newest deletes a superset of what the older ones delete (a tombstone at
// s deletes seqs below s). So for every reader the largest visible covering
// seq, hence Set.MaxCoveringSeq, is unchanged.
//
// Rule 2, bottommost only: the tombstones of stripe 0 (seq below the oldest
// snapshot, or every seq when there are no snapshots) are dropped too.
// "Bottommost" means the compaction's inputs hold every entry, at every
// level, of the keys the fragments span: nothing older lies below. A stripe-0
// tombstone t only deletes entries with seq < t.Seq, which are in stripe 0 as
// well; no snapshot lies between t and any of them, so every reader that sees
// such an entry also sees t and finds it deleted. The compaction drops a
// point entry covered by a tombstone of its own stripe (it must apply that
// rule, with the input fragments, before calling Elide), so it drops all of
// t's victims and t has nothing left to delete.
//
// A tombstone in a later stripe must stay even at the bottom: a snapshot
// between it and an older entry it covers still needs that entry, so the
// entry is written, and the current state needs the tombstone to hide it.
// Hence the DESIGN rule "tombstones are dropped only at the bottom level and
// only below the oldest live snapshot".
func Elide(frags []Fragment, snapshots []base.SeqNum, bottommost bool) []Fragment {
	var out []Fragment
	var seqBuf []base.SeqNum
	for _, f := range frags {
		from := len(seqBuf)
		lastStripe := -1
		for _, seq := range f.Seqs { // newest first
			stripe := StripeIndex(seq, snapshots)
			if stripe == lastStripe {
				continue // rule 1: shadowed by a newer seq of its stripe
			}
			if bottommost && stripe == 0 {
				break // rule 2: this and all older seqs are in stripe 0
			}
			seqBuf = append(seqBuf, seq)
			lastStripe = stripe
		}
		if len(seqBuf) == from {
			continue
		}
		seqs := seqBuf[from:len(seqBuf):len(seqBuf)]
		out = append(out, Fragment{Start: f.Start, End: f.End, Seqs: seqs})
	}
	return out
}
