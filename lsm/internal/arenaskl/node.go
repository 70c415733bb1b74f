package arenaskl

import (
	"math"
	"sync/atomic"
	"unsafe"
)

const (
	// maxHeight is the height of the head and tail towers. With p = 1/4 a
	// list reaches height h after about 4^(h-1) entries, so 20 levels are
	// plenty for any arena a uint32 can address.
	maxHeight = 20
	// nodeAlignment is the alignment of a node: its fields are uint32s.
	nodeAlignment = 4
)

// links are a node's two neighbours at one level of the list, as arena
// offsets.
type links struct {
	nextOffset atomic.Uint32
	prevOffset atomic.Uint32
}

func (l *links) init(prevOffset, nextOffset uint32) {
	l.nextOffset.Store(nextOffset)
	l.prevOffset.Store(prevOffset)
}

// node is one entry of the list. It lives in the arena, followed directly by
// its key and value:
//
//	node offset
//	|
//	v
//	+-----------+---------+-----------+---------------------------+---------+-------+
//	| keyOffset | keySize | valueSize | tower[0..height-1]        | ikey    | value |
//	| uint32    | uint32  | uint32    | (next, prev uint32) each  | keySize | vSize |
//	+-----------+---------+-----------+---------------------------+---------+-------+
//	 <----------------- 12 + 8*height bytes --------------------->
//
// The tower is truncated to the node's height: levels at or above it are
// never read or written, and the key starts where they would have been.
// keyOffset, keySize and valueSize, the key and the value are written before
// the node is published by a CAS and never change afterwards, so readers can
// read them without synchronisation beyond the atomic load of the link that
// led them to the node.
type node struct {
	keyOffset uint32
	keySize   uint32
	valueSize uint32
	tower     [maxHeight]links
}

const (
	linksSize   = uint32(unsafe.Sizeof(links{}))
	maxNodeSize = uint32(unsafe.Sizeof(node{}))
)

// MinArenaSize is the smallest arena a Skiplist accepts: room for the head and
// tail sentinels. Such a list holds no entries.
const MinArenaSize = 1 + 2*(maxNodeSize+nodeAlignment-1)

// MaxNodeSize returns the most arena space one entry with the given key and
// value sizes can take (node at full height, alignment padding, key and
// value). A memtable can use it to tell whether an entry would fit even in an
// empty arena.
func MaxNodeSize(keySize, valueSize uint32) uint64 {
	return uint64(maxNodeSize) + uint64(keySize) + uint64(valueSize) + nodeAlignment - 1
}

// newNode allocates a node of the given height holding copies of ikey and
// value. The node's links are left for the caller to initialise.
func newNode(a *Arena, height uint32, ikey, value []byte) (*node, error) {
	unused := (maxHeight - height) * linksSize
	nodeSize := maxNodeSize - unused
	total := uint64(nodeSize) + uint64(len(ikey)) + uint64(len(value))
	if total > math.MaxUint32 {
		return nil, ErrArenaFull
	}
	offset, err := a.alloc(uint32(total), nodeAlignment, unused)
	if err != nil {
		return nil, err
	}
	nd := (*node)(a.pointer(offset))
	nd.keyOffset = offset + nodeSize
	nd.keySize = uint32(len(ikey))
	nd.valueSize = uint32(len(value))
	copy(a.buf[nd.keyOffset:], ikey)
	copy(a.buf[nd.keyOffset+nd.keySize:], value)
	return nd, nil
}

func (nd *node) next(level int) uint32 { return nd.tower[level].nextOffset.Load() }
func (nd *node) prev(level int) uint32 { return nd.tower[level].prevOffset.Load() }

func (nd *node) casNext(level int, old, new uint32) bool {
	return nd.tower[level].nextOffset.CompareAndSwap(old, new)
}

func (nd *node) casPrev(level int, old, new uint32) bool {
	return nd.tower[level].prevOffset.CompareAndSwap(old, new)
}
