package metamorphic

import (
	"bytes"
	"testing"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestSyncedWriteSurvivesCrashOfNewDirectory: Open creates its directory
// (and missing parents). A write acknowledged with Sync right after must
// survive a power loss, which needs the new directories' entries in their
// parents to be durable, not only the files inside them.
func TestSyncedWriteSurvivesCrashOfNewDirectory(t *testing.T) {
	fs := vfs.NewMem()
	db, err := lsm.Open("/data/db", &lsm.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put([]byte("k"), []byte("v"), lsm.Sync); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = lsm.Open("/data/db", &lsm.Options{FS: crashed, ErrorIfNotExists: true})
	if err != nil {
		t.Fatalf("after a crash, the DB whose Open returned and whose synced write was acknowledged is gone: %v\nfiles:\n%s", err, crashed)
	}
	defer db.Close()
	if v, err := db.Get([]byte("k")); err != nil || !bytes.Equal(v, []byte("v")) {
		t.Fatalf("Get(k) after crash = %q, %v; want \"v\"", v, err)
	}
}

// TestCheckpointSurvivesCrash: once Checkpoint returns, the checkpoint
// must survive a power loss, including the entry of its directory in its
// parent (which Checkpoint itself created).
func TestCheckpointSurvivesCrash(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll(DBDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.SyncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	db, err := lsm.Open(DBDir, &lsm.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put([]byte("k"), []byte("v"), lsm.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("/backups/ckpt"); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	ck, err := lsm.Open("/backups/ckpt", &lsm.Options{FS: crashed, ErrorIfNotExists: true})
	if err != nil {
		t.Fatalf("after a crash, a checkpoint that Checkpoint returned is gone: %v\nfiles:\n%s", err, crashed)
	}
	defer ck.Close()
	if v, err := ck.Get([]byte("k")); err != nil || !bytes.Equal(v, []byte("v")) {
		t.Fatalf("Get(k) in the crashed checkpoint = %q, %v; want \"v\"", v, err)
	}
}
