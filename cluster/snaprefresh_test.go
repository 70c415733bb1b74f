package cluster

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
)

// TestRefreshedSnapshotCatchUp: a snapshot refreshed with a later
// checkpoint of the engine (its applied index beyond the snapshot's raft
// index) brings a follower that is behind the log to the same state as
// the others: raft installs it at the snapshot's index, the follower's
// state machine opens at the later applied index and skips the replayed
// entries up to it. Restarting the leader afterwards restores nothing.
func TestRefreshedSnapshotCatchUp(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(c *Config) {
		c.SnapshotThreshold = 64
		c.TrailingLogs = 16
		c.SnapshotInterval = time.Hour // snapshots only when asked
	})
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	for i := range 20 {
		put(t, tc.kv(leader), fmt.Sprintf("a%03d", i), "before")
	}
	fid := follower.ID()
	if err := follower.kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		put(t, tc.kv(leader), fmt.Sprintf("b%03d", i), "while down")
	}
	for _, n := range tc.live() {
		if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// Writes after the snapshot, then the refresh: the snapshots now hold
	// them too, at the same raft index.
	for i := range 50 {
		put(t, tc.kv(leader), fmt.Sprintf("c%03d", i), "after the snapshot")
	}
	waitFor(t, 15*time.Second, "the live nodes to apply every write", func() bool {
		for _, n := range tc.live() {
			if n.AppliedIndex() < leader.AppliedIndex() {
				return false
			}
		}
		return true
	})
	for _, n := range tc.live() {
		before, err := n.snapStore.List()
		if err != nil || len(before) == 0 {
			t.Fatalf("%s: snapshots %v, %v", n.ID(), before, err)
		}
		engineDir := filepath.Join(tc.cfgs[n.ID()].DataDir, fsmDirName, "engine")
		if !n.maybeRefreshSnapshot(n.snapStore, engineDir, 0, 0) {
			t.Fatalf("%s: the snapshot was not refreshed", n.ID())
		}
		after, err := n.snapStore.List()
		if err != nil || len(after) != 1 || after[0].ID == before[0].ID || after[0].Index != before[0].Index {
			t.Fatalf("%s: snapshots %v after the refresh (%v), %v before", n.ID(), after, err, before)
		}
		applied, err := n.snapStore.AppliedIndex(after[0].ID)
		if err != nil || applied <= after[0].Index {
			t.Fatalf("%s: refreshed snapshot at raft index %d holds applied index %d (%v): not a later state",
				n.ID(), after[0].Index, applied, err)
		}
		t.Logf("%s: snapshot at raft index %d now holds the engine at %d", n.ID(), after[0].Index, applied)
	}

	follower = tc.restart(fid)
	waitFor(t, 15*time.Second, "the follower to catch up", func() bool {
		return follower.AppliedIndex() >= leader.AppliedIndex()
	})
	if r := follower.fsm.restores.Load(); r != 1 {
		t.Fatalf("the follower restored %d snapshots, want 1", r)
	}
	for _, k := range []string{"a019", "b299", "c049"} {
		if got := get(t, tc.kv(follower), k, cairnpb.Consistency_SERIALIZABLE).GetKv(); got == nil {
			t.Fatalf("follower: %s missing after catching up", k)
		}
	}
	put(t, tc.kv(tc.leader()), "later", "x")
	waitFor(t, 15*time.Second, "the follower to apply a later write", func() bool {
		return follower.AppliedIndex() >= tc.leader().AppliedIndex()
	})
	assertSameState(t, tc.live())

	lid := tc.leader().ID()
	if err := tc.nodes[lid].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	n := tc.restart(lid)
	waitFor(t, 15*time.Second, lid+" to catch up after restart", func() bool {
		return n.AppliedIndex() >= tc.leader().AppliedIndex()
	})
	if r := n.fsm.restores.Load(); r != 0 {
		t.Fatalf("%s restored %d snapshots on restart", lid, r)
	}
	tc.waitReady(tc.live(), 3)
	assertSameState(t, tc.live())
}

// TestCompactionRefreshesSnapshotAtOnce: when compaction replaces the
// tables a retained snapshot links, the engine's report of it makes the
// node refresh the snapshot, without waiting for the periodic check (an
// hour here), so the snapshot stops pinning the replaced tables.
func TestCompactionRefreshesSnapshotAtOnce(t *testing.T) {
	saved := snapshotRefresh
	// A snapshot's own manifest (not a link) is a few hundred bytes.
	snapshotRefresh = refreshPolicy{Interval: time.Hour, Ratio: 0, MinBytes: 2 << 10}
	t.Cleanup(func() { snapshotRefresh = saved })
	tc := newTestCluster(t)
	n := tc.formCluster(1, func(c *Config) {
		c.SnapshotInterval = time.Hour // snapshots only when asked
		// Small tables, compacted early: overwrites soon replace them.
		c.Engine = &lsm.Options{
			MemTableSizeBytes:     64 << 10,
			L0CompactionThreshold: 2,
			TargetFileSizeBytes:   16 << 10,
			LBaseMaxBytes:         64 << 10,
		}
	})[0]
	// Values that do not compress: every replaced table weighs.
	value := func() string {
		b := make([]byte, 500)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return fmt.Sprintf("%x", b)
	}
	for i := range 300 {
		put(t, tc.kv(n), fmt.Sprintf("k%04d", i), value())
	}
	if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	snaps, err := n.snapStore.List()
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %v, %v; want one", snaps, err)
	}
	linked, err := filepath.Glob(filepath.Join(n.snapStore.Dir(), snaps[0].ID, "engine", "*.sst"))
	if err != nil || len(linked) == 0 {
		t.Fatalf("the snapshot links no table (%v)", err)
	}
	engineDir := filepath.Join(tc.cfgs[n.ID()].DataDir, fsmDirName, "engine")
	replaced := func() bool {
		for _, p := range linked {
			if _, err := os.Stat(filepath.Join(engineDir, filepath.Base(p))); err == nil {
				return false
			}
		}
		return true
	}
	// Overwrite the keys until the engine has replaced every table the
	// snapshot was taken with.
	deadline := time.Now().Add(60 * time.Second * waitSlack)
	for round := 0; !replaced(); round++ {
		if time.Now().After(deadline) {
			t.Fatalf("compaction has not replaced the snapshot's tables after %d rounds of overwrites", round)
		}
		for i := range 300 {
			put(t, tc.kv(n), fmt.Sprintf("k%04d", i), value())
		}
	}
	waitFor(t, 15*time.Second, "the snapshot to stop pinning replaced tables", func() bool {
		_, pinned, _, err := n.snapStore.Pinned(engineDir)
		return err == nil && pinned < snapshotRefresh.MinBytes
	})
	after, err := n.snapStore.List()
	if err != nil || len(after) != 1 || after[0].ID == snaps[0].ID || after[0].Index != snaps[0].Index {
		t.Fatalf("snapshots %v after the refresh (%v); want one replacing %v at the same index", after, err, snaps)
	}
}

// TestCompactionEventsListenerKeepsConfigured: the snapshot refresh's
// listener records replaced tables and still passes every event to the
// configured listener, flushes included (the monitor's histograms).
func TestCompactionEventsListenerKeepsConfigured(t *testing.T) {
	var flushes, compactions int
	e := newCompactionEvents()
	l := e.listener(&lsm.EventListener{
		FlushInstalled:      func(lsm.FlushInfo) { flushes++ },
		CompactionInstalled: func(lsm.CompactionInfo) { compactions++ },
	})
	if l.FlushInstalled == nil {
		t.Fatal("the configured FlushInstalled was dropped")
	}
	l.FlushInstalled(lsm.FlushInfo{})
	l.CompactionInstalled(lsm.CompactionInfo{Inputs: []lsm.TableInfo{{FileName: "000001.sst"}}})
	if flushes != 1 || compactions != 1 {
		t.Fatalf("configured listener heard %d flushes and %d compactions, want 1 and 1", flushes, compactions)
	}
	if got := e.take(); len(got) != 1 || got[0] != "000001.sst" {
		t.Fatalf("replaced tables %v, want [000001.sst]", got)
	}
	if l := e.listener(nil); l.CompactionInstalled == nil || l.FlushInstalled != nil {
		t.Fatal("without a configured listener: want only the refresh's CompactionInstalled")
	}
}
