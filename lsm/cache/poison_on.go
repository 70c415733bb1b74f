//go:build invariants || race

package cache

// poisonFreed fills freed chunks with poisonByte, so that a use after free
// reads garbage that fails checks loudly instead of a plausible old block.
const poisonFreed = true
