package vfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// checkFlockConflict checks that flock on a new open file description of a
// file locked by Lock fails.
func checkFlockConflict(t *testing.T, name string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock on a second description = %v", err)
	}
}
