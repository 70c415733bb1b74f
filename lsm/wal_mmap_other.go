//go:build !linux

package lsm

import "github.com/cairnkv/cairn/lsm/vfs"

// newWALFile returns f: appending through a mapping (wal_mmap_linux.go) is
// Linux-only; elsewhere WAL appends use write(2).
func newWALFile(f vfs.File, o *Options) vfs.File { return f }

// finishFileWAL does nothing: WALs are written with write(2).
func finishFileWAL(f vfs.File) error { return nil }
