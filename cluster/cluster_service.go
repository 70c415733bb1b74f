package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/fsm"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Version is the server's build version reported by Status.
var Version = "dev"

// backupChunkSize is the data size of one BackupChunk.
const backupChunkSize = 1 << 20

// clusterService implements cairnpb.ClusterServer.
type clusterService struct {
	cairnpb.UnimplementedClusterServer
	n *Node
}

func (s *clusterService) Status(ctx context.Context, _ *cairnpb.StatusRequest) (*cairnpb.StatusResponse, error) {
	return s.n.Status(), nil
}

// Status describes the node, as the Cluster.Status RPC does (nil before
// Start).
//
// CommitIndex is never below AppliedIndex: raft reports a commit index of 0
// after a restart until a leader tells it the real one, so until then
// Status reports the applied index instead, a lower bound (an entry is
// applied only once committed), and sets CommitIndexIsLowerBound.
func (n *Node) Status() *cairnpb.StatusResponse {
	if n.raft == nil {
		return nil
	}
	// The applied index is read before raft's commit index, so that a
	// commit index raft knows is never below it.
	applied := n.fsm.AppliedIndex()
	stats := n.raft.Stats()
	u := func(k string) uint64 {
		v, _ := strconv.ParseUint(stats[k], 10, 64)
		return v
	}
	leaderID, leaderAddr := n.Leader()
	state := n.raft.State()
	commit := u("commit_index")
	resp := &cairnpb.StatusResponse{
		NodeId:                  n.cfg.ID,
		State:                   raftState(state),
		LeaderId:                leaderID,
		LeaderGrpcAddr:          leaderAddr,
		Term:                    u("term"),
		CommitIndex:             max(commit, applied),
		CommitIndexIsLowerBound: commit < applied,
		AppliedIndex:            applied,
		LastLogIndex:            u("last_log_index"),
		LastSnapshotIndex:       u("last_snapshot_index"),
		RaftAddr:                n.raftAddr,
		GrpcAddr:                n.grpcAddr,
		Version:                 Version,
	}
	switch lc := n.raft.LastContact(); {
	case state == raft.Leader:
	case lc.IsZero():
		resp.LastLeaderContactMs = -1
	default:
		resp.LastLeaderContactMs = max(time.Since(lc).Milliseconds(), 0)
	}
	if m, err := n.fsm.Metrics(); err == nil {
		resp.Engine = fsm.MetricsProto(m)
	}
	return resp
}

func raftState(s raft.RaftState) cairnpb.RaftState {
	switch s {
	case raft.Follower:
		return cairnpb.RaftState_FOLLOWER
	case raft.Candidate:
		return cairnpb.RaftState_CANDIDATE
	case raft.Leader:
		return cairnpb.RaftState_LEADER
	case raft.Shutdown:
		return cairnpb.RaftState_SHUTDOWN
	}
	return cairnpb.RaftState_RAFT_STATE_UNSPECIFIED
}

func (s *clusterService) Members(ctx context.Context, _ *cairnpb.MembersRequest) (*cairnpb.MembersResponse, error) {
	n := s.n
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.toStatus(err)
	}
	_, leaderID := n.raft.LeaderWithID()
	var progress map[raft.ServerID]membership.ServerProgress
	if p := n.progress.Load(); p != nil && n.IsLeader() {
		progress = *p
	}
	now := n.cfg.Now()
	byID := make(map[string]*cairnpb.Member)
	for _, m := range n.disc.Members() {
		byID[m.ID] = &cairnpb.Member{
			Id: m.ID, RaftAddr: m.RaftAddr, GrpcAddr: m.GRPCAddr, GossipAddr: m.Addr,
			Status: memberStatus(m.State),
		}
	}
	for _, srv := range cf.Configuration().Servers {
		m, ok := byID[string(srv.ID)]
		if !ok {
			m = &cairnpb.Member{Id: string(srv.ID), RaftAddr: string(srv.Address)}
			byID[m.Id] = m
		}
		m.RaftAddr = string(srv.Address)
		switch srv.Suffrage {
		case raft.Voter:
			m.Suffrage = cairnpb.Suffrage_VOTER
		default:
			m.Suffrage = cairnpb.Suffrage_NONVOTER
		}
		m.Leader = srv.ID == leaderID
		if pr, ok := progress[srv.ID]; ok {
			m.Healthy = pr.Healthy
			// The leader's own row has no contact to report (its
			// progress entry is stamped with the poll's time).
			if !pr.LastContact.IsZero() && srv.ID != raft.ServerID(n.cfg.ID) {
				m.LastContactMs = uint64(max(now.Sub(pr.LastContact).Milliseconds(), 0))
			}
		}
	}
	resp := &cairnpb.MembersResponse{ConfigIndex: n.fsm.configIndex.Load()}
	for _, m := range byID {
		resp.Members = append(resp.Members, m)
	}
	slices.SortFunc(resp.Members, func(a, b *cairnpb.Member) int { return strings.Compare(a.Id, b.Id) })
	return resp, nil
}

func memberStatus(s membership.State) cairnpb.MemberStatus {
	switch s {
	case membership.StateAlive:
		return cairnpb.MemberStatus_ALIVE
	case membership.StateSuspect:
		return cairnpb.MemberStatus_SUSPECT
	case membership.StateDead:
		return cairnpb.MemberStatus_DEAD
	case membership.StateLeft:
		return cairnpb.MemberStatus_LEFT
	}
	return cairnpb.MemberStatus_MEMBER_STATUS_UNKNOWN
}

// leaderOnly runs an admin operation on the leader, forwarding it there
// from a follower.
func leaderOnly[Resp any](ctx context.Context, n *Node, local func(context.Context) (Resp, error),
	forward func(context.Context, cairnpb.ClusterClient) (Resp, error)) (Resp, error) {
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	return route(ctx, n, local, func(ctx context.Context, cc *grpc.ClientConn) (Resp, error) {
		return forward(ctx, cairnpb.NewClusterClient(cc))
	})
}

// configChangeErr maps raft's refusal of a conditional change.
func configChangeErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "configuration changed since") {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return err
}

func (s *clusterService) AddMember(ctx context.Context, req *cairnpb.AddMemberRequest) (*cairnpb.AddMemberResponse, error) {
	n := s.n
	if req.GetId() == "" || !idPattern.MatchString(req.GetId()) {
		return nil, status.Errorf(codes.InvalidArgument, "bad member ID %q", req.GetId())
	}
	if h, p, err := net.SplitHostPort(req.GetRaftAddr()); err != nil || h == "" || p == "" {
		return nil, status.Errorf(codes.InvalidArgument, "bad raft address %q", req.GetRaftAddr())
	}
	return leaderOnly(ctx, n,
		func(ctx context.Context) (*cairnpb.AddMemberResponse, error) {
			id, addr := raft.ServerID(req.GetId()), raft.ServerAddress(req.GetRaftAddr())
			var f raft.IndexFuture
			if req.GetNonVoter() {
				f = n.raft.AddNonvoter(id, addr, req.GetPrevIndex(), n.cfg.ApplyTimeout)
			} else {
				f = n.raft.AddVoter(id, addr, req.GetPrevIndex(), n.cfg.ApplyTimeout)
			}
			if err := waitFuture(ctx, f); err != nil {
				return nil, configChangeErr(err)
			}
			n.log.Info("cluster: member added", "id", id, "addr", addr, "non_voter", req.GetNonVoter())
			return &cairnpb.AddMemberResponse{ConfigIndex: f.Index()}, nil
		},
		func(ctx context.Context, c cairnpb.ClusterClient) (*cairnpb.AddMemberResponse, error) {
			return c.AddMember(ctx, req)
		})
}

func (s *clusterService) RemoveMember(ctx context.Context, req *cairnpb.RemoveMemberRequest) (*cairnpb.RemoveMemberResponse, error) {
	n := s.n
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "empty member ID")
	}
	return leaderOnly(ctx, n,
		func(ctx context.Context) (*cairnpb.RemoveMemberResponse, error) {
			cf := n.raft.GetConfiguration()
			if err := cf.Error(); err != nil {
				return nil, err
			}
			found := slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(req.GetId()) })
			if !found {
				return nil, status.Errorf(codes.NotFound, "member %s is not in the configuration", req.GetId())
			}
			f := n.raft.RemoveServer(raft.ServerID(req.GetId()), req.GetPrevIndex(), n.cfg.ApplyTimeout)
			if err := waitFuture(ctx, f); err != nil {
				return nil, configChangeErr(err)
			}
			n.log.Info("cluster: member removed", "id", req.GetId())
			return &cairnpb.RemoveMemberResponse{ConfigIndex: f.Index()}, nil
		},
		func(ctx context.Context, c cairnpb.ClusterClient) (*cairnpb.RemoveMemberResponse, error) {
			return c.RemoveMember(ctx, req)
		})
}

func (s *clusterService) TransferLeader(ctx context.Context, req *cairnpb.TransferLeaderRequest) (*cairnpb.TransferLeaderResponse, error) {
	n := s.n
	return leaderOnly(ctx, n,
		func(ctx context.Context) (*cairnpb.TransferLeaderResponse, error) {
			if req.GetId() == n.cfg.ID {
				return &cairnpb.TransferLeaderResponse{LeaderId: n.cfg.ID}, nil
			}
			if err := n.transferLeadership(ctx, req.GetId()); err != nil {
				return nil, err
			}
			id, _ := n.Leader()
			return &cairnpb.TransferLeaderResponse{LeaderId: id}, nil
		},
		func(ctx context.Context, c cairnpb.ClusterClient) (*cairnpb.TransferLeaderResponse, error) {
			return c.TransferLeader(ctx, req)
		})
}

func (s *clusterService) Snapshot(ctx context.Context, _ *cairnpb.SnapshotRequest) (*cairnpb.SnapshotResponse, error) {
	n := s.n
	index, term, err := n.Snapshot(ctx)
	if err != nil {
		return nil, n.toStatus(err)
	}
	return &cairnpb.SnapshotResponse{Index: index, Term: term}, nil
}

// Snapshot makes raft take a snapshot now and returns the index and term it
// covers. If nothing was applied since the latest snapshot, it returns that
// one.
func (n *Node) Snapshot(ctx context.Context) (index, term uint64, err error) {
	if n.raft == nil {
		return 0, 0, ErrNotStarted
	}
	f := n.raft.Snapshot()
	err = waitFuture(ctx, f)
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return 0, 0, err
	}
	// Not f.Open: opening a snapshot may read it (the snapshot store
	// sums the files new since the previous snapshot on first Open).
	stats := n.raft.Stats()
	index, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	term, _ = strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
	return index, term, nil
}

func (s *clusterService) Backup(_ *cairnpb.BackupRequest, stream grpc.ServerStreamingServer[cairnpb.BackupResponse]) error {
	n := s.n
	if err := n.backup(stream.Context(), stream.Send); err != nil {
		return n.toStatus(err)
	}
	return nil
}

// backup streams a consistent checkpoint of the engine: a header, then
// every file's bytes in chunks.
func (n *Node) backup(ctx context.Context, send func(*cairnpb.BackupResponse) error) error {
	cp, err := n.fsm.Checkpoint()
	if err != nil {
		return err
	}
	defer cp.Release()
	files, err := cp.Files()
	if err != nil {
		return err
	}
	hdr := &cairnpb.BackupHeader{AppliedIndex: cp.AppliedIndex, AppliedTerm: cp.AppliedTerm, NodeId: n.cfg.ID}
	for _, f := range files {
		hdr.Files = append(hdr.Files, &cairnpb.BackupFile{Name: f.GetName(), Size: f.GetSize(), Crc32C: f.GetCrc32C()})
	}
	if err := send(&cairnpb.BackupResponse{Msg: &cairnpb.BackupResponse_Header{Header: hdr}}); err != nil {
		return err
	}
	buf := make([]byte, backupChunkSize)
	for i, f := range files {
		r, err := cp.Open(f.GetName())
		if err != nil {
			return err
		}
		var off uint64
		for off < f.GetSize() {
			if err := ctx.Err(); err != nil {
				r.Close()
				return err
			}
			k, err := io.ReadFull(r, buf[:min(uint64(len(buf)), f.GetSize()-off)])
			if err != nil {
				r.Close()
				return fmt.Errorf("cluster: backup: reading %s: %w", f.GetName(), err)
			}
			chunk := &cairnpb.BackupChunk{File: uint32(i), Offset: off, Data: buf[:k]}
			if err := send(&cairnpb.BackupResponse{Msg: &cairnpb.BackupResponse_Chunk{Chunk: chunk}}); err != nil {
				r.Close()
				return err
			}
			off += uint64(k)
		}
		r.Close()
	}
	return nil
}
