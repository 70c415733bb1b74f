package cluster

import (
	"fmt"
	"math/rand/v2"
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
	follower := otherThan(nodes, leader)
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

// TestSnapshotSizeReported: a node reports no snapshot size before its
// first snapshot, and after it a size that holds the data written (random,
// so incompressible), close to the one raft reads when it opens the
// snapshot, and exactly that one once opened.
func TestSnapshotSizeReported(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, nil)[0]
	if size, err := n.SnapshotSize(); err != nil || size != 0 {
		t.Fatalf("before any snapshot: size %d, %v", size, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const keys, valueSize = 100, 1024
	for i := range keys {
		v := make([]byte, valueSize)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		put(t, tc.kv(n), fmt.Sprintf("s%03d", i), string(v))
	}
	if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	size, err := n.SnapshotSize()
	if err != nil {
		t.Fatal(err)
	}
	if size < keys*valueSize {
		t.Fatalf("snapshot size %d, less than the %d bytes of values written", size, keys*valueSize)
	}
	snaps, err := n.fsm.snaps.List()
	if err != nil || len(snaps) == 0 {
		t.Fatalf("listing snapshots: %v, %v", snaps, err)
	}
	meta, rc, err := n.fsm.snaps.Open(snaps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if d := size - meta.Size; d < -meta.Size/100 || d > meta.Size/100 {
		t.Fatalf("reported snapshot size %d, raft opens one of %d bytes", size, meta.Size)
	}
	if size, err = n.SnapshotSize(); err != nil || size != meta.Size {
		t.Fatalf("once opened: reported snapshot size %d (%v), raft opens one of %d bytes", size, err, meta.Size)
	}
}
