package sst

import (
	"bytes"
	"encoding/binary"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// inlineKeyLen is the size of the key buffer embedded in a blockIter. Keys up
// to this length are assembled without touching the heap, so that a
// blockIter on the stack (Reader.Get) does not allocate.
const inlineKeyLen = 256

// Where a blockIter's current key lives.
const (
	// keyInBlock: the entry shares nothing with its predecessor and the key
	// aliases the block.
	keyInBlock uint8 = iota
	// keyInline: the key was assembled in blockIter.inline.
	keyInline
	// keyInBig: the key was assembled in blockIter.big (longer than
	// inlineKeyLen).
	keyInBig
)

// blockIter iterates over the entries of one block in place. Keys are
// compared as internal keys (base.InternalCompare) by the seek methods; the
// metaindex and properties blocks, whose keys are names, are only read
// sequentially.
//
// Every decode is bounds-checked: on malformed bytes the iterator becomes
// invalid with err set to a corruption error and never panics. Only a block
// that passed verifyBlock is guaranteed to yield strictly increasing keys;
// the reader verifies every block when it loads it from the file.
//
// The zero value is an invalid iterator over an empty block. A blockIter must
// not be copied once in use (Key may point into its inline buffer).
type blockIter struct {
	data []byte
	// restartsOff is the offset of the restart array: entries occupy
	// data[:restartsOff].
	restartsOff int
	numRestarts int

	// offset is the start of the current entry, nextOffset the start of
	// the next one (restartsOff after the last entry).
	offset, nextOffset int
	valid              bool

	// The current key: data[keyStart:keyStart+keyLen] if keyLoc is
	// keyInBlock, inline[:keyLen] if keyInline, big[:keyLen] if keyInBig.
	keyLoc           uint8
	keyStart, keyLen int
	valStart, valLen int

	err    error
	inline [inlineKeyLen]byte
	big    []byte
}

// newBlockIter returns an iterator over data after checking the block's
// restart array: it fits in the block, its first offset is 0, its offsets
// strictly increase and all lie within the entries. An empty block has no
// restart points and no entries.
func newBlockIter(data []byte) (*blockIter, error) {
	i := &blockIter{}
	if err := i.init(data); err != nil {
		return nil, err
	}
	prev := -1
	for r := 0; r < i.numRestarts; r++ {
		off := int(binary.LittleEndian.Uint32(data[i.restartsOff+4*r:]))
		if off <= prev || off >= i.restartsOff || (r == 0 && off != 0) {
			return nil, base.CorruptionErrorf("sst: block restart point %d at offset %d out of order or range", r, off)
		}
		prev = off
	}
	return i, nil
}

// init points i at data, checking only that the restart array fits. It is
// the constructor for blocks that passed verifyBlock; any later inconsistency
// is still caught, entry by entry, as a corruption error.
func (i *blockIter) init(data []byte) error {
	// Reset field by field: zeroing the inline key buffer would cost more
	// than a whole seek in a cached block.
	i.data, i.restartsOff, i.numRestarts = data, 0, 0
	i.offset, i.nextOffset, i.valid = 0, 0, false
	i.keyLoc, i.keyStart, i.keyLen, i.valStart, i.valLen = keyInBlock, 0, 0, 0, 0
	i.err = nil
	if len(data) < 4 {
		i.data = nil
		i.err = base.CorruptionErrorf("sst: block of %d bytes has no restart count", len(data))
		return i.err
	}
	n := uint64(binary.LittleEndian.Uint32(data[len(data)-4:]))
	if maxN := uint64(len(data)-4) / 4; n > maxN {
		i.data = nil
		i.err = base.CorruptionErrorf("sst: block of %d bytes claims %d restart points", len(data), n)
		return i.err
	}
	i.numRestarts = int(n)
	i.restartsOff = len(data) - 4 - 4*int(n)
	if (i.numRestarts == 0) != (i.restartsOff == 0) {
		i.err = base.CorruptionErrorf("sst: block with %d bytes of entries has %d restart points", i.restartsOff, n)
		i.data = nil
		return i.err
	}
	return nil
}

// corrupt makes the iterator invalid with a corruption error.
func (i *blockIter) corrupt(what string) {
	i.valid = false
	if i.err == nil {
		i.err = base.CorruptionErrorf("sst: corrupt block entry at offset %d: %s", i.offset, what)
	}
}

// key returns the current key. The slice is valid until the next move and
// must not be appended to.
func (i *blockIter) key() []byte {
	switch i.keyLoc {
	case keyInBlock:
		e := i.keyStart + i.keyLen
		return i.data[i.keyStart:e:e]
	case keyInline:
		return i.inline[:i.keyLen:i.keyLen]
	}
	return i.big[:i.keyLen:i.keyLen]
}

// value returns the current value, which aliases the block.
func (i *blockIter) value() []byte {
	e := i.valStart + i.valLen
	return i.data[i.valStart:e:e]
}

// readUvarint32 decodes a varint below 2^31 at data[off:limit]. n is 0 on a
// malformed or out-of-range varint.
func readUvarint32(data []byte, off, limit int) (v, n int) {
	if off < limit {
		if b := data[off]; b < 0x80 {
			return int(b), 1
		}
	}
	if off > limit {
		return 0, 0
	}
	x, k := binary.Uvarint(data[off:limit])
	if k <= 0 || x >= 1<<31 {
		return 0, 0
	}
	return int(x), k
}

// decodeAt decodes the entry at off, whose predecessor's key is the current
// key (keyLen 0 at a restart point). It reports whether the iterator is now
// valid.
func (i *blockIter) decodeAt(off int) bool {
	i.offset = off
	limit := i.restartsOff
	var shared, unshared, vlen, keyStart int
	if off >= 0 && off+3 <= limit && i.data[off]|i.data[off+1]|i.data[off+2] < 0x80 {
		// Fast path: three one-byte varints.
		shared, unshared, vlen = int(i.data[off]), int(i.data[off+1]), int(i.data[off+2])
		keyStart = off + 3
	} else {
		var n1, n2, n3 int
		shared, n1 = readUvarint32(i.data, off, limit)
		unshared, n2 = readUvarint32(i.data, off+n1, limit)
		vlen, n3 = readUvarint32(i.data, off+n1+n2, limit)
		if n1 == 0 || n2 == 0 || n3 == 0 {
			i.corrupt("bad varint header")
			return false
		}
		keyStart = off + n1 + n2 + n3
	}
	if unshared > limit-keyStart || vlen > limit-keyStart-unshared {
		i.corrupt("entry overruns the block")
		return false
	}
	if shared > i.keyLen {
		i.corrupt("shared prefix longer than the previous key")
		return false
	}
	if shared == 0 {
		i.keyLoc, i.keyStart, i.keyLen = keyInBlock, keyStart, unshared
	} else {
		i.assembleKey(shared, i.data[keyStart:keyStart+unshared])
	}
	i.valStart, i.valLen = keyStart+unshared, vlen
	i.nextOffset = i.valStart + vlen
	i.valid = true
	return true
}

// assembleKey replaces the current key by its first shared bytes followed by
// suffix. REQUIRES: shared <= i.keyLen.
func (i *blockIter) assembleKey(shared int, suffix []byte) {
	n := shared + len(suffix)
	if n <= inlineKeyLen {
		if i.keyLoc != keyInline {
			copy(i.inline[:shared], i.key())
		}
		copy(i.inline[shared:n], suffix)
		i.keyLoc, i.keyLen = keyInline, n
		return
	}
	if cap(i.big) < n {
		nb := make([]byte, n, 2*n)
		copy(nb, i.key()[:shared])
		i.big = nb
	} else if i.keyLoc != keyInBig {
		copy(i.big[:shared], i.key()[:shared])
	}
	i.big = i.big[:cap(i.big)]
	copy(i.big[shared:n], suffix)
	i.keyLoc, i.keyLen = keyInBig, n
}

// restartOffset returns the offset of restart point r, or -1 (with err set)
// if it is out of range.
func (i *blockIter) restartOffset(r int) int {
	off := int(binary.LittleEndian.Uint32(i.data[i.restartsOff+4*r:]))
	if off >= i.restartsOff {
		i.offset = off
		i.corrupt("restart point out of range")
		return -1
	}
	return off
}

// seekToRestart positions i at the entry of restart point r.
func (i *blockIter) seekToRestart(r int) bool {
	off := i.restartOffset(r)
	if off < 0 {
		return false
	}
	i.keyLen = 0
	return i.decodeAt(off)
}

// restartKey returns the key of restart point r, which shares nothing with
// any other key and so aliases the block.
func (i *blockIter) restartKey(r int) ([]byte, bool) {
	if !i.seekToRestart(r) {
		return nil, false
	}
	if i.keyLoc != keyInBlock {
		i.corrupt("restart point with a shared prefix")
		return nil, false
	}
	return i.key(), true
}

func (i *blockIter) first() {
	i.valid = false
	if i.err != nil || i.numRestarts == 0 {
		return
	}
	i.seekToRestart(0)
}

func (i *blockIter) last() {
	i.valid = false
	if i.err != nil || i.numRestarts == 0 {
		return
	}
	if !i.seekToRestart(i.numRestarts - 1) {
		return
	}
	for i.nextOffset < i.restartsOff {
		if !i.decodeAt(i.nextOffset) {
			return
		}
	}
}

// next moves to the following entry. REQUIRES: i.valid.
func (i *blockIter) next() {
	if i.nextOffset >= i.restartsOff {
		i.valid = false
		i.offset = i.restartsOff
		return
	}
	i.decodeAt(i.nextOffset)
}

// prev moves to the preceding entry by scanning forward from the last
// restart point before the current entry. REQUIRES: i.valid.
func (i *blockIter) prev() {
	cur := i.offset
	// Find the first restart point at or after cur; the one before it
	// starts the run holding cur's predecessor.
	lo, hi := 0, i.numRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(binary.LittleEndian.Uint32(i.data[i.restartsOff+4*mid:])) < cur {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		i.valid = false
		return
	}
	if !i.seekToRestart(lo - 1) {
		return
	}
	for i.nextOffset < cur {
		if !i.decodeAt(i.nextOffset) {
			return
		}
	}
	if i.nextOffset != cur {
		i.corrupt("entries do not chain to the current entry")
	}
}

// cmpSearch compares the internal key k with the internal key made of ukey
// and trailer t, as base.InternalCompare would.
func cmpSearch(k, ukey []byte, t base.Trailer) int {
	if len(k) < base.TrailerLen {
		return -1 // Short keys sort before every valid internal key.
	}
	if c := bytes.Compare(k[:len(k)-base.TrailerLen], ukey); c != 0 {
		return c
	}
	switch kt := base.DecodeTrailer(k); {
	case kt > t:
		return -1
	case kt < t:
		return 1
	}
	return 0
}

// seekGE moves to the first entry whose key is >= the internal key target.
func (i *blockIter) seekGE(target []byte) {
	if len(target) < base.TrailerLen {
		// Such a key sorts before every valid internal key.
		i.first()
		return
	}
	i.seekGESearch(base.UserKey(target), base.DecodeTrailer(target))
}

// seekGESearch moves to the first entry >= the internal key (ukey, t): a
// binary search over the restart points, whose keys are stored whole, then a
// scan of at most one restart interval.
func (i *blockIter) seekGESearch(ukey []byte, t base.Trailer) {
	i.valid = false
	if i.err != nil || i.numRestarts == 0 {
		return
	}
	// Find the first restart point whose key is >= target.
	lo, hi := 0, i.numRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		k, ok := i.restartKey(mid)
		if !ok {
			return
		}
		if cmpSearch(k, ukey, t) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	// The answer is in the run before that restart point, or is it.
	if !i.seekToRestart(max(lo-1, 0)) {
		return
	}
	for cmpSearch(i.key(), ukey, t) < 0 {
		if i.next(); !i.valid {
			return
		}
	}
}

// seekLT moves to the last entry whose key is < the internal key target.
func (i *blockIter) seekLT(target []byte) {
	if len(target) < base.TrailerLen {
		i.valid = false
		return
	}
	i.seekGESearch(base.UserKey(target), base.DecodeTrailer(target))
	switch {
	case i.valid:
		i.prev()
	case i.err == nil:
		i.last()
	}
}

// blockKind says what a block's keys are, for verifyBlock.
type blockKind uint8

const (
	// dataBlockKind keys are point internal keys: SET, DEL or BLOBIDX.
	dataBlockKind blockKind = iota
	// indexBlockKind keys are internal keys (separators) of any kind.
	indexBlockKind
	// rangeDelBlockKind keys are RANGEDEL internal keys.
	rangeDelBlockKind
	// metaBlockKind keys are names in bytewise order (metaindex,
	// properties).
	metaBlockKind
)

// verifyBlock decodes every entry of data and checks the whole block: the
// restart array (newBlockIter), that restart points fall exactly on entry
// boundaries and share no prefix, that the entries tile the space before the
// restart array, that every key is valid for kind and that keys strictly
// increase. If after is not nil, the first key must be above it; if upTo is
// not nil, the last key must not be above it (internal-key kinds only: a
// data block's keys lie between its index separator and the one before). It
// returns the number of entries. Blocks pass verifyBlock once, when they are
// read from the file; iterators over them then never meet a malformed or
// out-of-order entry.
func verifyBlock(data []byte, kind blockKind, after, upTo []byte) (int, error) {
	it, err := newBlockIter(data)
	if err != nil {
		return 0, err
	}
	var prev []byte
	n, r := 0, 0
	for off := 0; off < it.restartsOff; off = it.nextOffset {
		if r < it.numRestarts {
			switch ro := it.restartOffset(r); {
			case ro == off:
				it.keyLen = 0 // A restart point: the entry must share nothing.
				r++
			case ro < off:
				it.offset = off
				it.corrupt("restart point inside an entry")
				return 0, it.err
			}
		}
		if !it.decodeAt(off) {
			return 0, it.err
		}
		k := it.key()
		switch kind {
		case dataBlockKind:
			if !base.ValidInternalKey(k) || !isPointKind(base.DecodeTrailer(k).Kind()) {
				it.corrupt("not a point internal key")
				return 0, it.err
			}
		case indexBlockKind:
			if !base.ValidInternalKey(k) {
				it.corrupt("not an internal key")
				return 0, it.err
			}
		case rangeDelBlockKind:
			if !base.ValidInternalKey(k) || base.DecodeTrailer(k).Kind() != base.KindRangeDelete {
				it.corrupt("not a range deletion key")
				return 0, it.err
			}
		}
		if n == 0 && after != nil && base.InternalCompare(k, after) <= 0 {
			it.corrupt("first key not above the previous block's separator")
			return 0, it.err
		}
		if n > 0 {
			var c int
			if kind == metaBlockKind {
				c = bytes.Compare(prev, k)
			} else {
				c = base.InternalCompare(prev, k)
			}
			if c >= 0 {
				it.corrupt("keys out of order")
				return 0, it.err
			}
		}
		prev = append(prev[:0], k...)
		n++
	}
	if r != it.numRestarts {
		it.offset = it.restartsOff
		it.corrupt("restart point inside an entry")
		return 0, it.err
	}
	if n > 0 && upTo != nil && base.InternalCompare(prev, upTo) > 0 {
		it.corrupt("last key above the block's separator")
		return 0, it.err
	}
	return n, nil
}

// isPointKind reports whether k may appear in a data block.
func isPointKind(k base.Kind) bool {
	return k == base.KindSet || k == base.KindDelete || k == base.KindBlobIndex
}
