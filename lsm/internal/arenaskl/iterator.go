package arenaskl

import "github.com/cairnkv/cairn/lsm/internal/base"

// Iterator walks a Skiplist. It implements base.InternalIterator. It is a
// small value type: declare one on the stack and Init it to iterate without
// allocating,
//
//	var it arenaskl.Iterator
//	it.Init(s)
//	for it.First(); it.Valid(); it.Next() { ... }
//
// An Iterator sees every entry added before its positioning call, and may or
// may not see entries added concurrently. Key and Value point into the arena:
// they stay valid (and unchanged) for the lifetime of the list, longer than
// base.InternalIterator promises.
//
// An Iterator is not safe for concurrent use; many Iterators over one list
// are.
type Iterator struct {
	list *Skiplist
	// nd is the current node; head or tail (or nil) when not positioned on
	// an entry.
	nd *node
}

var _ base.InternalIterator = (*Iterator)(nil)

// NewIter returns a heap-allocated iterator over s, not positioned.
func (s *Skiplist) NewIter() *Iterator {
	it := &Iterator{}
	it.Init(s)
	return it
}

// Init makes it an iterator over s, not positioned.
func (it *Iterator) Init(s *Skiplist) {
	it.list = s
	it.nd = s.head
}

// SeekGE moves to the first entry whose internal key is >= ikey.
func (it *Iterator) SeekGE(ikey []byte) {
	_, it.nd = it.list.seekForBaseSplice(ikey)
}

// SeekLT moves to the last entry whose internal key is < ikey.
func (it *Iterator) SeekLT(ikey []byte) {
	it.nd, _ = it.list.seekForBaseSplice(ikey)
}

// First moves to the first entry.
func (it *Iterator) First() {
	it.nd = it.list.node(it.list.head.next(0))
}

// Last moves to the last entry.
func (it *Iterator) Last() {
	it.nd = it.list.node(it.list.tail.prev(0))
}

// Next moves to the following entry. Past the last entry the iterator is
// exhausted; Next on an exhausted iterator leaves it so.
func (it *Iterator) Next() {
	if it.nd == nil || it.nd == it.list.tail {
		return
	}
	it.nd = it.list.node(it.nd.next(0))
}

// Prev moves to the preceding entry. Before the first entry the iterator is
// exhausted; Prev on an exhausted iterator leaves it so.
//
// Prev follows the level-0 back links. While another goroutine is linking a
// node, the back link may still skip it; such a node was added concurrently
// with the iteration, which may or may not see it anyway.
func (it *Iterator) Prev() {
	if it.nd == nil || it.nd == it.list.head {
		return
	}
	it.nd = it.list.node(it.nd.prev(0))
}

// Valid reports whether the iterator is positioned on an entry.
func (it *Iterator) Valid() bool {
	return it.nd != nil && it.nd != it.list.head && it.nd != it.list.tail
}

// Key returns the current entry's encoded internal key (nil when not valid).
func (it *Iterator) Key() []byte {
	if !it.Valid() {
		return nil
	}
	return it.list.key(it.nd)
}

// Value returns the current entry's value (nil when not valid).
func (it *Iterator) Value() []byte {
	if !it.Valid() {
		return nil
	}
	return it.list.value(it.nd)
}

// Error returns nil: an in-memory list cannot fail.
func (it *Iterator) Error() error { return nil }

// Close unpositions the iterator. It returns nil.
func (it *Iterator) Close() error {
	it.nd = nil
	return nil
}
