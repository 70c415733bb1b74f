package snapstore

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// fileSnapshot writes snapshot id of s into a raft FileSnapshotStore under
// base, as an older version of cairn kept it.
func fileSnapshot(t *testing.T, s *Store, id, base string) *raft.SnapshotMeta {
	t.Helper()
	fss, err := raft.NewFileSnapshotStore(base, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	meta, rc, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sink, err := fss.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return meta
}

// TestImportFileSnapshots: the newest FileSnapshotStore snapshot is
// imported once (verified, as a checkpoint directory) and the old store
// removed; a repeat (a crash before the removal) only removes it.
func TestImportFileSnapshots(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	f.put(t, "a", 1000, 200)
	src := openStore(t, filepath.Join(base, "src"), 2)
	meta := fileSnapshot(t, src, snapshot(t, src, f), filepath.Join(base, "raft"))

	s := openStore(t, filepath.Join(base, "snaps"), 2)
	id, err := s.ImportFileSnapshots(filepath.Join(base, "raft"))
	if err != nil || id == "" {
		t.Fatalf("import = %q, %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(base, "raft", "snapshots")); !os.IsNotExist(err) {
		t.Fatalf("old snapshots not removed: %v", err)
	}
	metas, _ := s.List()
	if len(metas) != 1 || metas[0].Index != meta.Index || metas[0].Term != meta.Term {
		t.Fatalf("List = %v", metas)
	}
	if ai, err := s.AppliedIndex(id); err != nil || ai != f.index {
		t.Fatalf("AppliedIndex = %d, %v; want %d", ai, err, f.index)
	}
	other := openFSM(t, filepath.Join(base, "other"), s)
	restore(t, s, other, id)
	if checksum(t, other.FSM) != checksum(t, f.FSM) {
		t.Fatal("the imported snapshot does not hold the state")
	}

	// A crash before the removal: the next start only removes.
	fileSnapshot(t, s, metas[0].ID, filepath.Join(base, "raft"))
	if id, err := s.ImportFileSnapshots(filepath.Join(base, "raft")); err != nil || id != "" {
		t.Fatalf("second import = %q, %v; want nothing imported", id, err)
	}
	if _, err := os.Stat(filepath.Join(base, "raft", "snapshots")); !os.IsNotExist(err) {
		t.Fatalf("old snapshots not removed: %v", err)
	}
	// Nothing to import.
	if id, err := s.ImportFileSnapshots(filepath.Join(base, "nothing")); err != nil || id != "" {
		t.Fatalf("import from nothing = %q, %v", id, err)
	}
}
