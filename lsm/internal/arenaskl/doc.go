// Package arenaskl is the memtable's concurrent skiplist: a lock-free,
// insert-only skiplist of encoded internal keys (base.InternalCompare order)
// whose nodes, keys and values all live in one arena allocated up front, off
// the Go heap where the system has mmap (see Arena).
//
// # Why an arena
//
// A memtable holds millions of small entries. As ordinary Go objects they
// would be millions of pointers for the garbage collector to scan on every
// cycle. Here the whole list is one pointer-free []byte: nodes refer to each
// other by uint32 offsets into it, so the collector sees a single noscan
// object. The price is a fixed capacity: Add returns ErrArenaFull when the
// arena cannot take an entry, and the memtable is then rotated.
//
// # Arena layout
//
//	offset 0   1..3     4                 4+S             4+2S
//	+--------+--------+-----------------+-----------------+--------+--------+---
//	| unused | pad    | head (S bytes)  | tail (S bytes)  | node 1 | node 2 | ...
//	+--------+--------+-----------------+-----------------+--------+--------+---
//
// S is the size of a full-height node (maxHeight levels). Offset 0 is never
// allocated, so offset 0 means "no node". Every node is 4-byte aligned and is
// followed directly by its key and value (see the diagram on type node); its
// tower is truncated to its height. Allocation is a single atomic add on the
// arena's high-water mark; nothing is freed but the whole arena
// (Arena.Release), once its owner knows no one reads it any more.
//
// The arena is memory only; it is never written to disk, and its layout may
// change freely.
//
// # Concurrency
//
// Add links a node bottom-up with one CAS per level on the predecessor's next
// link, then fixes the successor's prev link (helping a lagging concurrent
// inserter first, so that back links converge). This follows the design of
// Andy Kimball's arenaskl as used by Pebble and Badger. Readers take no locks:
// they load links atomically and see an entry once it is linked at level 0.
// Levels above 0 are only shortcuts.
//
// Once all Adds have returned, the level-0 next and prev links are exact
// mirrors of each other. During concurrent Adds a prev link may briefly skip a
// node that is being linked; Iterator.Prev then skips it too.
package arenaskl
