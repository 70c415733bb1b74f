package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// TestStatusCommitIndexWithoutLeader restarts a follower of a 3-node
// cluster alone: with no leader to tell it the commit index, raft reports
// 0, and Status must report the applied index instead (a lower bound,
// flagged), never 0.
func TestStatusCommitIndexWithoutLeader(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	leader := tc.leader()
	for i := range 30 {
		put(t, tc.kv(leader), fmt.Sprintf("k%03d", i), "v")
	}
	want := leader.fsm.AppliedIndex()
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	waitFor(t, 10*time.Second, "the follower to apply every write", func() bool { return follower.fsm.AppliedIndex() >= want })
	// The leader's own Status is exact.
	st := leader.Status()
	if st.GetCommitIndex() < want || st.GetCommitIndexIsLowerBound() {
		t.Fatalf("leader: commit %d (lower bound %v), applied %d", st.GetCommitIndex(), st.GetCommitIndexIsLowerBound(), want)
	}
	for _, n := range nodes {
		if err := n.kill(); err != nil {
			t.Fatal(err)
		}
	}

	n := tc.restart(follower.ID())
	st, err := tc.admin(n).Status(ctxTimeout(t, 5*time.Second), &cairnpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetLeaderId() != "" {
		t.Fatalf("the restarted follower knows a leader (%s) while the others are down", st.GetLeaderId())
	}
	if st.GetAppliedIndex() < want {
		t.Fatalf("applied index %d after restart, want >= %d", st.GetAppliedIndex(), want)
	}
	if st.GetCommitIndex() != st.GetAppliedIndex() || !st.GetCommitIndexIsLowerBound() {
		t.Fatalf("commit index %d (lower bound %v), applied %d: want the applied index, flagged as a lower bound",
			st.GetCommitIndex(), st.GetCommitIndexIsLowerBound(), st.GetAppliedIndex())
	}
	if st.GetLastLeaderContactMs() != -1 {
		t.Fatalf("last leader contact %d ms, want -1 (none since start)", st.GetLastLeaderContactMs())
	}
}

// TestMembersLastContact: the leader's own row reports no contact (it
// used to show the age of the leader's latest poll), and the followers'
// rows the time since they last heard from the leader, which heartbeats
// keep far below the poll interval plus the poll's age.
func TestMembersLastContact(t *testing.T) {
	tc := newTestCluster(t)
	tc.formCluster(3, nil)
	leader := tc.leader()
	waitFor(t, 10*time.Second, "every member healthy", func() bool {
		ms, err := tc.admin(leader).Members(ctxTimeout(t, time.Second), &cairnpb.MembersRequest{})
		if err != nil {
			return false
		}
		healthy := 0
		for _, m := range ms.GetMembers() {
			if m.GetHealthy() {
				healthy++
			}
		}
		return healthy == 3
	})
	for range 20 {
		ms, err := tc.admin(leader).Members(ctxTimeout(t, time.Second), &cairnpb.MembersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms.GetMembers() {
			if m.GetLeader() && m.GetLastContactMs() != 0 {
				t.Fatalf("leader's row: last contact %d ms, want 0", m.GetLastContactMs())
			}
			if !m.GetLeader() && m.GetLastContactMs() > 2000 {
				t.Fatalf("follower %s: last contact %d ms", m.GetId(), m.GetLastContactMs())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A follower reports its own contact with the leader.
	for _, n := range tc.live() {
		st := n.Status()
		if n == leader && st.GetLastLeaderContactMs() != 0 {
			t.Fatalf("leader: last leader contact %d", st.GetLastLeaderContactMs())
		}
		if n != leader && (st.GetLastLeaderContactMs() < 0 || st.GetLastLeaderContactMs() > 2000) {
			t.Fatalf("follower %s: last leader contact %d", n.ID(), st.GetLastLeaderContactMs())
		}
	}
}

// TestPeerBackoffResetWhenGossipSeesIt: a follower down long enough for
// the leader's gRPC connection to it to back off for 20s comes back; the
// leader reconnects as soon as gossip sees it, so its calls to the member
// (read confirmations) work again within seconds, not after the backoff.
func TestPeerBackoffResetWhenGossipSeesIt(t *testing.T) {
	// gRPC's backoff, made steep so that two failed attempts (about 2s)
	// reach a 20s wait; the default reaches that after about 30s down.
	old := peerConnectBackoff
	peerConnectBackoff = backoff.Config{BaseDelay: 2 * time.Second, Multiplier: 10, MaxDelay: 2 * time.Minute}
	t.Cleanup(func() { peerConnectBackoff = old })
	// Count the failed connection attempts to each address.
	var failedMu sync.Mutex
	failed := map[string]int{}
	peerDialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			failedMu.Lock()
			failed[addr]++
			failedMu.Unlock()
		}
		return c, err
	})}
	t.Cleanup(func() { peerDialOptions = nil })
	failures := func(addr string) int {
		failedMu.Lock()
		defer failedMu.Unlock()
		return failed[addr]
	}

	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	leader := tc.leader()
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	fid, addr := follower.ID(), follower.GRPCAddr()
	healthy := func() bool {
		ms, err := tc.admin(leader).Members(ctxTimeout(t, time.Second), &cairnpb.MembersRequest{})
		if err != nil {
			return false
		}
		for _, m := range ms.GetMembers() {
			if m.GetId() == fid {
				return m.GetHealthy()
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, "the follower healthy", healthy)
	before := failures(addr)
	if err := follower.kill(); err != nil {
		t.Fatal(err)
	}
	// Wait for two failed connection attempts: the leader's polls find
	// the connection broken and the first attempt fails (backoff 2s),
	// then gRPC's retry fails (backoff 20s).
	// The leader's own calls to the follower (read confirmations,
	// verification) use the connection; a call here stands for them.
	kick := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		cairnpb.NewReadIndexClient(leader.fwd.mustConn(t, addr)).ProvePeer(ctx, &cairnpb.ProvePeerRequest{Challenge: make([]byte, 32)})
	}
	waitFor(t, 15*time.Second, "two failed connection attempts to the dead follower", func() bool {
		kick()
		return failures(addr) >= before+2
	})
	if st := leader.fwd.mustConn(t, addr).GetState(); st != connectivity.TransientFailure {
		t.Fatalf("the leader's connection to the dead follower is %v", st)
	}
	waitFor(t, 10*time.Second, "the follower unhealthy", func() bool { return !healthy() })

	back := time.Now()
	tc.restart(fid)
	waitFor(t, 10*time.Second, "the leader's gossip to see the follower alive", func() bool {
		m, ok := leader.member(fid)
		return ok && m.State == membership.StateAlive
	})
	seen := time.Now()
	// Generous, and still well below the 20s backoff.
	waitFor(t, 10*time.Second, "the follower healthy again, and the leader's gRPC connection to it ready", func() bool {
		kick()
		return healthy() && leader.fwd.mustConn(t, addr).GetState() == connectivity.Ready
	})
	t.Logf("healthy %v after gossip saw the follower (%v after the restart)", time.Since(seen).Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
}

func (f *forwarder) mustConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := f.conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
