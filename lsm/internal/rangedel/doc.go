// Package rangedel is the engine's range tombstone machinery: fragmenting,
// looking up and eliding range deletions.
//
// A range tombstone [Start, End)#Seq (base.RangeTombstone) deletes every
// entry of a user key in [Start, End) written with a sequence number below
// Seq, for readers whose snapshot is above Seq. Tombstones may overlap
// arbitrarily. Fragmenting splits them at every Start and End into disjoint
// fragments, each carrying the sequence numbers of all the tombstones over
// it:
//
//	input:      [a-------------e)#5
//	                  [c-------------g)#9
//	                  [c---d)#3
//
//	fragments:  [a----c)#5
//	                  [c---d)#9,5,3
//	                      [d---e)#9,5
//	                          [e-----g)#9
//
// Disjoint fragments make a lookup one binary search (Set.MaxCoveringSeq),
// make truncating to a table's bounds trivial (Fragment.Truncate), and let
// compaction drop sequence numbers no reader can need (Elide).
//
// The package owns no on-disk format: tables store fragments in their range
// deletion block as lsm/sst defines. NewSetFromFragments validates fragments
// read back and reports malformed ones as corruption.
package rangedel
