//go:build !unix

package arenaskl

// Without mmap the arena's memory comes from the Go heap.

// SetPoisonOnRelease does nothing without mmap (see the unix version).
func SetPoisonOnRelease(on bool) bool { return false }

func allocBuffer(n int) []byte { return make([]byte, n) }

func freeBuffer([]byte) {}
