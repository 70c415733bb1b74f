package cache

import (
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/offheap"
)

// BenchmarkAllocFree compares the allocator (a chunk of a slab) with one
// mapping per block, for a 4.2 KiB block written once (as a miss's read
// writes it): the choice of alloc.go.
func BenchmarkAllocFree(b *testing.B) {
	const n = 4200
	b.Run("slab", func(b *testing.B) {
		a := newAllocator()
		for b.Loop() {
			buf, err := a.alloc(n)
			if err != nil {
				b.Fatal(err)
			}
			buf.b[0], buf.b[n-1] = 1, 1
			a.free(buf)
		}
		if err := a.close(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("mmap-per-block", func(b *testing.B) {
		for b.Loop() {
			m, err := offheap.Map(n)
			if err != nil {
				b.Fatal(err)
			}
			m[0], m[n-1] = 1, 1
			offheap.Unmap(m)
		}
	})
}
