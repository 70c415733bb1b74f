package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/hashicorp/raft"
)

func TestDepartureEncoding(t *testing.T) {
	for _, tc := range []struct {
		id  string
		inc uint64
	}{{"n1", 1}, {"a-very.long_id", 1<<64 - 1}, {"x", 0}} {
		id, inc, ok := decodeDeparture(encodeDeparture(tc.id, tc.inc))
		if !ok || id != tc.id || inc != tc.inc {
			t.Errorf("round trip of %q %d: %q %d %v", tc.id, tc.inc, id, inc, ok)
		}
	}
	good := encodeDeparture("n1", 300)
	for n := range len(good) {
		if _, _, ok := decodeDeparture(good[:n]); ok {
			t.Errorf("prefix of %d bytes decoded", n)
		}
	}
	if _, _, ok := decodeDeparture([]byte("something else")); ok {
		t.Error("foreign extensions decoded")
	}
}

// A departure record entry is recorded and reaches the engine's FSM as a
// no-op with the same index (so its applied index moves over it); other
// entries pass unchanged, and the caller's slice is not modified.
func TestTakeDepartures(t *testing.T) {
	dir := t.TempDir()
	d, err := loadDeparted(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &raftFSM{departed: d}
	cmd := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}
	dep := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Extensions: encodeDeparture("n4", 42)}
	conf := &raft.Log{Index: 3, Term: 1, Type: raft.LogConfiguration, Extensions: encodeDeparture("n5", 1)}
	in := []*raft.Log{cmd, dep, conf}
	out := r.takeDepartures(in)
	if in[1] != dep || out[0] != cmd || out[2] != conf || out[1].Type != raft.LogNoop || out[1].Index != 2 || out[1].Term != 1 {
		t.Fatalf("takeDepartures: in %v, out %v", in, out)
	}
	if inc, ok := d.get("n4"); !ok || inc != 42 {
		t.Fatalf("record of n4: %d %v", inc, ok)
	}
	if _, ok := d.get("n5"); ok {
		t.Fatal("a configuration entry's extensions were taken for a record")
	}
	// A lower incarnation does not lower the record; the file keeps it.
	r.takeDepartures([]*raft.Log{{Index: 4, Type: raft.LogCommand, Extensions: encodeDeparture("n4", 7)}})
	d2, err := loadDeparted(dir)
	if err != nil {
		t.Fatal(err)
	}
	if inc, ok := d2.get("n4"); !ok || inc != 42 {
		t.Fatalf("reloaded record of n4: %d %v", inc, ok)
	}
}

func TestDepartedSetBounded(t *testing.T) {
	d := &departedSet{} // no file
	d.mu.m = map[string]uint64{}
	for i := range maxDeparted + 10 {
		if err := d.record(fmt.Sprintf("n%d", i), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	snap := d.snapshot()
	if len(snap) != maxDeparted {
		t.Fatalf("%d records kept, want %d", len(snap), maxDeparted)
	}
	if _, ok := snap["n9"]; ok {
		t.Fatal("an oldest record was kept")
	}
	if _, ok := snap[raft.ServerID(fmt.Sprintf("n%d", maxDeparted+9))]; !ok {
		t.Fatal("the newest record was dropped")
	}
}

func TestNextIncarnation(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000)
	a, err := nextIncarnation(dir, now)
	if err != nil || a != 1_000_000 {
		t.Fatalf("first: %d %v", a, err)
	}
	// The clock went back: still larger than the last run's.
	b, err := nextIncarnation(dir, now.Add(-time.Hour))
	if err != nil || b != a+1 {
		t.Fatalf("after the clock went back: %d %v", b, err)
	}
	c, err := nextIncarnation(dir, now.Add(time.Hour))
	if err != nil || c != uint64(now.Add(time.Hour).UnixMilli()) {
		t.Fatalf("later: %d %v", c, err)
	}
}

// A node that leaves gracefully is removed with a departure record that
// every node has (and keeps over a restart); a later run of it (a newer
// incarnation) is added back.
func TestDepartedServerRejoins(t *testing.T) {
	tc := newTestCluster(t)
	nodes, n4 := formWithN4(t, tc)
	inc := n4.incarnation
	leaveN4(t, tc, n4)
	waitFor(t, 10*time.Second, "every node to have n4's departure record", func() bool {
		for _, n := range nodes {
			if got, ok := n.fsm.departed.get("n4"); !ok || got != inc {
				return false
			}
		}
		return true
	})
	assertSameState(t, nodes)

	// A restarted follower keeps the record.
	var follower *Node
	for _, n := range nodes {
		if !n.IsLeader() {
			follower = n
			break
		}
	}
	if err := follower.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	follower = tc.restart(follower.ID())
	if got, ok := follower.fsm.departed.get("n4"); !ok || got != inc {
		t.Fatalf("after a restart, the record of n4 is %d %v, want %d", got, ok, inc)
	}

	// n4's next run has a newer incarnation and is added again.
	n4 = tc.restart("n4")
	if n4.incarnation <= inc {
		t.Fatalf("incarnation %d after %d", n4.incarnation, inc)
	}
	waitFor(t, 20*time.Second, "n4 added again", func() bool { return slices.Contains(configIDs(tc.leader()), "n4") })
}

// The bug the departure records fix, staged: a leader whose gossip view is
// stale (it shows a server that left and was removed as alive, with the
// incarnation it left with) does not add it back. Without the record it
// did, as a non-voter, until the leave reached its gossip. The same view
// with a newer incarnation (the server restarted) adds it.
func TestStaleGossipViewDoesNotReaddDeparted(t *testing.T) {
	tc := newTestCluster(t)
	_, n4 := formWithN4(t, tc)
	leaveN4(t, tc, n4)
	leader := tc.leader()
	waitFor(t, 10*time.Second, "the leader to have n4's record", func() bool {
		_, ok := leader.fsm.departed.get("n4")
		return ok
	})

	stale := func(incarnation uint64) func() []membership.Member {
		return func() []membership.Member {
			ms := leader.disc.Members()
			for i := range ms {
				if ms[i].ID == "n4" {
					ms[i].State, ms[i].Leaving, ms[i].Incarnation = membership.StateAlive, false, incarnation
				}
			}
			return ms
		}
	}
	view := stale(n4.incarnation)
	leader.testGossipView.Store(&view)
	rounds := leader.reconcileRounds.Load()
	waitFor(t, 20*time.Second, "5 reconcile rounds on the stale view", func() bool {
		return leader.reconcileRounds.Load() >= rounds+5 || !leader.IsLeader()
	})
	if !leader.IsLeader() {
		t.Skip("leadership moved during the test (a loaded machine); the check needs one leader")
	}
	if ids := configIDs(leader); slices.Contains(ids, "n4") {
		t.Fatalf("a stale gossip view re-added n4, which left: %v", ids)
	}

	// A newer incarnation is a rejoin: added.
	rejoined := stale(n4.incarnation + 1) // a new variable: reconcile reads the old one
	leader.testGossipView.Store(&rejoined)
	waitFor(t, 20*time.Second, "n4 added on a newer incarnation", func() bool { return slices.Contains(configIDs(tc.leader()), "n4") })
	leader.testGossipView.Store(nil)
}

// formWithN4 forms a 3-node cluster (with a grace period that outlasts the
// test, so that a server is removed only for leaving) and adds n4 as a
// non-voter.
func formWithN4(t *testing.T, tc *testCluster) (nodes []*Node, n4 *Node) {
	t.Helper()
	nodes = tc.formCluster(3, func(c *Config) { c.Policy.FailedGracePeriod = time.Hour })
	cfg := testConfig(t, "n4")
	cfg.Join = []string{nodes[0].GossipAddr()}
	cfg.NonVoter = true
	cfg.Policy.FailedGracePeriod = time.Hour
	n4 = tc.start(cfg, nil)
	waitFor(t, 20*time.Second, "n4 added", func() bool { return slices.Contains(configIDs(tc.leader()), "n4") })
	return nodes, n4
}

// leaveN4 stops n4 gracefully and waits until it is removed for leaving.
// If gossip lost its leave announcement at the leader (memberlist's
// broadcasts are UDP, and nodes classify a leave whose announcement they
// missed as a failure), the leader sees it failed and, with the long grace
// period, keeps it: the test is skipped then.
func leaveN4(t *testing.T, tc *testCluster, n4 *Node) {
	t.Helper()
	if err := n4.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var deadSince time.Time
	waitFor(t, 20*time.Second, "n4 removed", func() bool {
		l := tc.leader()
		if !slices.Contains(configIDs(l), "n4") {
			return true
		}
		if m, ok := l.member("n4"); ok && m.State == membership.StateDead {
			if deadSince.IsZero() {
				deadSince = time.Now()
			} else if time.Since(deadSince) > 5*time.Second {
				t.Skipf("the leader %s saw n4 fail, not leave (gossip lost the leave announcement)", l.ID())
			}
		}
		return false
	})
}
