package arenaskl

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// ErrRecordExists is returned by Add when an entry with exactly the same
// internal key (user key, sequence number and kind) is already in the list.
var ErrRecordExists = errors.New("arenaskl: record with this key already exists")

// Skiplist is a lock-free, insert-only skiplist of encoded internal keys in
// base.InternalCompare order, stored in an Arena. Entries are never removed
// or modified; the list is dropped as a whole with its arena.
//
// Concurrency: any number of goroutines may call Add and read (Get, iterators)
// at the same time without locks. Readers never block and never see a
// half-built entry: an entry becomes visible when the CAS that links it into
// level 0 succeeds, and everything about it was written before that CAS.
type Skiplist struct {
	arena *Arena
	// head and tail are full-height sentinels with empty keys. head sorts
	// before every entry and tail after.
	head, tail *node
	// height is the height of the tallest tower linked so far. It only grows.
	// Invariant: 1 <= height <= maxHeight.
	height atomic.Uint32
	// count is the number of entries added.
	count atomic.Uint64
	// testing widens the window between linking a node's next and prev
	// pointers, so that concurrent tests hit the states in between.
	testing bool
}

// splice is a pair of adjacent nodes at one level: the insertion point of a
// key.
type splice struct {
	prev, next *node
}

// NewSkiplist returns an empty skiplist stored in a. The arena must be fresh
// (nothing allocated from it) and of at least MinArenaSize bytes; NewSkiplist
// panics otherwise, since the arena's size is a configuration error, not an
// operating condition.
func NewSkiplist(a *Arena) *Skiplist {
	if a.Size() != 1 {
		panic("arenaskl: arena already in use")
	}
	s := &Skiplist{arena: a}
	var err error
	if s.head, err = newNode(a, maxHeight, nil, nil); err != nil {
		panic("arenaskl: arena smaller than MinArenaSize")
	}
	if s.tail, err = newNode(a, maxHeight, nil, nil); err != nil {
		panic("arenaskl: arena smaller than MinArenaSize")
	}
	headOffset := a.offsetOf(unsafe.Pointer(s.head))
	tailOffset := a.offsetOf(unsafe.Pointer(s.tail))
	for i := 0; i < maxHeight; i++ {
		s.head.tower[i].init(0, tailOffset)
		s.tail.tower[i].init(headOffset, 0)
	}
	s.height.Store(1)
	return s
}

// Arena returns the arena the list is stored in.
func (s *Skiplist) Arena() *Arena { return s.arena }

// Size returns the number of arena bytes used, sentinels and padding
// included.
func (s *Skiplist) Size() uint32 { return s.arena.Size() }

// Height returns the height of the tallest tower in the list.
func (s *Skiplist) Height() uint32 { return s.height.Load() }

// Count returns the number of entries in the list.
func (s *Skiplist) Count() uint64 { return s.count.Load() }

// Add inserts ikey (an encoded internal key) with value. Both are copied into
// the arena. It returns ErrRecordExists if an entry with the same internal key
// exists (or is being added concurrently and wins), ErrArenaFull if the entry
// does not fit, and an ErrInvalidArgument error if ikey is too short to hold a
// trailer. After an error the list is unchanged (an entry that lost a race may
// have used arena space).
//
// Add is safe for concurrent use with other Adds and with readers.
func (s *Skiplist) Add(ikey, value []byte) error {
	if len(ikey) < base.TrailerLen {
		return base.InvalidArgumentf("arenaskl: internal key of %d bytes", len(ikey))
	}
	var spl [maxHeight]splice
	if s.findSplice(ikey, &spl) {
		return ErrRecordExists
	}

	height := randomHeight()
	nd, err := newNode(s.arena, height, ikey, value)
	if err != nil {
		return err
	}
	ndOffset := s.arena.offsetOf(unsafe.Pointer(nd))

	// Raise the list's height first, so that readers descending from the new
	// levels find (at worst) head -> tail until the node is linked there.
	for listHeight := s.Height(); height > listHeight; listHeight = s.Height() {
		if s.height.CompareAndSwap(listHeight, height) {
			break
		}
	}

	// Link from level 0 up. Once the node is in level 0 it is in the list;
	// the upper levels only speed up searches. A concurrent Add of the same
	// key can only collide at level 0: the other node cannot reach level 1
	// before being linked into level 0, where we would have met it.
	for i := 0; i < int(height); i++ {
		prev, next := spl[i].prev, spl[i].next
		if prev == nil {
			// The level was above the list's height when the splice was
			// computed.
			prev, next = s.head, s.tail
		}
		for {
			prevOffset := s.arena.offsetOf(unsafe.Pointer(prev))
			nextOffset := s.arena.offsetOf(unsafe.Pointer(next))
			nd.tower[i].init(prevOffset, nextOffset)

			//	+------------+      +------------+      +------------+
			//	|    prev    |      |     nd     |      |    next    |
			//	|       next |----->|       next |----->|            |
			//	|            |<-----| prev       |<-----| prev       |
			//	+------------+      +------------+      +------------+
			//
			// 1. nd's links point at prev and next (above).
			// 2. CAS prev.next from next to nd: this publishes nd.
			// 3. CAS next.prev from prev to nd.
			//
			// Between 2 and 3 another inserter may see next.prev lagging. If
			// next.prev is not prev but prev.next is next, the inserter that
			// linked next has not finished step 3 yet: do it for them before
			// going on, so that their late step 3 (a CAS from an older value)
			// fails instead of overwriting ours.
			if nextPrev := next.prev(i); nextPrev != prevOffset {
				if prev.next(i) == nextOffset {
					next.casPrev(i, nextPrev, prevOffset)
				}
			}
			if prev.casNext(i, nextOffset, ndOffset) {
				if s.testing {
					runtime.Gosched()
				}
				next.casPrev(i, prevOffset, ndOffset)
				break
			}

			// Someone linked a node between prev and next: search again from
			// prev, which still sorts before ikey.
			var found bool
			prev, next, found = s.findSpliceForLevel(ikey, i, prev)
			if found {
				if i != 0 {
					panic("arenaskl: equal key appeared above level 0")
				}
				return ErrRecordExists
			}
		}
	}
	s.count.Add(1)
	return nil
}

// Get returns the first entry whose internal key is >= searchKey, or ok ==
// false if there is none. The caller checks whether its user key is the one
// looked for. The returned slices point into the arena: they stay valid as
// long as the list and must not be modified. Get does not allocate.
func (s *Skiplist) Get(searchKey []byte) (ikey, value []byte, ok bool) {
	_, next := s.seekForBaseSplice(searchKey)
	if next == s.tail {
		return nil, nil, false
	}
	return s.key(next), s.value(next), true
}

// randomHeight returns a tower height with P(h >= k) = 4^-(k-1), capped at
// maxHeight.
func randomHeight() uint32 {
	// Each pair of zero low bits adds a level. 64 bits give 32 pairs, more
	// than maxHeight-1.
	h := uint32(bits.TrailingZeros64(rand.Uint64())/2) + 1
	return min(h, maxHeight)
}

// findSplice fills spl[0:Height()] with the insertion point of key at each
// level, and reports whether an entry equal to key was met (spl is then only
// partly filled).
func (s *Skiplist) findSplice(key []byte, spl *[maxHeight]splice) (found bool) {
	prev := s.head
	for level := int(s.Height()) - 1; level >= 0; level-- {
		var next *node
		prev, next, found = s.findSpliceForLevel(key, level, prev)
		if found {
			return true
		}
		spl[level] = splice{prev: prev, next: next}
	}
	return false
}

// findSpliceForLevel walks level from start, which must sort before key, and
// returns the last node before key and the node after it (the first node >=
// key, or tail). found reports whether next equals key.
func (s *Skiplist) findSpliceForLevel(key []byte, level int, start *node) (prev, next *node, found bool) {
	prev = start
	for {
		next = s.node(prev.next(level))
		if next == s.tail {
			return prev, next, false
		}
		c := base.InternalCompare(key, s.key(next))
		if c <= 0 {
			return prev, next, c == 0
		}
		prev = next
	}
}

// seekForBaseSplice returns the level-0 splice of key: prev is the last node
// < key (or head), next the first node >= key (or tail).
func (s *Skiplist) seekForBaseSplice(key []byte) (prev, next *node) {
	prev = s.head
	for level := int(s.Height()) - 1; level >= 0; level-- {
		prev, next, _ = s.findSpliceForLevel(key, level, prev)
	}
	return prev, next
}

func (s *Skiplist) node(offset uint32) *node {
	return (*node)(s.arena.pointer(offset))
}

func (s *Skiplist) key(nd *node) []byte {
	return s.arena.bytes(nd.keyOffset, nd.keySize)
}

func (s *Skiplist) value(nd *node) []byte {
	return s.arena.bytes(nd.keyOffset+nd.keySize, nd.valueSize)
}
