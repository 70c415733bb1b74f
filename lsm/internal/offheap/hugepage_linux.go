package offheap

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages for b. Best effort: a
// kernel without them, or with them off, refuses or ignores the advice,
// and b works with base pages.
func adviseHugePages(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }
