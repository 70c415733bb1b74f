// Package offheap maps anonymous memory outside the Go heap, for the
// engine's large, long-lived buffers: memtable arenas, block and blob cache
// slabs. The garbage collector neither scans nor counts it, so it costs no
// GC headroom (a heap buffer costs up to twice its size in RSS at the
// default GOGC), and it is returned to the system when unmapped, not when
// the collector next runs. The caller frees what it maps, exactly once.
package offheap

// HugePageBytes is the size of a transparent huge page on the systems that
// have them (x86-64 and arm64 with 4 KiB base pages).
const HugePageBytes = 2 << 20
