package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
)

// TestSnapshotIsHardLinked: a node's snapshot is a directory of hard links
// to its engine's tables in DataDir/snapshots, not a stream copy in
// raft/snapshots.
func TestSnapshotIsHardLinked(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	for i := range 50 {
		put(t, tc.kv(n), fmt.Sprintf("k%03d", i), strings.Repeat("v", 1000))
	}
	if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, raftDirName, snapshotsDirName)); !os.IsNotExist(err) {
		t.Errorf("raft/snapshots exists (%v): snapshots still go to raft's FileSnapshotStore", err)
	}
	tables, _ := filepath.Glob(filepath.Join(cfg.DataDir, snapStoreDirName, "*", "engine", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no snapshot tables in DataDir/snapshots")
	}
	for _, p := range tables {
		a, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(filepath.Join(cfg.DataDir, fsmDirName, "engine", filepath.Base(p)))
		if err != nil || !os.SameFile(a, b) {
			t.Errorf("%s is not a hard link to the engine's table (%v)", p, err)
		}
	}
}

// TestUpgradeFromFileSnapshotStore: a data directory whose snapshots are in
// raft's FileSnapshotStore (raft/snapshots/*/state.bin) starts with the
// newest imported into the new store and the old ones removed, restores
// nothing, and the imported snapshot serves a new node (the log is
// truncated past it, so the node can only catch up by installing it).
func TestUpgradeFromFileSnapshotStore(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "old")
	cfg.BootstrapExpect = 1
	cfg.TrailingLogs = 8
	cfg.SnapshotInterval = time.Hour
	fss, err := raft.NewFileSnapshotStore(filepath.Join(cfg.DataDir, raftDirName), 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	n := tc.start(cfg, &Deps{SnapshotStore: fss})
	tc.waitReady([]*Node{n}, 1)
	for i := range 100 {
		put(t, tc.kv(n), fmt.Sprintf("k%03d", i), "before")
	}
	idx, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(cfg.DataDir, raftDirName, snapshotsDirName, "*", "state.bin")); len(m) == 0 {
		t.Fatal("the old node left no state.bin")
	}

	cfg = tc.cfgs["old"]
	cfg.BootstrapExpect = 0
	n = tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	if r := n.fsm.restores.Load(); r != 0 {
		t.Errorf("the upgraded node restored %d snapshots at start", r)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, raftDirName, snapshotsDirName)); !os.IsNotExist(err) {
		t.Errorf("raft/snapshots still exists after the upgrade (%v)", err)
	}
	metas, err := n.fsm.snaps.List()
	if err != nil || len(metas) != 1 || metas[0].Index != idx {
		t.Fatalf("snapshots after the upgrade: %v, %v; want one at %d", metas, err, idx)
	}
	put(t, tc.kv(n), "after", "upgrade")

	// A new node can only catch up from the imported snapshot.
	if first, _ := n.logs.FirstIndex(); first <= 1 {
		t.Fatalf("log starts at %d: not truncated", first)
	}
	jcfg := testConfig(t, "new")
	jcfg.Join = []string{n.GossipAddr()}
	j := tc.start(jcfg, nil)
	waitFor(t, 30*time.Second, "the new node to catch up", func() bool {
		return j.AppliedIndex() >= n.AppliedIndex()
	})
	if r := j.fsm.restores.Load(); r != 1 {
		t.Errorf("the new node restored %d snapshots, want 1", r)
	}
	if kv := get(t, tc.kv(j), "k099", cairnpb.Consistency_SERIALIZABLE).GetKv(); string(kv.GetValue()) != "before" {
		t.Fatalf("new node: k099 = %v", kv)
	}
}

// TestRefuseEngineWithoutRaftState: a data directory holding a state
// machine but no raft state (an engine extracted or copied there) refuses
// to start, instead of serving reads and failing every write.
func TestRefuseEngineWithoutRaftState(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	put(t, tc.kv(n), "k", "v")
	if err := n.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{raftDirName, snapStoreDirName} {
		if err := os.RemoveAll(filepath.Join(cfg.DataDir, d)); err != nil {
			t.Fatal(err)
		}
	}
	cfg = tc.cfgs["solo"]
	n2, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = n2.Start()
	if err == nil {
		n2.Shutdown(ctxTimeout(t, 10*time.Second))
		t.Fatal("a node with an engine and no raft state started")
	}
	if !strings.Contains(err.Error(), "no raft state") || !strings.Contains(err.Error(), "cairn-node restore") {
		t.Fatalf("Start: %v; want a clear refusal", err)
	}
}

// TestLostEngineRestoresFromLocalSnapshot: a node whose engine directory
// is gone restores its own latest snapshot at start (by hard links, not a
// copy) and replays the log after it.
func TestLostEngineRestoresFromLocalSnapshot(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	cfg.SnapshotInterval = time.Hour
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	for i := range 100 {
		put(t, tc.kv(n), fmt.Sprintf("a%03d", i), "in snapshot")
	}
	if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, tc.kv(n), fmt.Sprintf("b%03d", i), "in log")
	}
	if err := n.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, fsmDirName, "engine")); err != nil {
		t.Fatal(err)
	}
	n = tc.restart("solo")
	tc.waitReady([]*Node{n}, 1)
	if r := n.fsm.restores.Load(); r != 1 {
		t.Fatalf("restored %d snapshots at start, want 1", r)
	}
	for _, k := range []string{"a000", "a099", "b019"} {
		if kv := get(t, tc.kv(n), k, cairnpb.Consistency_LINEARIZABLE).GetKv(); kv == nil {
			t.Fatalf("%s lost", k)
		}
	}
	tables, _ := filepath.Glob(filepath.Join(cfg.DataDir, snapStoreDirName, "*", "engine", "*.sst"))
	linked := 0
	for _, p := range tables {
		a, _ := os.Stat(p)
		if b, err := os.Stat(filepath.Join(cfg.DataDir, fsmDirName, "engine", filepath.Base(p))); err == nil && os.SameFile(a, b) {
			linked++
		}
	}
	if len(tables) == 0 || linked == 0 {
		t.Fatalf("the restored engine shares none of the snapshot's %d tables", len(tables))
	}
}
