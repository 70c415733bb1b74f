//go:build !invariants && !race

package cache

const poisonFreed = false
