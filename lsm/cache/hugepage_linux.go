package cache

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages for b (a slab): a cold
// cache fills the whole slab, so one fault of a 2 MiB page replaces 512 of
// 4 KiB pages. A system without them (or with them off) ignores it.
func adviseHugePages(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }
