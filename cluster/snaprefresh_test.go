package cluster

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
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
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
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
