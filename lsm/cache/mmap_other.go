//go:build !unix

package cache

// Without mmap the cache's memory comes from the Go heap.
func mmapBytes(n int) ([]byte, error) { return make([]byte, n), nil }

func mmapSlab() ([]byte, error) { return make([]byte, slabSize), nil }

func munmapBytes([]byte) {}
