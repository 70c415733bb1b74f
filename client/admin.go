package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// Status describes one node: its raft state, term, indexes, addresses and
// a summary of its storage engine's metrics (cairnpb.StatusResponse).
type Status = cairnpb.StatusResponse

// Member is one member of the cluster (cairnpb.Member): its addresses, its
// place in the raft configuration and its gossip status.
type Member = cairnpb.Member

// Members is the cluster's membership as one node sees it
// (cairnpb.MembersResponse): the members by ID and the raft index of the
// configuration listed.
type Members = cairnpb.MembersResponse

// Status describes a node: WithEndpoint(addr) names it; without it, any
// node answers (ask Status.LeaderGrpcAddr for the leader's address, and
// Members for the others').
func (c *Client) Status(ctx context.Context, opts ...Option) (*Status, error) {
	const op = "status"
	o, err := applyOptions(op, kindStatus, opts)
	if err != nil {
		return nil, err
	}
	var resp *Status
	err = c.do(ctx, op, toAny, o.endpoint, func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.Status(ctx, &cairnpb.StatusRequest{})
		if err == nil {
			resp = r
			c.mu.Lock()
			if !c.mu.closed {
				c.mu.idByAddr[nc.addr] = r.GetNodeId()
			}
			c.mu.Unlock()
			if a := r.GetLeaderGrpcAddr(); a != "" {
				c.setLeader(a, r.GetLeaderId())
			}
		}
		return err
	})
	return resp, err
}

// Members lists the cluster's members as the leader sees them (the leader
// alone knows their health and last contact); WithEndpoint asks another
// node.
func (c *Client) Members(ctx context.Context, opts ...Option) (*Members, error) {
	const op = "members"
	o, err := applyOptions(op, kindMembers, opts)
	if err != nil {
		return nil, err
	}
	var resp *Members
	err = c.do(ctx, op, toLeaderNode, o.endpoint, func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.Members(ctx, &cairnpb.MembersRequest{})
		if err == nil {
			resp = r
		}
		return err
	})
	return resp, err
}

// AddMember adds a server to the raft configuration, by its ID and raft
// address, as a voter (or AsNonVoter). Nodes normally join by gossip and
// the leader adds them by itself; AddMember is for manual operation.
// Options: AsNonVoter, IfConfigIndex. It returns the new configuration's
// raft index.
func (c *Client) AddMember(ctx context.Context, id, raftAddr string, opts ...Option) (uint64, error) {
	op := "add member " + id
	o, err := applyOptions(op, kindAddMember, opts)
	if err != nil {
		return 0, err
	}
	if id == "" || raftAddr == "" {
		return 0, invalidArg(op, "need a member ID and a raft address")
	}
	var index uint64
	err = c.do(ctx, op, toLeader, "", func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.AddMember(ctx, &cairnpb.AddMemberRequest{Id: id, RaftAddr: raftAddr, NonVoter: o.nonVoter, PrevIndex: o.prevIndex})
		if err == nil {
			index = r.GetConfigIndex()
		}
		return err
	})
	return index, err
}

// RemoveMember removes a server from the raft configuration
// (ErrNotFound if it is not in it). Options: IfConfigIndex. It returns the
// new configuration's raft index.
func (c *Client) RemoveMember(ctx context.Context, id string, opts ...Option) (uint64, error) {
	op := "remove member " + id
	o, err := applyOptions(op, kindRemoveMember, opts)
	if err != nil {
		return 0, err
	}
	if id == "" {
		return 0, invalidArg(op, "empty member ID")
	}
	var index uint64
	err = c.do(ctx, op, toLeader, "", func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.RemoveMember(ctx, &cairnpb.RemoveMemberRequest{Id: id, PrevIndex: o.prevIndex})
		if err == nil {
			index = r.GetConfigIndex()
		}
		return err
	})
	return index, err
}

// TransferLeader asks the leader to hand leadership to the voter id ("":
// raft picks the most up-to-date voter) and returns the new leader's ID.
func (c *Client) TransferLeader(ctx context.Context, id string) (string, error) {
	op := "transfer leadership"
	if id != "" {
		op += " to " + id
	}
	var leader string
	err := c.do(ctx, op, toLeader, "", func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.TransferLeader(ctx, &cairnpb.TransferLeaderRequest{Id: id})
		if err == nil {
			leader = r.GetLeaderId()
		}
		return err
	})
	if err == nil {
		// The old leader's address is stale now.
		c.mu.Lock()
		c.mu.leader = ""
		c.lookupLeaderLocked()
		c.mu.Unlock()
	}
	return leader, err
}

// Snapshot makes a node take a raft snapshot now (any node, or the one
// named WithEndpoint) and returns the raft index and term it covers. It
// compacts that node's raft log; to copy the data out, use Backup.
func (c *Client) Snapshot(ctx context.Context, opts ...Option) (index, term uint64, err error) {
	const op = "snapshot"
	o, err := applyOptions(op, kindSnapshot, opts)
	if err != nil {
		return 0, 0, err
	}
	err = c.do(ctx, op, toAny, o.endpoint, func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.Snapshot(ctx, &cairnpb.SnapshotRequest{})
		if err == nil {
			index, term = r.GetIndex(), r.GetTerm()
		}
		return err
	})
	return index, term, err
}

// TraceOptions configure Trace.
type TraceOptions struct {
	// Duration is how long the node traces (required, at most 24 hours).
	Duration time.Duration
	// SamplingFrequency traces 1 in N blocks (0 or 1: every access).
	SamplingFrequency uint64
	// MaxSizeBytes stops the trace before the file exceeds it (0: the
	// node's limit, 1 GiB).
	MaxSizeBytes int64
}

// Trace records the block-cache accesses of the node at addr (a gRPC
// address) for o.Duration and writes the binary trace file (package trace;
// `cairn trace analyze` reads it) to w as the node streams it. It returns
// the bytes written. A trace already running on the node fails with
// ErrFailedPrecondition. The call is never retried once bytes are written;
// on an error after that, w holds a prefix of the trace.
func (c *Client) Trace(ctx context.Context, addr string, o TraceOptions, w io.Writer) (int64, error) {
	const op = "trace"
	if addr == "" {
		return 0, newError(op, errors.New("trace needs a node address"), 0)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration+c.cfg.RequestTimeout)
		defer cancel()
	}
	var written int64
	err := c.do(ctx, op, toAny, addr, func(ctx context.Context, nc *nodeConn) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := nc.cluster.Trace(ctx, &cairnpb.TraceRequest{
			DurationMs:        o.Duration.Milliseconds(),
			SamplingFrequency: o.SamplingFrequency,
			MaxSizeBytes:      o.MaxSizeBytes,
		})
		if err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				if written > 0 {
					return permanent{err}
				}
				return err
			}
			n, werr := w.Write(msg.GetData())
			written += int64(n)
			if werr != nil {
				return permanent{fmt.Errorf("writing the trace: %w", werr)}
			}
		}
	})
	return written, err
}
