//go:build unix

package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFileName is the data directory's lock file.
const lockFileName = "LOCK"

// lockDataDir takes an exclusive advisory lock on dir, so that two
// processes never share a data directory. Closing the file releases it.
func lockDataDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: data directory %s is not writable: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cluster: data directory %s is locked: another process uses it", dir)
		}
		return nil, fmt.Errorf("cluster: locking data directory %s: %w", dir, err)
	}
	return f, nil
}
