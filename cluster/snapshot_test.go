package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// TestSnapshotCatchUpAndRestart: a follower down while the leader's log is
// truncated past it catches up through InstallSnapshot (its FSM restores
// once); restarting it, and restarting the leader that took the snapshot,
// restores nothing: the FSM resumes from its own applied index.
func TestSnapshotCatchUpAndRestart(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(c *Config) {
		c.SnapshotThreshold = 64
		c.TrailingLogs = 16
		c.SnapshotInterval = time.Hour // snapshots only when asked
		// The default log store, raft-wal: its GetLog would serve
		// entries below its first index from the open segment, and the
		// follower would catch up from the log, restoring no snapshot,
		// without firstIndexStore (logstore.go).
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

	// The follower misses 300 writes, and the leader's log keeps only the
	// last 16 entries after a snapshot.
	for i := range 300 {
		put(t, tc.kv(leader), fmt.Sprintf("b%03d", i), "while down")
	}
	// Both live nodes snapshot and trim their logs: on a loaded machine
	// leadership may move to the other one before the follower returns,
	// and it too must have only a snapshot to offer.
	for _, n := range tc.live() {
		idx, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		first, err := n.logs.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first <= follower.AppliedIndex() {
			t.Fatalf("%s: log starts at %d, follower had applied %d: no snapshot needed", n.ID(), first, follower.AppliedIndex())
		}
		t.Logf("%s: snapshot at %d, log now starts at %d", n.ID(), idx, first)
	}

	follower = tc.restart(fid)
	waitFor(t, 15*time.Second, "the follower to catch up", func() bool {
		return follower.AppliedIndex() >= leader.AppliedIndex()
	})
	if r := follower.fsm.restores.Load(); r != 1 {
		t.Fatalf("the follower restored %d snapshots, want 1", r)
	}
	got := get(t, tc.kv(follower), "b299", cairnpb.Consistency_SERIALIZABLE).GetKv()
	if string(got.GetValue()) != "while down" {
		t.Fatalf("follower: b299 = %v", got)
	}
	assertSameState(t, tc.live())

	// Restarts do not re-ingest a snapshot: not the follower's (received),
	// not the leader's (taken).
	for _, id := range []string{fid, leader.ID()} {
		if err := tc.nodes[id].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		put(t, tc.kv(tc.leader()), "after-"+id, "x")
		n := tc.restart(id)
		waitFor(t, 15*time.Second, id+" to catch up after restart", func() bool {
			return n.AppliedIndex() >= tc.leader().AppliedIndex()
		})
		if r := n.fsm.restores.Load(); r != 0 {
			t.Fatalf("%s restored %d snapshots on restart", id, r)
		}
		if got := get(t, tc.kv(n), "after-"+id, cairnpb.Consistency_SERIALIZABLE).GetKv(); string(got.GetValue()) != "x" {
			t.Fatalf("%s after restart: %v", id, got)
		}
	}
	tc.waitReady(tc.live(), 3)
	assertSameState(t, tc.live())
}
