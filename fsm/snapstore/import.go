package snapstore

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ImportFileSnapshots moves snapshots of raft's FileSnapshotStore kept
// under base (in base/snapshots, on the OS file system) into s, once: if
// the FileSnapshotStore's newest snapshot is newer than s's newest, it is
// streamed into a sink of s (verified, and laid down as a checkpoint
// directory; the one full copy of the upgrade); then base/snapshots is
// removed. A crash before the removal repeats only the removal (s then
// holds a snapshot as new), a crash during the import leaves a *.tmp that
// Open reaps. It returns the ID imported, or "".
func (s *Store) ImportFileSnapshots(base string) (string, error) {
	old := filepath.Join(base, "snapshots")
	if _, err := os.Stat(old); os.IsNotExist(err) {
		return "", nil
	}
	fss, err := raft.NewFileSnapshotStoreWithLogger(base, 1, hclog.NewNullLogger())
	if err != nil {
		return "", fmt.Errorf("snapstore: opening the old snapshot store: %w", err)
	}
	metas, err := fss.List()
	if err != nil {
		return "", fmt.Errorf("snapstore: listing the old snapshots: %w", err)
	}
	mine, err := s.List()
	if err != nil {
		return "", err
	}
	imported := ""
	if len(metas) > 0 && (len(mine) == 0 || newer(metas[0], mine[0])) {
		m := metas[0]
		_, rc, err := fss.Open(m.ID) // reads and checks the whole file
		if err != nil {
			return "", fmt.Errorf("snapstore: opening old snapshot %s: %w", m.ID, err)
		}
		sink, err := s.Create(m.Version, m.Index, m.Term, m.Configuration, m.ConfigurationIndex, nil)
		if err != nil {
			rc.Close()
			return "", err
		}
		_, err = io.Copy(sink, rc)
		rc.Close()
		if err != nil {
			sink.Cancel()
			return "", fmt.Errorf("snapstore: importing old snapshot %s: %w", m.ID, err)
		}
		if err := sink.Close(); err != nil {
			return "", fmt.Errorf("snapstore: importing old snapshot %s: %w", m.ID, err)
		}
		imported = sink.ID()
		s.logf("snapstore: imported snapshot %s of raft's file store as %s", m.ID, imported)
	}
	if err := os.RemoveAll(old); err != nil {
		return imported, fmt.Errorf("snapstore: removing the old snapshots: %w", err)
	}
	if err := vfs.SyncDir(vfs.Default, base); err != nil {
		return imported, fmt.Errorf("snapstore: %w", err)
	}
	return imported, nil
}

func newer(a, b *raft.SnapshotMeta) bool {
	return a.Term > b.Term || a.Term == b.Term && a.Index > b.Index
}
