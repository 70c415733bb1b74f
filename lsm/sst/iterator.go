package sst

import (
	"bytes"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/trace"
)

// tableIter is the two-level iterator over a table's point entries: an
// iterator over the pinned index block positions an iterator over one data
// block at a time.
//
// Optional bounds on user keys (lower inclusive, upper exclusive) hide the
// entries outside them and spare the reads of data blocks that hold none of
// the entries inside.
type tableIter struct {
	r     *Reader
	index blockIter
	data  blockIter
	// block pins the data block data iterates over, read from the handle
	// at blockOffset; empty if none is loaded. Invariant: the iterator
	// holds exactly this one block handle, released when it moves to
	// another block or closes, so the keys and values it hands out stay
	// valid until the next positioning call (base.InternalIterator) and
	// no longer.
	block       cache.Handle
	blockOffset uint64
	// ra turns the block reads of a scan in file order into fewer,
	// larger reads.
	ra readahead

	// acc, if not nil, reports data-block lookups to the tracer.
	acc *trace.Access

	lower, upper []byte
	// lowerKey and upperKey are lower and upper with the largest trailer:
	// the smallest internal keys of those user keys.
	lowerKey, upperKey []byte

	valid bool
	// err is sticky: after an error every positioning call leaves the
	// iterator invalid.
	err error
}

var _ base.InternalIterator = (*tableIter)(nil)

// NewIter returns an iterator over the table's point entries (not its range
// tombstones). It must be closed before the Reader.
func (r *Reader) NewIter() base.InternalIterator {
	return r.NewIterWithBounds(nil, nil)
}

// NewIterWithBounds is NewIter limited to the entries whose user key k has
// lower <= k < upper; a nil bound is no bound. The iterator keeps the
// bounds' slices.
func (r *Reader) NewIterWithBounds(lower, upper []byte) base.InternalIterator {
	return r.NewIterTraced(lower, upper, nil)
}

// NewIterTraced is NewIterWithBounds reporting its data-block lookups to
// the Reader's tracer as acc's; nil (no trace running) reports nothing.
func (r *Reader) NewIterTraced(lower, upper []byte, acc *trace.Access) base.InternalIterator {
	it := &tableIter{r: r, lower: lower, upper: upper, acc: acc}
	if lower != nil {
		it.lowerKey = base.MakeInternalKey(nil, lower, separatorTrailer.SeqNum(), separatorTrailer.Kind())
	}
	if upper != nil {
		it.upperKey = base.MakeInternalKey(nil, upper, separatorTrailer.SeqNum(), separatorTrailer.Kind())
	}
	it.err = it.index.init(r.index)
	return it
}

// fail records err and makes the iterator invalid.
func (it *tableIter) fail(err error) {
	it.valid = false
	if it.err == nil {
		it.err = err
	}
}

// loadBlock points it.data at the data block of the index's current entry.
func (it *tableIter) loadBlock() bool {
	h, err := indexHandle(&it.index)
	if err != nil {
		it.fail(err)
		return false
	}
	if it.block.Value() == nil || h.offset != it.blockOffset {
		b, hit, err := it.r.dataBlock(h, &it.index, &it.ra)
		// The old block goes either way: data is re-initialized below or
		// the iterator fails.
		it.data = blockIter{}
		it.block.Release()
		it.block = cache.Handle{}
		if err != nil {
			it.fail(err)
			return false
		}
		if it.acc != nil {
			it.r.traceBlock(it.acc, h.offset, b.Value(), hit)
		}
		it.block, it.blockOffset = b, h.offset
	}
	if err := it.data.init(it.block.Value()); err != nil {
		it.fail(err)
		return false
	}
	return true
}

// skipForward moves past exhausted data blocks to the first entry of the
// next non-empty one, and applies the upper bound.
func (it *tableIter) skipForward() {
	for !it.data.valid {
		if it.data.err != nil {
			it.fail(it.data.err)
			return
		}
		// The next block's keys exceed this block's separator: if its
		// user key reaches the upper bound, so do they.
		if it.upper != nil && bytes.Compare(base.UserKey(it.index.key()), it.upper) >= 0 {
			it.valid = false
			return
		}
		if it.index.next(); !it.index.valid {
			if it.index.err != nil {
				it.fail(it.index.err)
			}
			it.valid = false
			return
		}
		if !it.loadBlock() {
			return
		}
		it.data.first()
	}
	it.valid = it.upper == nil || bytes.Compare(base.UserKey(it.data.key()), it.upper) < 0
}

// skipBackward moves before exhausted data blocks to the last entry of the
// previous non-empty one, and applies the lower bound.
func (it *tableIter) skipBackward() {
	for !it.data.valid {
		if it.data.err != nil {
			it.fail(it.data.err)
			return
		}
		if it.index.prev(); !it.index.valid {
			if it.index.err != nil {
				it.fail(it.index.err)
			}
			it.valid = false
			return
		}
		// The previous block's keys are at most its separator: if that
		// is below the lower bound, so are they.
		if it.lower != nil && bytes.Compare(base.UserKey(it.index.key()), it.lower) < 0 {
			it.valid = false
			return
		}
		if !it.loadBlock() {
			return
		}
		it.data.last()
	}
	it.valid = it.lower == nil || bytes.Compare(base.UserKey(it.data.key()), it.lower) >= 0
}

// SeekGE implements base.InternalIterator.
func (it *tableIter) SeekGE(key []byte) {
	it.valid = false
	if it.err != nil {
		return
	}
	if it.lowerKey != nil && base.InternalCompare(key, it.lowerKey) < 0 {
		key = it.lowerKey
	}
	it.index.seekGE(key)
	if !it.index.valid {
		it.fail(it.index.err)
		return
	}
	if !it.loadBlock() {
		return
	}
	it.data.seekGE(key)
	it.skipForward()
}

// SeekLT implements base.InternalIterator.
func (it *tableIter) SeekLT(key []byte) {
	it.valid = false
	if it.err != nil {
		return
	}
	if it.upperKey != nil && base.InternalCompare(key, it.upperKey) > 0 {
		key = it.upperKey
	}
	// The first block whose separator is >= key holds the last entry
	// < key, or that entry ends the block before. Past every separator,
	// it is the table's last entry.
	it.index.seekGE(key)
	if !it.index.valid {
		if it.index.err != nil {
			it.fail(it.index.err)
			return
		}
		if it.index.last(); !it.index.valid {
			it.fail(it.index.err)
			return
		}
	}
	if !it.loadBlock() {
		return
	}
	it.data.seekLT(key)
	it.skipBackward()
}

// First implements base.InternalIterator.
func (it *tableIter) First() {
	if it.lowerKey != nil {
		it.SeekGE(it.lowerKey)
		return
	}
	it.valid = false
	if it.err != nil {
		return
	}
	if it.index.first(); !it.index.valid {
		it.fail(it.index.err)
		return
	}
	if !it.loadBlock() {
		return
	}
	it.data.first()
	it.skipForward()
}

// Last implements base.InternalIterator.
func (it *tableIter) Last() {
	if it.upperKey != nil {
		it.SeekLT(it.upperKey)
		return
	}
	it.valid = false
	if it.err != nil {
		return
	}
	if it.index.last(); !it.index.valid {
		it.fail(it.index.err)
		return
	}
	if !it.loadBlock() {
		return
	}
	it.data.last()
	it.skipBackward()
}

// Next implements base.InternalIterator.
func (it *tableIter) Next() {
	if !it.valid {
		return
	}
	it.data.next()
	it.skipForward()
}

// Prev implements base.InternalIterator.
func (it *tableIter) Prev() {
	if !it.valid {
		return
	}
	it.data.prev()
	it.skipBackward()
}

// Valid implements base.InternalIterator.
func (it *tableIter) Valid() bool { return it.valid }

// Key implements base.InternalIterator.
func (it *tableIter) Key() []byte { return it.data.key() }

// Value implements base.InternalIterator. It aliases a cached block, which
// the iterator pins until its next positioning call.
func (it *tableIter) Value() []byte { return it.data.value() }

// Error implements base.InternalIterator.
func (it *tableIter) Error() error { return it.err }

// Close implements base.InternalIterator.
func (it *tableIter) Close() error {
	it.valid = false
	it.data = blockIter{}
	it.block.Release()
	it.block = cache.Handle{}
	it.ra = readahead{}
	if it.err == nil {
		it.err = base.ErrClosed
		return nil
	}
	return it.err
}
