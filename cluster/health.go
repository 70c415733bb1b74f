package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultReadyMaxLag is Config.ReadyMaxLag's default: about what a
// follower applies in one or two of the leader's AppendEntries batches
// (raft sends up to 1024 entries per batch).
const DefaultReadyMaxLag = 2048

// healthInterval is how often healthLoop refreshes the status that gRPC
// health Watch streams report.
const healthInterval = time.Second

// readinessTimeout bounds a follower's question to the leader.
const readinessTimeout = time.Second

// Readiness says whether a node should take traffic.
type Readiness struct {
	Ready bool
	// Reason explains a node that is not ready ("" when it is).
	Reason string
	// Applied is the node's applied index; LeaderCommit the leader's
	// commit index as the node learned it (0 if it could not).
	Applied, LeaderCommit uint64
}

// Readiness reports whether the node knows a leader and has applied the
// log to within Config.ReadyMaxLag entries of the leader's commit index.
//
// A follower asks the leader for its commit index (Cluster.Status): its
// own raft commit index is no measure of being caught up, since raft
// reports 0 after a restart until the leader makes contact, and then at
// most the follower's last log index, however far behind the leader's log
// that is. A leader is ready once it has committed the barrier of its term
// (before that its commit index may miss entries earlier leaders
// committed).
func (n *Node) Readiness(ctx context.Context) Readiness {
	if n.raft == nil {
		return Readiness{Reason: "not started"}
	}
	applied := n.fsm.AppliedIndex()
	r := Readiness{Applied: applied}
	state := n.raft.State()
	leaderID, leaderAddr := n.Leader()
	switch {
	case state == raft.Shutdown:
		r.Reason = "raft is shut down"
		return r
	case leaderID == "":
		r.Reason = "no leader known"
		return r
	case state == raft.Leader:
		term := n.raft.CurrentTerm()
		if n.readyTerm.Load() != term {
			r.Reason = fmt.Sprintf("leader of term %d has not committed its barrier yet", term)
			return r
		}
		r.LeaderCommit = n.raft.CommitIndex()
	case leaderAddr == "":
		r.Reason = fmt.Sprintf("leader %s's gRPC address is not known yet", leaderID)
		return r
	default:
		ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
		defer cancel()
		st, err := n.peerStatus(ctx, leaderID, leaderAddr)
		if err != nil {
			r.Reason = fmt.Sprintf("asking leader %s for its commit index: %v", leaderID, err)
			return r
		}
		if st.GetState() != cairnpb.RaftState_LEADER {
			r.Reason = fmt.Sprintf("%s is no longer the leader", leaderID)
			return r
		}
		r.LeaderCommit = st.GetCommitIndex()
	}
	if r.LeaderCommit > applied+n.cfg.ReadyMaxLag {
		r.Reason = fmt.Sprintf("applied index %d is %d behind the leader's commit index %d (at most %d allowed)",
			applied, r.LeaderCommit-applied, r.LeaderCommit, n.cfg.ReadyMaxLag)
		return r
	}
	r.Ready = true
	return r
}

// healthService is the standard gRPC health service whose overall status
// (service "") means Readiness: Check computes it when asked, healthLoop
// keeps the status Watch streams see up to date. The named services (KV,
// Cluster) are SERVING while the node runs; after Shutdown began, all are
// NOT_SERVING.
type healthService struct {
	*health.Server
	n *Node
}

func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() != "" {
		return h.Server.Check(ctx, req)
	}
	if h.stopping(ctx) {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: servingStatus(h.n.Readiness(ctx))}, nil
}

// stopping reports whether Shutdown turned the health service off.
func (h *healthService) stopping(ctx context.Context) bool {
	r, err := h.Server.Check(ctx, &healthpb.HealthCheckRequest{Service: cairnpb.KV_ServiceDesc.ServiceName})
	return err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING
}

func servingStatus(r Readiness) healthpb.HealthCheckResponse_ServingStatus {
	if r.Ready {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// healthLoop sets the overall health status from Readiness every
// healthInterval until the node stops, and logs when readiness changes.
func (n *Node) healthLoop(h *healthService) {
	defer n.wg.Done()
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	wasReady, first := false, true
	for {
		r := n.Readiness(n.ctx)
		if n.ctx.Err() != nil {
			return
		}
		if !h.stopping(n.ctx) {
			h.SetServingStatus("", servingStatus(r))
		}
		if r.Ready != wasReady || first {
			if r.Ready {
				n.log.Info("cluster: ready", "applied_index", r.Applied, "leader_commit_index", r.LeaderCommit)
			} else {
				n.log.Info("cluster: not ready", "why", r.Reason)
			}
			wasReady, first = r.Ready, false
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}
