package cache

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cairnkv/cairn/lsm/internal/offheap"
)

// The allocator hands out the memory of cached blocks from slabs that live
// outside the Go heap (mapped by lsm/internal/offheap). It is the blob
// cache's allocator (lsm/blob/alloc.go) with finer size classes: a slab
// serves one size class; classes grow by 1/16 from minClass (64-byte
// aligned), so at most about 6% of a chunk is rounding waste. Data blocks
// cluster just above the writer's 4 KiB target (a block is cut once it
// reaches it), where 1/8 classes (4160, 4736) wasted 12% of most blocks.
// Requests above maxClass get a mapping of their own. A slab whose chunks
// are all free is unmapped (unless it is the last slab of its class), so
// memory released by the cache returns to the operating system.
//
// One mmap per block instead would cost a system call (and a page fault
// per 4 KiB page) on every miss and round every block up to whole pages:
// a 4.2 KiB block would take 8 KiB. A slab is one 2 MiB huge page:
// aligned to its size and, on Linux, madvise(MADV_HUGEPAGE)'d, so that
// filling the cache faults once per slab.
const (
	minClass = 64
	maxClass = 256 << 10
	slabSize = 2 << 20
	// poisonByte fills freed chunks when poisonFreed is set.
	poisonByte = 0xdb
)

var classSizes = func() []int {
	var cs []int
	for s := minClass; ; {
		cs = append(cs, s)
		if s >= maxClass {
			return cs
		}
		n := s + s/16
		n = (n + 63) &^ 63 // 64-byte aligned
		s = min(n, maxClass)
	}
}()

// classOf returns the index of the smallest class holding n bytes, or -1.
func classOf(n int) int {
	lo, hi := 0, len(classSizes)
	for lo < hi {
		m := (lo + hi) / 2
		if classSizes[m] < n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(classSizes) {
		return -1
	}
	return lo
}

// buffer is one allocation: b is its usable memory (len = requested size,
// cap = the chunk).
type buffer struct {
	b    []byte
	slab *slab // nil for a dedicated mapping
	idx  int   // chunk index in slab
}

type slab struct {
	mem   []byte
	class int
	free  []int32 // free chunk indexes
	used  int
}

// mappings is every mapping an allocator holds. It is apart from the
// allocator so that a cleanup attached to the allocator can unmap it.
type mappings struct {
	slabs map[*slab]struct{}
	// big holds the dedicated mappings, by their first byte.
	big map[*byte][]byte
}

func (m *mappings) unmapAll() {
	for s := range m.slabs {
		offheap.Unmap(s.mem)
	}
	for _, b := range m.big {
		offheap.Unmap(b)
	}
	m.slabs, m.big = nil, nil
}

type allocator struct {
	mu sync.Mutex
	// The fields below are guarded by mu.
	partial [][]*slab // per class: slabs with a free chunk
	maps    *mappings
	// mappedBytes counts mapped memory; liveBytes the chunks handed out
	// and not freed; outstanding counts those chunks.
	mappedBytes int64
	liveBytes   int64
	outstanding int64
	closed      bool
}

func newAllocator() *allocator {
	a := &allocator{
		partial: make([][]*slab, len(classSizes)),
		maps:    &mappings{slabs: make(map[*slab]struct{}), big: make(map[*byte][]byte)},
	}
	// A cache dropped without Close gives its memory back when the
	// allocator is unreachable: every entry and Handle references it, so
	// then no one can legitimately hold a view of its memory.
	runtime.AddCleanup(a, (*mappings).unmapAll, a.maps)
	return a
}

// alloc returns a buffer of n > 0 bytes (its charge is cap(b)).
func (a *allocator) alloc(n int) (*buffer, error) {
	c := classOf(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("cache: block cache closed")
	}
	if c < 0 {
		mem, err := offheap.Map(n)
		if err != nil {
			return nil, fmt.Errorf("cache: block cache: %w", err)
		}
		a.maps.big[&mem[0]] = mem
		a.mappedBytes += int64(len(mem))
		a.liveBytes += int64(len(mem))
		a.outstanding++
		return &buffer{b: mem[:n:n]}, nil
	}
	var s *slab
	if p := a.partial[c]; len(p) > 0 {
		s = p[len(p)-1]
	} else {
		size := classSizes[c]
		mem, err := offheap.MapAligned(slabSize)
		if err != nil {
			return nil, fmt.Errorf("cache: block cache: %w", err)
		}
		s = &slab{mem: mem, class: c}
		for i := len(mem)/size - 1; i >= 0; i-- {
			s.free = append(s.free, int32(i))
		}
		a.maps.slabs[s] = struct{}{}
		a.partial[c] = append(a.partial[c], s)
		a.mappedBytes += int64(len(mem))
	}
	i := int(s.free[len(s.free)-1])
	s.free = s.free[:len(s.free)-1]
	s.used++
	if len(s.free) == 0 {
		a.partial[c] = a.partial[c][:len(a.partial[c])-1]
	}
	size := classSizes[c]
	a.outstanding++
	a.liveBytes += int64(size)
	chunk := s.mem[i*size : (i+1)*size : (i+1)*size]
	return &buffer{b: chunk[:n], slab: s, idx: i}, nil
}

// free returns buf's memory. buf must not be used afterwards.
func (a *allocator) free(buf *buffer) {
	if poisonFreed {
		b := buf.b[:cap(buf.b)]
		for i := range b {
			b[i] = poisonByte
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outstanding--
	if buf.slab == nil {
		mem := buf.b[:cap(buf.b)]
		delete(a.maps.big, &mem[0])
		a.mappedBytes -= int64(len(mem))
		a.liveBytes -= int64(len(mem))
		offheap.Unmap(mem)
		buf.b = nil
		return
	}
	s := buf.slab
	a.liveBytes -= int64(classSizes[s.class])
	buf.b = nil
	if len(s.free) == 0 {
		a.partial[s.class] = append(a.partial[s.class], s)
	}
	s.free = append(s.free, int32(buf.idx))
	s.used--
	if s.used == 0 && !a.closed && len(a.partial[s.class]) > 1 {
		// Unmap the empty slab, unless it is its class's only one: a cache
		// that holds nothing (or a read that is not cached) would map and
		// unmap a slab per read.
		p := a.partial[s.class]
		for j, x := range p {
			if x == s {
				p[j] = p[len(p)-1]
				a.partial[s.class] = p[:len(p)-1]
				break
			}
		}
		delete(a.maps.slabs, s)
		a.mappedBytes -= int64(len(s.mem))
		offheap.Unmap(s.mem)
		s.mem = nil
	}
}

// allocStats is the allocator's state at one moment.
type allocStats struct {
	mappedBytes, liveBytes, outstanding int64
}

func (a *allocator) stats() allocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return allocStats{a.mappedBytes, a.liveBytes, a.outstanding}
}

// close unmaps every slab. It returns an error, and unmaps nothing, if
// buffers are still outstanding: unmapping memory that a handle still
// views would turn a leak into a crash.
func (a *allocator) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if a.outstanding != 0 {
		return &LeakError{Buffers: a.outstanding, Bytes: a.liveBytes}
	}
	a.maps.unmapAll()
	a.mappedBytes = 0
	a.partial = nil
	a.closed = true
	return nil
}
