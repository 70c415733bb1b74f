package blob

import (
	"fmt"
	"sync"

	"github.com/cairnkv/cairn/lsm/internal/offheap"
)

// The allocator hands out the cache's buffers from slabs that live outside
// the Go heap (mapped by lsm/internal/offheap). A slab serves one size
// class; classes grow by 1/8 from minClass, so at most about 12% of a
// buffer is rounding waste. Requests above maxClass get a mapping of their
// own. A slab whose chunks are all free is unmapped (unless it is the last
// slab of its class), so memory released by the cache returns to the
// operating system rather than staying with a class that no longer needs
// it.
//
// A slab is one 2 MiB huge page: aligned to its size and, on Linux,
// madvise(MADV_HUGEPAGE)'d, so that filling the cache faults once per
// slab instead of 512 times. A fault is expensive on a virtual machine
// (the shared 2-core VM of bench/RESULTS.md: ~15 µs per 4 KiB page against
// ~9 µs per 4 KiB of a huge page, and 0.25 µs to zero 4 KiB), and a cold
// cache faults once per 4 KiB it fills: it was half of readrandom's CPU
// while the 64 MiB cache filled.
const (
	minClass = 64
	maxClass = 256 << 10
	slabSize = 2 << 20
)

var classSizes = func() []int {
	var cs []int
	for s := minClass; ; {
		cs = append(cs, s)
		if s >= maxClass {
			return cs
		}
		n := s + s/8
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
	mem  []byte // a dedicated mapping, as mmap returned it
	slab *slab  // nil for a dedicated mapping
	idx  int    // chunk index in slab
}

type slab struct {
	mem   []byte
	class int
	free  []int32 // free chunk indexes
	used  int
}

type allocator struct {
	mu sync.Mutex
	// The fields below are guarded by mu.
	partial [][]*slab // per class: slabs with a free chunk
	slabs   map[*slab]struct{}
	// mappedBytes counts mapped memory; outstanding counts live buffers.
	mappedBytes int64
	outstanding int64
	closed      bool
}

func newAllocator() *allocator {
	return &allocator{partial: make([][]*slab, len(classSizes)), slabs: make(map[*slab]struct{})}
}

// alloc returns a buffer of n bytes (its charge is cap(b)).
func (a *allocator) alloc(n int) (*buffer, error) {
	c := classOf(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("blob: cache closed")
	}
	if c < 0 {
		mem, err := offheap.Map(n)
		if err != nil {
			return nil, fmt.Errorf("blob: blob cache: %w", err)
		}
		a.mappedBytes += int64(len(mem))
		a.outstanding++
		return &buffer{b: mem[:n:n], mem: mem}, nil
	}
	var s *slab
	if p := a.partial[c]; len(p) > 0 {
		s = p[len(p)-1]
	} else {
		size := classSizes[c]
		mem, err := offheap.MapAligned(slabSize)
		if err != nil {
			return nil, fmt.Errorf("blob: blob cache: %w", err)
		}
		s = &slab{mem: mem, class: c}
		for i := len(mem)/size - 1; i >= 0; i-- {
			s.free = append(s.free, int32(i))
		}
		a.slabs[s] = struct{}{}
		a.partial[c] = append(a.partial[c], s)
		a.mappedBytes += int64(len(mem))
	}
	i := int(s.free[len(s.free)-1])
	s.free = s.free[:len(s.free)-1]
	s.used++
	if len(s.free) == 0 {
		a.partial[c] = a.partial[c][:len(a.partial[c])-1]
	}
	a.outstanding++
	size := classSizes[c]
	chunk := s.mem[i*size : (i+1)*size : (i+1)*size]
	return &buffer{b: chunk[:n], slab: s, idx: i}, nil
}

// free returns buf's memory. buf must not be used afterwards.
func (a *allocator) free(buf *buffer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outstanding--
	if buf.slab == nil {
		a.mappedBytes -= int64(len(buf.mem))
		offheap.Unmap(buf.mem)
		buf.b, buf.mem = nil, nil
		return
	}
	s := buf.slab
	idx := buf.idx
	buf.b = nil
	if len(s.free) == 0 {
		a.partial[s.class] = append(a.partial[s.class], s)
	}
	s.free = append(s.free, int32(idx))
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
		delete(a.slabs, s)
		a.mappedBytes -= int64(len(s.mem))
		offheap.Unmap(s.mem)
		s.mem = nil
	}
}

// stats returns the mapped bytes and the number of live buffers.
func (a *allocator) stats() (mappedBytes, outstanding int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mappedBytes, a.outstanding
}

// close unmaps every slab. It returns an error, and unmaps nothing, if
// buffers are still outstanding: unmapping memory that a handle still
// views would turn a leak into a crash.
func (a *allocator) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.outstanding != 0 {
		return fmt.Errorf("blob: cache closed with %d buffers still referenced (leaked handles)", a.outstanding)
	}
	for s := range a.slabs {
		offheap.Unmap(s.mem)
		a.mappedBytes -= int64(len(s.mem))
	}
	a.slabs = nil
	a.closed = true
	return nil
}
