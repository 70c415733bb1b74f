package sst

import "github.com/cairnkv/cairn/lsm/internal/base"

// DataBlockBounds calls fn for every data block of the table, in order,
// with the user key of the block's index separator (a key >= every key in
// the block and < every key of the next) and the block's size in bytes. A
// compaction uses it to cut a large key range into parts of about equal
// size (subcompactions). The key aliases the reader's pinned index and
// must not be modified.
func (r *Reader) DataBlockBounds(fn func(ukey []byte, size uint64)) error {
	var it blockIter
	if err := it.init(r.index); err != nil {
		return err
	}
	for it.first(); it.valid; it.next() {
		h, err := indexHandle(&it)
		if err != nil {
			return err
		}
		fn(base.UserKey(it.key()), h.length+blockTrailerLen)
	}
	return it.err
}
