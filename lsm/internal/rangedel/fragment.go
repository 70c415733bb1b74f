package rangedel

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Fragment is a range [Start, End) of user keys deleted by the tombstones
// whose sequence numbers are Seqs: a key k with Start <= k < End written at
// seq is deleted, for a reader at snapshot snap, iff some s in Seqs has
// seq < s < snap.
//
// A well-formed fragment has Start < End and Seqs non-empty and strictly
// descending. The slices are shared, not copied: Fragments made by
// FragmentTombstones alias the input tombstones' keys; treat all of them as
// read-only.
type Fragment struct {
	Start, End []byte
	// Seqs are the sequence numbers of the tombstones covering the
	// fragment, newest first, without duplicates.
	Seqs []base.SeqNum
}

// Contains reports whether Start <= ukey < End.
func (f Fragment) Contains(ukey []byte) bool {
	return bytes.Compare(f.Start, ukey) <= 0 && bytes.Compare(ukey, f.End) < 0
}

// Empty reports whether the fragment covers no key (Start >= End).
func (f Fragment) Empty() bool { return bytes.Compare(f.Start, f.End) >= 0 }

// Truncate clips f to [lower, upper); a nil bound is unbounded. The result
// shares f's slices and is Empty when f lies outside the bounds. Compaction
// uses it to keep each output table's tombstones within the table's key
// range.
func (f Fragment) Truncate(lower, upper []byte) Fragment {
	if lower != nil && bytes.Compare(f.Start, lower) < 0 {
		f.Start = lower
	}
	if upper != nil && bytes.Compare(upper, f.End) < 0 {
		f.End = upper
	}
	return f
}

// String renders f as "[start,end)#s1,s2,...".
func (f Fragment) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%q,%q)#", f.Start, f.End)
	for i, s := range f.Seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", s)
	}
	return b.String()
}

// FragmentTombstones turns arbitrary, possibly overlapping tombstones into
// sorted, non-overlapping fragments that delete exactly the same (key, seq)
// pairs for every reader: for every user key k, the Seqs of the fragment
// containing k are exactly the distinct Seqs of the input tombstones
// containing k. Keys covered by no tombstone belong to no fragment.
// Tombstones with Start >= End are dropped.
//
// Fragment boundaries are the inputs' Start and End keys; adjacent fragments
// are not merged even when their Seqs are equal, so fragmenting the output
// again gives the same output. The input is not modified; the fragments
// alias its keys. Cost: O(n log n + size of the output).
func FragmentTombstones(ts []base.RangeTombstone) []Fragment {
	sorted := make([]base.RangeTombstone, 0, len(ts))
	bounds := make([][]byte, 0, 2*len(ts))
	for _, t := range ts {
		if bytes.Compare(t.Start, t.End) < 0 {
			sorted = append(sorted, t)
			bounds = append(bounds, t.Start, t.End)
		}
	}
	if len(sorted) == 0 {
		return nil
	}
	slices.SortFunc(sorted, func(a, b base.RangeTombstone) int { return bytes.Compare(a.Start, b.Start) })
	slices.SortFunc(bounds, bytes.Compare)
	bounds = slices.CompactFunc(bounds, bytes.Equal)

	var (
		frags  []Fragment
		active []base.RangeTombstone // tombstones with Start <= lo < End
		seqBuf []base.SeqNum         // backing array shared by all fragments' Seqs
		next   int                   // index in sorted of the first tombstone not yet active
	)
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		// Every Start is a bound, so tombstones starting at lo become
		// active exactly now; every End is a bound too, so an active
		// tombstone covers all of [lo, hi) or has ended at lo.
		for next < len(sorted) && bytes.Equal(sorted[next].Start, lo) {
			active = append(active, sorted[next])
			next++
		}
		active = slices.DeleteFunc(active, func(t base.RangeTombstone) bool {
			return bytes.Compare(t.End, lo) <= 0
		})
		if len(active) == 0 {
			continue
		}
		from := len(seqBuf)
		for _, t := range active {
			seqBuf = append(seqBuf, t.Seq)
		}
		seqs := seqBuf[from:]
		slices.SortFunc(seqs, func(a, b base.SeqNum) int {
			switch {
			case a > b:
				return -1
			case a < b:
				return 1
			}
			return 0
		})
		seqs = slices.Compact(seqs)
		seqBuf = seqBuf[:from+len(seqs)]
		frags = append(frags, Fragment{Start: lo, End: hi, Seqs: seqs[:len(seqs):len(seqs)]})
	}
	return frags
}

// checkFragments returns an error describing the first way frags is not a
// sorted, non-overlapping list of well-formed fragments.
func checkFragments(frags []Fragment) error {
	for i, f := range frags {
		if f.Empty() {
			return fmt.Errorf("fragment %d %s is empty", i, f)
		}
		if len(f.Seqs) == 0 {
			return fmt.Errorf("fragment %d %s has no seqs", i, f)
		}
		for j := 1; j < len(f.Seqs); j++ {
			if f.Seqs[j-1] <= f.Seqs[j] {
				return fmt.Errorf("fragment %d %s: seqs not strictly descending", i, f)
			}
		}
		if i > 0 && bytes.Compare(frags[i-1].End, f.Start) > 0 {
			return fmt.Errorf("fragment %d %s overlaps or precedes %s", i, f, frags[i-1])
		}
	}
	return nil
}
