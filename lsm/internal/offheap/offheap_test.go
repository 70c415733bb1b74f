//go:build unix

package offheap

import (
	"testing"
	"unsafe"
)

// TestMapAligned: a buffer of a huge page or more starts on a huge-page
// boundary, has exactly the length asked, is zero and writable end to end,
// and unmapping it (and a smaller one) works.
func TestMapAligned(t *testing.T) {
	for _, n := range []int{1, 4096, 12345, HugePageBytes, 3*HugePageBytes + 777} {
		b, err := MapAligned(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("MapAligned(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(&b[0])); n >= HugePageBytes && p%HugePageBytes != 0 {
			t.Fatalf("MapAligned(%d) at %#x: not on a huge-page boundary", n, p)
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if b[i] != 0 {
				t.Fatalf("MapAligned(%d): byte %d is %d, not zero", n, i, b[i])
			}
		}
		for _, i := range []int{0, n / 2, n - 1} {
			b[i] = 0xa5
		}
		Unmap(b)
	}
}
