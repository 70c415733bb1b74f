//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package vfs

import (
	"os"
	"syscall"
)

// errWouldBlock is the errno flock returns for a lock held elsewhere.
var errWouldBlock error = syscall.EWOULDBLOCK

// errNotDir is the errno for a path that is not a directory.
var errNotDir error = syscall.ENOTDIR

func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
