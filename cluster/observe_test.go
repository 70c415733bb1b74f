package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// TestLeaderChangesAndMemberStatuses checks what the monitor reads: every
// node records the first election and a leadership transfer, a restarted
// follower records the leader it rejoins (even when the leader reaches it
// before its observer is registered), and MemberStatuses gets every
// member's Status. On the leader, MemberStatuses also carries its own
// record of each follower's match index, and reads its own Status last, so
// that no follower's sampled commit index is above the leader's.
func TestLeaderChangesAndMemberStatuses(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	first := tc.leader()
	var next *Node
	for _, n := range nodes {
		if n != first {
			next = n
			break
		}
	}
	if err := first.transferLeadership(ctxTimeout(t, 10*time.Second), next.ID()); err != nil {
		t.Fatal(err)
	}
	tc.waitReady(nodes, 3)
	for _, n := range nodes {
		waitFor(t, 5*time.Second, n.ID()+" to record the transfer", func() bool {
			total, recent := n.LeaderChanges()
			return total >= 2 && len(recent) > 0 && recent[0].LeaderID == next.ID()
		})
	}

	follower := otherThan(nodes, next)
	if err := follower.kill(); err != nil {
		t.Fatal(err)
	}
	restarted := tc.restart(follower.ID())
	waitFor(t, 10*time.Second, "the restarted follower to record the leader", func() bool {
		total, recent := restarted.LeaderChanges()
		return total >= 1 && len(recent) >= 1 && recent[0].LeaderID == next.ID() && recent[0].Term > 0
	})

	// Once gossip has the restarted node's address, every member answers.
	waitFor(t, 10*time.Second, "every member's status", func() bool {
		sts, err := next.MemberStatuses(ctxTimeout(t, 5*time.Second))
		if err != nil || len(sts) != 3 {
			return false
		}
		for _, s := range sts {
			if s.Err != nil || s.Status.GetNodeId() != s.Member.GetId() || s.Status.GetLeaderId() != next.ID() {
				return false
			}
		}
		return true
	})

	// Writes under way while the leader asks: each sample is its own
	// node's at its own moment, and the leader's is the last.
	leaderKV := tc.kv(next)
	for i := range 20 {
		put(t, leaderKV, fmt.Sprintf("observe/%d", i), "v")
	}
	stop := make(chan struct{})
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			leaderKV.Put(ctx, &cairnpb.PutRequest{Key: fmt.Appendf(nil, "observe/w%d", i), Value: []byte("v")})
			cancel()
		}
	}()
	defer func() { close(stop); <-writing }()
	for range 20 {
		sts, err := next.MemberStatuses(ctxTimeout(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var leaderSt MemberStatus
		for _, s := range sts {
			if s.Member.GetId() == next.ID() {
				leaderSt = s
			}
		}
		if leaderSt.Status.GetState() != cairnpb.RaftState_LEADER || leaderSt.Replication != nil {
			t.Fatalf("the leader's own entry: %+v", leaderSt)
		}
		for _, s := range sts {
			if s.Member.GetId() == next.ID() || s.Err != nil {
				continue
			}
			if s.SampledAt.IsZero() || s.SampledAt.After(leaderSt.SampledAt) {
				t.Fatalf("%s sampled at %v, the leader (read last) at %v", s.Member.GetId(), s.SampledAt, leaderSt.SampledAt)
			}
			if s.Status.GetTerm() == leaderSt.Status.GetTerm() && s.Status.GetCommitIndex() > leaderSt.Status.GetCommitIndex() {
				t.Fatalf("%s reports commit index %d, above the leader's %d read after it", s.Member.GetId(), s.Status.GetCommitIndex(), leaderSt.Status.GetCommitIndex())
			}
			r := s.Replication
			if r == nil || r.Term != leaderSt.Status.GetTerm() || r.MatchIndex == 0 || r.MatchIndex > leaderSt.Status.GetLastLogIndex() || r.Since < 0 || r.Since > 5*time.Second {
				t.Fatalf("%s: the leader's view %+v (leader term %d, last index %d)", s.Member.GetId(), r, leaderSt.Status.GetTerm(), leaderSt.Status.GetLastLogIndex())
			}
		}
	}
	// A follower has no leader's view to give.
	sts, err := restarted.MemberStatuses(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts {
		if s.Replication != nil {
			t.Fatalf("a follower's MemberStatuses carries a leader's view of %s: %+v", s.Member.GetId(), s.Replication)
		}
	}
}
