package snapstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnkv/cairn/fsm"
)

// TestRefreshReleasesReplacedFiles: after compaction replaced the tables
// of the retained snapshots, they pin them (Pinned > 0); Refresh replaces
// each by a snapshot of the same raft position whose files are the
// engine's current ones (nothing immutable pinned), which verifies and
// restores to the engine's state; the snapshots are as many as before,
// in the same order. A replaced ID or a checkpoint behind the snapshot is
// refused.
func TestRefreshReleasesReplacedFiles(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	live := filepath.Join(base, "fsm", "engine")
	s := openStore(t, filepath.Join(base, "snaps"), 2)
	f.put(t, "k", 400, 1000)
	older := snapshot(t, s, f)
	f.put(t, "j", 100, 1000)
	old := snapshot(t, s, f)
	behind, err := f.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Release()
	// Overwrite the same keys until compaction has replaced a table the
	// snapshot holds.
	deadline := time.Now().Add(30 * time.Second)
	var pinned int64
	for round := 0; replaced(t, s, old, live) == 0; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("compaction replaced none of the snapshot's tables after %d rounds", round)
		}
		f.put(t, "k", 400, 1000)
	}
	byID, pinned, _, err := s.Pinned(live)
	if err != nil || pinned == 0 || byID[old] == 0 {
		t.Fatalf("the snapshot holds tables the engine dropped but pins %d bytes (%v, %v)", pinned, byID, err)
	}
	oldMeta, err := s.readMeta(old)
	if err != nil {
		t.Fatal(err)
	}
	olderMeta, err := s.readMeta(older)
	if err != nil {
		t.Fatal(err)
	}

	c, err := f.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Refresh(old, c)
	if err != nil {
		t.Fatal(err)
	}
	olderID, err := s.Refresh(older, c)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.List()
	if err != nil || len(ms) != 2 || ms[0].ID != id || ms[1].ID != olderID || ms[1].Index != olderMeta.Index {
		t.Fatalf("List after Refresh = %v, %v; want %s, %s", ms, err, id, olderID)
	}
	// Against the checkpoint they were refreshed with (the engine itself
	// may have compacted again since): every file is the checkpoint's.
	if byID, pinned, _, err := s.Pinned(c.Dir()); err != nil || pinned != 0 {
		t.Fatalf("refreshed snapshots hold %d bytes that are not the checkpoint's (%v, %v)", pinned, byID, err)
	}
	if n := replaced(t, s, olderID, c.Dir()); n != 0 {
		t.Errorf("the refreshed older snapshot holds %d tables or blob files the checkpoint does not", n)
	}
	c.Release()
	if m := ms[0]; m.Index != oldMeta.Index || m.Term != oldMeta.Term || m.ConfigurationIndex != oldMeta.ConfigurationIndex {
		t.Fatalf("refreshed snapshot at %d/%d (config %d), the old one at %d/%d (config %d)",
			m.Index, m.Term, m.ConfigurationIndex, oldMeta.Index, oldMeta.Term, oldMeta.ConfigurationIndex)
	}
	if got, _ := s.AppliedIndex(id); got != f.AppliedIndex() || got <= oldMeta.AppliedIndex {
		t.Fatalf("refreshed snapshot's applied index %d; engine at %d, old snapshot at %d", got, f.AppliedIndex(), oldMeta.AppliedIndex)
	}
	if err := verifySnapshot(t, s, id, filepath.Join(base, "verify")); err != nil {
		t.Fatalf("refreshed snapshot does not verify: %v", err)
	}
	g := openFSM(t, filepath.Join(base, "other"), nil)
	restore(t, s, g, id)
	if checksum(t, g.FSM) != checksum(t, f.FSM) {
		t.Fatal("restoring the refreshed snapshot gives another state than the engine's")
	}

	if _, err := s.Refresh(old, behind); err == nil {
		t.Fatal("Refresh of a replaced snapshot ID succeeded")
	}
	if _, err := s.Refresh(id, behind); !errors.Is(err, ErrRefreshBehind) {
		t.Fatalf("Refresh with a checkpoint behind the snapshot: %v, want ErrRefreshBehind", err)
	}
	if ms, _ := s.List(); len(ms) != 2 || ms[0].ID != id {
		t.Fatalf("a refused Refresh changed the snapshots: %v", ms)
	}
}

// replaced counts the immutable files (tables, blob files) of snapshot id
// that are not the engine's (in live) any more.
func replaced(t testing.TB, s *Store, id, live string) int {
	t.Helper()
	dir := filepath.Join(s.Dir(), id, engineDirName)
	files, err := s.fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range files {
		if fsm.Immutable(name) && !sameFile(s.fs, filepath.Join(dir, name), filepath.Join(live, name)) {
			n++
		}
	}
	return n
}

// TestPinnedCountsReplacedFiles: files the engine still has but is about
// to delete (named as replaced) count as pinned where a snapshot links
// them, and not as live, before they are deleted.
func TestPinnedCountsReplacedFiles(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	live := filepath.Join(base, "fsm", "engine")
	s := openStore(t, filepath.Join(base, "snaps"), 2)
	f.put(t, "k", 400, 1000)
	id := snapshot(t, s, f)
	// A fresh snapshot pins only its own manifest (not a link).
	_, own, liveBytes, err := s.Pinned(live)
	if err != nil || own > 1<<10 || liveBytes == 0 {
		t.Fatalf("a fresh snapshot pins %d bytes of an engine of %d, %v; want its manifest only", own, liveBytes, err)
	}
	ts := tables(t, live)
	if len(ts) == 0 {
		t.Fatal("the engine has no table")
	}
	var names []string
	var size int64
	for _, p := range ts[:(len(ts)+1)/2] {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(p))
		size += fi.Size()
	}
	byID, pinned, liveAfter, err := s.Pinned(live, append(names, "999999.sst")...)
	if err != nil || pinned != own+size || byID[id] != own+size || liveAfter != liveBytes-size {
		t.Fatalf("with %v replaced (%d bytes): pinned %d (%v), live %d of %d, %v; want %d pinned, %d live",
			names, size, pinned, byID, liveAfter, liveBytes, err, own+size, liveBytes-size)
	}
}
