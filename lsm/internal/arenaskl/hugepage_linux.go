package arenaskl

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages for b (see allocBuffer).
// Best effort: a kernel without them, or with them off, refuses or ignores
// the advice, and the arena works with 4 KiB pages.
func adviseHugePages(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }
