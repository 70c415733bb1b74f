//go:build !unix

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

const lockFileName = "LOCK"

// lockDataDir creates the lock file; without flock it cannot exclude
// another process (the raft-boltdb store's own lock still does).
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: data directory %s is not writable: %w", dir, err)
	}
	return f, nil
}
