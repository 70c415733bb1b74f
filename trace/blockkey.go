package trace

import (
	"encoding/binary"
	"fmt"
)

// A block key names the cached unit a record is about, exactly as the
// engine's cache names it. cairn's block cache (lsm/cache) and blob cache
// (lsm/blob) both key an entry by (cache id, file number, offset):
//
//   - cache id: the id the cache gave the DB that owns the file
//     (cache.NewID), so that DBs sharing a cache do not collide; for the
//     blob cache it is the blob cache's id of the DB;
//   - file number: the table's (or blob file's) number, unique within a DB;
//   - offset: the byte offset of the block (or blob record) in the file.
//
// Blocks the table reader pins (index, filter, range deletion) use the same
// key with their own offset, though they never enter the cache.
//
// Encoding: uvarint(cache id) | uvarint(file number) | uvarint(offset),
// nothing after. Two records are for the same block exactly when their
// block keys (and block types) are equal.
//
// RocksDB's helpers recover a table id, a sequence number and an offset
// from its keys; cairn's keys carry no sequence number (blocks are
// immutable and named by position), so BlockKeyParts returns the three
// parts above.

// MaxBlockKeyLen is the longest encoded block key.
const MaxBlockKeyLen = 3 * binary.MaxVarintLen64

// AppendBlockKey appends the block key of (cacheID, fileNum, offset) to dst.
func AppendBlockKey(dst []byte, cacheID, fileNum, offset uint64) []byte {
	dst = binary.AppendUvarint(dst, cacheID)
	dst = binary.AppendUvarint(dst, fileNum)
	return binary.AppendUvarint(dst, offset)
}

// BlockKeyParts decodes a block key made by AppendBlockKey. A key that is
// not exactly three uvarints is an error.
func BlockKeyParts(key []byte) (cacheID, fileNum, offset uint64, err error) {
	var parts [3]uint64
	rest := key
	for i := range parts {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, 0, 0, fmt.Errorf("trace: malformed block key %x", key)
		}
		parts[i], rest = v, rest[n:]
	}
	if len(rest) != 0 {
		return 0, 0, 0, fmt.Errorf("trace: block key %x has %d trailing bytes", key, len(rest))
	}
	return parts[0], parts[1], parts[2], nil
}

// CacheID returns the cache id of r's block key (see BlockKeyParts).
func (r *Record) CacheID() (uint64, error) {
	id, _, _, err := BlockKeyParts(r.BlockKey)
	return id, err
}

// BlockOffset returns the block's offset in its file, from r's block key.
func (r *Record) BlockOffset() (uint64, error) {
	_, _, off, err := BlockKeyParts(r.BlockKey)
	return off, err
}
