package cluster

import (
	"testing"
	"time"
)

// TestLeaderChangesAndMemberStatuses checks what the monitor reads: every
// node records the first election and a leadership transfer, a restarted
// follower records the leader it rejoins (even when the leader reaches it
// before its observer is registered), and MemberStatuses gets every
// member's Status.
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
}
