//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package vfs

import (
	"errors"
	"os"
)

// On platforms without flock(2), Lock relies on the in-process registry only:
// it does not exclude other processes.

var errWouldBlock = errors.New("resource temporarily unavailable")

var errNotDir = errors.New("not a directory")

func lockFile(*os.File) error   { return nil }
func unlockFile(*os.File) error { return nil }
