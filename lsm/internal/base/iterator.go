package base

// InternalIterator iterates over encoded internal keys in InternalCompare
// order. Memtables, SST blocks and tables, the merging iterator and the
// level iterator implement it.
//
// Positioning methods leave the iterator either valid (Valid() true, Key and
// Value readable) or exhausted. An iterator that meets an error becomes
// invalid and reports the error from Error(); it must never expose a key or
// value it could not verify.
//
// Key and Value return slices that stay valid only until the next
// positioning call; callers that keep them must copy.
type InternalIterator interface {
	// SeekGE moves to the first entry whose internal key is >= ikey.
	SeekGE(ikey []byte)
	// SeekLT moves to the last entry whose internal key is < ikey.
	SeekLT(ikey []byte)
	First()
	Last()
	// Next and Prev require a valid iterator.
	Next()
	Prev()
	Valid() bool
	// Key returns the encoded internal key of the current entry.
	Key() []byte
	Value() []byte
	// Error returns the first error met, if any.
	Error() error
	// Close releases the iterator's resources and returns Error().
	Close() error
}

// RangeTombstone deletes every user key k with Start <= k < End whose
// sequence number is below Seq.
type RangeTombstone struct {
	Start, End []byte
	Seq        SeqNum
}

// Covers reports whether t deletes ukey written at seq, for a reader at
// snapshot snap (t must be visible: t.Seq < snap).
func (t RangeTombstone) Covers(ukey []byte, seq, snap SeqNum) bool {
	return t.Seq < snap && seq < t.Seq && string(t.Start) <= string(ukey) && string(ukey) < string(t.End)
}
