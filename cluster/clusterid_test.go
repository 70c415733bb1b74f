package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
)

// waitClusterID waits until every node has one cluster ID, the same, and
// returns it.
func waitClusterID(t *testing.T, nodes ...*Node) string {
	t.Helper()
	var id string
	waitFor(t, 15*time.Second, "one cluster ID on every node", func() bool {
		id = nodes[0].ClusterID()
		for _, n := range nodes {
			if n.ClusterID() == "" || n.ClusterID() != id {
				return false
			}
		}
		return true
	})
	return id
}

// TestClusterID: a new cluster gets one ID through raft; every node keeps
// it in its data directory and gossips it, keeps it across a restart, and
// a node that joins with an empty directory adopts it, also when it
// catches up from a snapshot that compacted the entry deciding it.
func TestClusterID(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(c *Config) {
		c.SnapshotThreshold = 32
		c.TrailingLogs = 8
		c.SnapshotInterval = time.Hour // snapshots only when asked
	})
	id := waitClusterID(t, nodes...)
	if !validClusterID(id) {
		t.Fatalf("cluster ID %q", id)
	}
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, clusterIDFileName))
		if err != nil || strings.TrimSpace(string(b)) != id {
			t.Fatalf("%s: cluster-id file %q, %v; want %s", n.ID(), b, err, id)
		}
	}
	leader := tc.leader()
	for _, n := range nodes {
		waitFor(t, 10*time.Second, "the leader's gossip to carry "+n.ID()+"'s cluster ID", func() bool {
			m, ok := leader.member(n.ID())
			return ok && m.ClusterID == id
		})
	}
	// The entry that decided it leaves the log.
	for i := range 100 {
		put(t, tc.kv(leader), fmt.Sprintf("k%03d", i), "v")
	}
	for _, n := range tc.live() {
		if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := leader.logs.FirstIndex(); first <= 3 {
		t.Fatalf("the log still starts at %d", first)
	}
	cfg := testConfig(t, "n4")
	cfg.Join = []string{leader.GossipAddr()}
	n4 := tc.start(cfg, nil)
	waitClusterID(t, append(nodes, n4)...)
	if n4.fsm.restores.Load() == 0 {
		t.Fatalf("n4 caught up without a snapshot: the test does not test adoption from gossip")
	}
	// A restart keeps the ID.
	victim := otherThan(nodes, leader)
	if err := victim.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tc.restart(victim.ID()).ClusterID(); got != id {
		t.Fatalf("restarted %s: cluster ID %q, want %s", victim.ID(), got, id)
	}
}

// TestClusterIdentityRefusesForeignNode ([ops2] 1): the node of a
// one-node cluster T, restarted with --join pointing at cluster A, is
// refused on both sides: it stops with an error naming both IDs, A never
// adds it, and its data is intact. Before cluster IDs, A's leader added it
// as a non-voter and replaced its data with a snapshot of A.
func TestClusterIdentityRefusesForeignNode(t *testing.T) {
	tcA := newTestCluster(t)
	nodesA := tcA.formCluster(3, nil)
	idA := waitClusterID(t, nodesA...)
	leaderA := tcA.leader()

	tcT := newTestCluster(t)
	cfg := testConfig(t, "t1")
	cfg.BootstrapExpect = 1
	t1 := tcT.start(cfg, nil)
	tcT.waitReady([]*Node{t1}, 1)
	put(t, tcT.kv(t1), "t-key", "t-value")
	idT := waitClusterID(t, t1)
	if idT == idA {
		t.Fatal("two clusters with one ID")
	}
	if err := t1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	cfg = tcT.cfgs["t1"]
	cfg.BootstrapExpect = 0
	cfg.Join = []string{leaderA.GossipAddr()}
	t1 = tcT.start(cfg, nil)
	select {
	case err := <-t1.Failed():
		if !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), idT) {
			t.Fatalf("t1 failed with %v; want both cluster IDs named", err)
		}
	case <-time.After(15 * time.Second * waitSlack):
		t.Fatalf("t1 did not refuse to join cluster A; A's configuration: %v", configIDs(leaderA))
	}
	rounds := leaderA.reconcileRounds.Load()
	waitFor(t, 10*time.Second, "20 reconcile rounds on A", func() bool { return leaderA.reconcileRounds.Load() >= rounds+20 })
	if ids := configIDs(leaderA); slices.Contains(ids, "t1") {
		t.Fatalf("A added t1: %v", ids)
	}
	if _, ok := leaderA.member("t1"); ok {
		if m, _ := leaderA.member("t1"); m.State == membership.StateAlive {
			t.Fatalf("A's gossip has t1 alive: %+v", m)
		}
	}
	if err := t1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// t1's data: its own cluster, its own key.
	cfg.Join = nil
	t1 = tcT.start(cfg, nil)
	tcT.waitReady([]*Node{t1}, 1)
	if got := get(t, tcT.kv(t1), "t-key", cairnpb.Consistency_LINEARIZABLE); string(got.GetKv().GetValue()) != "t-value" {
		t.Fatalf("t1's data after the attempt: %v", got)
	}
	if t1.ClusterID() != idT {
		t.Fatalf("t1's cluster ID %q, want %s", t1.ClusterID(), idT)
	}
}

// TestDuplicateIDRefused ([ops2] 6): a second node started with the ID of
// a running member is refused: it stops with an error naming the ID and
// the other node's address, while the member it copies and the cluster go
// on.
func TestDuplicateIDRefused(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	waitClusterID(t, nodes...)
	leader := tc.leader()
	orig := otherThan(nodes, leader)

	tcDup := newTestCluster(t)
	cfg := testConfig(t, orig.ID())
	cfg.Join = []string{leader.GossipAddr()}
	dup := tcDup.start(cfg, nil)
	select {
	case err := <-dup.Failed():
		if !strings.Contains(err.Error(), orig.ID()) || !strings.Contains(err.Error(), orig.GossipAddr()) {
			t.Fatalf("the duplicate failed with %v; want the ID and the other node's address", err)
		}
	case <-time.After(15 * time.Second * waitSlack):
		t.Fatal("the duplicate did not stop")
	}
	if err := dup.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-orig.Failed():
		t.Fatalf("the original %s failed: %v", orig.ID(), err)
	default:
	}
	if ids := configIDs(leader); !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
		t.Fatalf("configuration %v", ids)
	}
	m, ok := leader.member(orig.ID())
	if !ok || m.State != membership.StateAlive || m.GRPCAddr != orig.GRPCAddr() {
		t.Fatalf("the leader's gossip has %s as %+v", orig.ID(), m)
	}
	put(t, tc.kv(leader), "after-duplicate", "v")
}
