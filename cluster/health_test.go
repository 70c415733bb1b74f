package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthMeansReady checks that the gRPC health service's overall
// status is Readiness: a node that knows no leader, and a follower whose
// state machine is more than ReadyMaxLag entries behind the leader's
// commit index, are NOT_SERVING; the follower is SERVING again once it
// catches up.
func TestHealthMeansReady(t *testing.T) {
	tc := newTestCluster(t)
	const maxLag = 5
	nodes := tc.formCluster(3, func(c *Config) { c.ReadyMaxLag = maxLag })
	check := func(n *Node) healthpb.HealthCheckResponse_ServingStatus {
		r, err := healthpb.NewHealthClient(tc.conn(n)).Check(ctxTimeout(t, 5*time.Second), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("%s: health check: %v", n.ID(), err)
		}
		return r.GetStatus()
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.ID()+" SERVING", func() bool { return check(n) == healthpb.HealthCheckResponse_SERVING })
	}

	// A node that waits to be added knows no leader.
	lone := testConfig(t, "lone")
	lone.BootstrapExpect = 0
	ln := tc.start(lone, nil)
	if s := check(ln); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("node without a leader: %v", s)
	}
	if r := ln.Readiness(ctxTimeout(t, time.Second)); r.Ready || r.Reason != "no leader known" {
		t.Errorf("node without a leader: readiness %+v", r)
	}

	leader := tc.leader()
	follower := otherThan(nodes, leader)
	release := make(chan struct{})
	stall := func() { <-release }
	follower.fsm.beforeApply.Store(&stall)
	defer func() {
		if follower.fsm.beforeApply.Load() != nil {
			follower.fsm.beforeApply.Store(nil)
			close(release)
		}
	}()
	kv := tc.kv(leader)
	for i := range 4 * maxLag {
		put(t, kv, fmt.Sprintf("k%d", i), "v")
	}
	if s := check(follower); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("follower stalled %d entries behind: %v", 4*maxLag, s)
	}
	if r := follower.Readiness(ctxTimeout(t, 5*time.Second)); r.Ready || !strings.Contains(r.Reason, "behind the leader's commit index") {
		t.Errorf("stalled follower: readiness %+v", r)
	}
	if s := check(leader); s != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("leader: %v", s)
	}

	follower.fsm.beforeApply.Store(nil)
	close(release)
	waitFor(t, 10*time.Second, "the follower SERVING once caught up", func() bool {
		return check(follower) == healthpb.HealthCheckResponse_SERVING
	})
}
