package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// errBecameLeader: while routing a request to the leader, this node
	// became the leader; route it again.
	errBecameLeader = errors.New("cluster: this node became the leader")
	// errInvalidRequest marks a malformed admin request.
	errInvalidRequest = errors.New("cluster: invalid request")
	// errWriteStalled: the request's deadline passed while its write was
	// committed but the state machine had not applied it (the engine is
	// stalled behind flushes and compactions).
	errWriteStalled = errors.New("cluster: write stalled in the storage engine past the deadline")
	// errFailedPrecondition marks an admin request the cluster's current
	// state cannot satisfy (say, a leadership transfer with no other voter).
	errFailedPrecondition = errors.New("cluster: failed precondition")
	// errTransferNotDone: a leadership transfer did not happen (raft's
	// transfer timed out, or another transfer was in progress) and
	// leadership stayed where it was. Retryable: Unavailable.
	errTransferNotDone = errors.New("cluster: leadership transfer did not complete")
)

// notLeaderError is the status of a request that needs the leader and could
// not reach it: Unavailable with a NotLeader detail naming the leader when
// known.
func notLeaderError(leaderID, leaderAddr, format string, args ...any) error {
	st := status.New(codes.Unavailable, "not leader: "+fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&cairnpb.NotLeader{LeaderId: leaderID, LeaderGrpcAddr: leaderAddr}); err == nil {
		st = d
	}
	return st.Err()
}

// toStatus maps an error of the write or read path to a gRPC status (see
// doc.go, "Errors"). A status (say from a forwarded request) passes through.
func (n *Node) toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, errTransferNotDone):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore),
		errors.Is(err, errBecameLeader):
		id, addr := n.Leader()
		if id == n.cfg.ID {
			id, addr = "", ""
		}
		return notLeaderError(id, addr, "%v", err)
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, ErrShutdown), errors.Is(err, fsm.ErrClosed):
		return status.Error(codes.Unavailable, "node shutting down")
	case errors.Is(err, fsm.ErrHalted):
		return status.Errorf(codes.Unavailable, "state machine halted: %v", err)
	case errors.Is(err, errWriteStalled):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%v", err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, fsm.ErrInvalidArgument), errors.Is(err, errInvalidRequest), errors.Is(err, lsm.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, fsm.ErrResultUnavailable):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, raft.ErrNotVoter), errors.Is(err, errFailedPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case strings.Contains(err.Error(), "wait until the configuration entry"):
		// raft.Raft.Snapshot refuses while a configuration change is
		// being applied; it has no sentinel error for it. Transient.
		return status.Errorf(codes.Unavailable, "%v", err)
	case fsm.IsCorruption(err):
		return status.Errorf(codes.DataLoss, "%v", err)
	}
	return status.Error(codes.Internal, err.Error())
}
