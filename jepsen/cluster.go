package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairnkv/cairn/client"
)

// Cluster is what the nemeses, the traffic and the recovery step need of a
// running cluster, whichever way it runs (local processes in namespaces,
// or the docker-compose cluster). Nodes are numbered 0..N-1; their raft
// IDs are "n1".."nN" in local mode.
type Cluster interface {
	// Nodes describes the nodes.
	Nodes() []NodeInfo
	// Kill sends SIGKILL to node i (Start brings it back).
	Kill(i int) error
	// Stop stops node i gracefully (SIGTERM, then SIGKILL after a while).
	Stop(i int) error
	// Start starts node i again, on its data directory.
	Start(i int) error
	// Pause (SIGSTOP) and Resume (SIGCONT) node i.
	Pause(i int) error
	Resume(i int) error
	// CanPartition reports whether Partition works here (root and
	// namespaces, or docker with nsenter).
	CanPartition() bool
	// Partition makes every pair in cut drop each other's packets (both
	// ways); it replaces the previous partition. An empty cut heals.
	Partition(cut [][2]int) error
	// Close stops every node and removes everything the cluster made.
	Close() error
}

// NodeInfo is one node's identity and addresses.
type NodeInfo struct {
	ID       string
	GRPCAddr string // as the harness dials it
	RaftAddr string // as the cluster knows it (for AddMember)
}

func endpoints(c Cluster) []string {
	var eps []string
	for _, n := range c.Nodes() {
		eps = append(eps, n.GRPCAddr)
	}
	return eps
}

// nodeIndex returns the index of the node with raft ID id, or -1.
func nodeIndex(c Cluster, id string) int {
	return slices.IndexFunc(c.Nodes(), func(n NodeInfo) bool { return n.ID == id })
}

// leader asks the nodes who leads, and returns its index (-1: none known).
// It asks each node directly (a node that lost its quorum may still name
// itself; the first answer that names a leader wins).
func leader(ctx context.Context, admin *client.Client, c Cluster) int {
	for _, n := range c.Nodes() {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := admin.Status(ctx, client.WithEndpoint(n.GRPCAddr))
		cancel()
		if err == nil && st.GetLeaderId() != "" {
			return nodeIndex(c, st.GetLeaderId())
		}
	}
	return -1
}

// waitHealthy waits until every node answers Status naming the same leader
// and has applied what that leader had committed when the wait began, or
// the timeout passes.
func waitHealthy(ctx context.Context, admin *client.Client, c Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, why := healthy(ctx, admin, c)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy after %v: %s", timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func healthy(ctx context.Context, admin *client.Client, c Cluster) (bool, string) {
	leaderID := ""
	var commit uint64
	var applied []uint64
	for _, n := range c.Nodes() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := admin.Status(sctx, client.WithEndpoint(n.GRPCAddr))
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.ID, err)
		}
		if st.GetLeaderId() == "" {
			return false, n.ID + " knows no leader"
		}
		if leaderID == "" {
			leaderID = st.GetLeaderId()
		} else if st.GetLeaderId() != leaderID {
			return false, fmt.Sprintf("%s names leader %s, others %s", n.ID, st.GetLeaderId(), leaderID)
		}
		if st.GetNodeId() == leaderID {
			commit = st.GetCommitIndex()
		}
		applied = append(applied, st.GetAppliedIndex())
	}
	for i, a := range applied {
		if a+50 < commit { // the log moves on while we ask; "caught up" within 50 entries
			return false, fmt.Sprintf("%s applied %d, leader committed %d", c.Nodes()[i].ID, a, commit)
		}
	}
	return true, ""
}
