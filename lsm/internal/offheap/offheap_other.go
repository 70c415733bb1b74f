//go:build !unix

package offheap

// Without mmap the memory comes from the Go heap.

func Map(n int) ([]byte, error) { return make([]byte, n), nil }

func MapAligned(n int) ([]byte, error) { return make([]byte, n), nil }

func Unmap([]byte) {}
