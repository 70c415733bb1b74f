package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// readIndex makes a linearizable read safe on the leader (raft's read-index
// protocol, §6.4 of the raft thesis; hashicorp/raft has no API for it):
//
//  1. wait until this node, as leader of its current term T, has committed
//     an entry of T (awaitReadable: the barrier establishLeadership
//     commits), so its commit index covers every entry an earlier leader
//     committed;
//  2. note the commit index C;
//  3. confirm with a quorum that T is still the newest term
//     (confirmLeadership: one round of Confirm RPCs per batch of concurrent
//     reads, started after the read arrived);
//  4. wait until the FSM has applied C (up to the last entry at or below C
//     that raft hands the FSM: noops and barriers never reach it).
//
// A read served from the local engine afterwards reflects every write
// acknowledged before readIndex began. It returns the index waited for.
//
// # Why step 3 is safe without a disk write
//
// A write W acknowledged before the read began (time R) was committed by
// the leader of some term T'. If T' <= T, C covers it (step 1, and C is read
// after R). If T' > T, the leader of T' was elected before W's
// acknowledgement, so before R, by a majority M' that each had raised
// their current term to T' (hashicorp/raft persists the new term and sets
// it before granting the vote) and never lower it again. Step 3 counts a
// voter only if it answered a Confirm request that was sent after R (each
// round is a fresh unary RPC, carrying a fresh nonce that the answer must
// echo; nothing sent or received before the round can answer it) and only
// if, when it answered, its current term was T and the leader it knew was
// this node. The leader counts itself only while it is still the leader
// of T. A majority M of such answers intersects M': the node in both
// would have had term >= T' > T at its answer, after R. So T' > T cannot
// happen, and the read sees W.
//
// This is the property the barrier had and raft's VerifyLeader lacks:
// VerifyLeader counts any heartbeat response that arrives after the call,
// including one to a heartbeat sent before the read began, so a leader
// paused for longer than an election (SIGSTOP, a VM stall) could confirm
// itself with a stale response waiting in its socket. A Confirm round is
// answered by the followers' current term, and costs a gRPC round trip to
// a quorum over the nodes' existing connections (forwarder) instead of a
// log entry and an fsync on every node.
//
// Membership: the quorum is a majority of the voters of raft's latest
// configuration, as raft's own commitment uses; hashicorp/raft changes
// one server at a time, so majorities of consecutive configurations
// intersect. A voter whose gRPC address gossip does not know cannot be
// counted (the round may then fail; the read returns an error, never a
// stale value).
func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	term, err := n.awaitReadable(ctx)
	if err != nil {
		return 0, err
	}
	index := n.raft.CommitIndex()
	confirmed, err := n.confirmLeadership(ctx)
	if err != nil {
		return 0, err
	}
	if confirmed != term || n.raft.CurrentTerm() != term {
		return 0, raft.ErrNotLeader
	}
	if err := n.waitAppliedThrough(ctx, index); err != nil {
		return 0, err
	}
	return index, nil
}

// waitAppliedThrough waits until the FSM reflects every committed entry at
// or below index: raft hands the FSM only commands and configurations, so
// it waits for the last of those at or below index (the entries above it,
// noops and barriers, change no state).
func (n *Node) waitAppliedThrough(ctx context.Context, index uint64) error {
	applied := n.fsm.AppliedIndex()
	if applied >= index {
		return nil
	}
	target := index
	var l raft.Log
	for i := index; i > applied; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			target = index // compacted or unreadable: wait for index itself
			break
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			target = i
			break
		}
		target = i - 1
	}
	if target <= applied {
		return nil
	}
	return n.fsm.WaitApplied(ctx, target)
}

// readBarrier batches the leadership confirmations of concurrent
// linearizable reads: reads that arrive while a round is in flight wait
// for the next one, which starts (and so sends its requests) after they
// arrived.
type readBarrier struct {
	mu      sync.Mutex
	next    *readRound // reads waiting for a round not yet started
	running bool       // a runner goroutine is running rounds
	rounds  atomic.Uint64
}

type readRound struct {
	done chan struct{}
	term uint64 // the term confirmed; set before done is closed
	err  error  // set before done is closed
}

// confirmLeadership returns the term a quorum confirmed in a round started
// after the call.
func (n *Node) confirmLeadership(ctx context.Context) (uint64, error) {
	rb := &n.reads
	rb.mu.Lock()
	r := rb.next
	if r == nil {
		r = &readRound{done: make(chan struct{})}
		rb.next = r
	}
	if !rb.running {
		rb.running = true
		go n.runReadRounds()
	}
	rb.mu.Unlock()
	select {
	case <-r.done:
		return r.term, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// runReadRounds runs one confirmation round per batch of waiting reads
// until none is waiting.
func (n *Node) runReadRounds() {
	rb := &n.reads
	for {
		rb.mu.Lock()
		r := rb.next
		rb.next = nil
		if r == nil {
			rb.running = false
			rb.mu.Unlock()
			return
		}
		rb.mu.Unlock()
		rb.rounds.Add(1)
		r.term, r.err = n.confirmRound()
		close(r.done)
	}
}

// errNotConfirmed is a follower's refusal of a Confirm request.
var errNotConfirmed = errors.New("cluster: leadership not confirmed")

// confirmRound asks every other voter of the latest configuration whether
// it still follows this node in its current term, and returns that term
// once a majority of voters (this node included) has. See readIndex.
func (n *Node) confirmRound() (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, raft.ErrNotLeader
	}
	term := n.raft.CurrentTerm()
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0, err
	}
	self := raft.ServerID(n.cfg.ID)
	var voters, acks int
	var peers []string
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID == self {
			acks++
			continue
		}
		peers = append(peers, string(s.ID))
	}
	need := voters/2 + 1
	if acks >= need {
		return n.checkTerm(term)
	}
	// Peers the round cannot reach (no gRPC address known through gossip,
	// e.g. right after a restore from a backup, before gossip converged):
	// if too few are left for a quorum, confirm with a barrier entry
	// instead, as before Confirm existed (a log write, but never a stale
	// read and never a read refused for want of an address).
	// A voter not verified as a peer (verify.go; verified by the
	// reconcile loop, so this rarely dials) counts as unreachable.
	var conns []*grpc.ClientConn
	for _, id := range peers {
		if addr := n.memberGRPCAddr(id); addr != "" {
			vctx, cancel := context.WithTimeout(n.ctx, peerVerifyTimeout)
			cc, err := n.peerConn(vctx, id, addr)
			cancel()
			if err == nil {
				conns = append(conns, cc)
			}
		}
	}
	if acks+len(conns) < need {
		return n.confirmByBarrier(term)
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	req := &cairnpb.ConfirmRequest{Term: term, Nonce: rand.Uint64(), LeaderId: string(self)}
	answers := make(chan error, len(peers))
	for range len(peers) - len(conns) {
		answers <- errors.New("cluster: no gRPC address known for a voter")
	}
	for _, cc := range conns {
		go func() { answers <- confirmPeer(ctx, cc, req) }()
	}
	var last error
	for fails, unimplemented := 0, 0; acks < need; {
		select {
		case err := <-answers:
			if err != nil {
				last = err
				if status.Code(err) == codes.Unimplemented {
					unimplemented++ // a peer that predates Confirm (a rolling upgrade)
				}
				if fails++; voters-fails < need && unimplemented > 0 {
					return n.confirmByBarrier(term)
				}
				if voters-fails < need {
					return 0, fmt.Errorf("%w: %d of %d voters did not confirm this leader (last: %v)", raft.ErrLeadershipLost, fails, voters, last)
				}
				continue
			}
			acks++
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return n.checkTerm(term)
}

// confirmByBarrier confirms leadership of term the way cairn did before
// Confirm: a barrier entry appended now commits only if a quorum accepts
// it in this leader's term, and raft resolves it once the FSM has applied
// every entry before it.
func (n *Node) confirmByBarrier(term uint64) (uint64, error) {
	if err := n.waitRaft(context.Background(), n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		return 0, err
	}
	return n.checkTerm(term)
}

// checkTerm returns term if this node is still the leader of term.
func (n *Node) checkTerm(term uint64) (uint64, error) {
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return 0, raft.ErrNotLeader
	}
	return term, nil
}

// confirmPeer sends one Confirm request and checks the answer.
func confirmPeer(ctx context.Context, cc *grpc.ClientConn, req *cairnpb.ConfirmRequest) error {
	resp, err := cairnpb.NewReadIndexClient(cc).Confirm(ctx, req)
	if err != nil {
		return err
	}
	if resp.GetTerm() != req.GetTerm() || resp.GetNonce() != req.GetNonce() {
		return errNotConfirmed
	}
	return nil
}

// readIndexService implements cairnpb.ReadIndexServer.
type readIndexService struct {
	cairnpb.UnimplementedReadIndexServer
	n *Node
}

// Confirm answers a Confirm request: it echoes the term and nonce if this
// node's current term is the request's and the leader it knows in it is
// the requester; otherwise it refuses.
func (s *readIndexService) Confirm(_ context.Context, req *cairnpb.ConfirmRequest) (*cairnpb.ConfirmResponse, error) {
	r := s.n.raft
	term := req.GetTerm()
	if term == 0 || req.GetLeaderId() == "" {
		return nil, status.Error(codes.InvalidArgument, "malformed confirm request")
	}
	if r.CurrentTerm() != term {
		return nil, status.Error(codes.FailedPrecondition, "term mismatch")
	}
	if _, lid := r.LeaderWithID(); string(lid) != req.GetLeaderId() {
		return nil, status.Error(codes.FailedPrecondition, "not this node's leader")
	}
	// The term again: it must still be the request's after the leader
	// check, so the answer holds at one instant after the request was sent.
	if r.CurrentTerm() != term {
		return nil, status.Error(codes.FailedPrecondition, "term mismatch")
	}
	return &cairnpb.ConfirmResponse{Term: term, Nonce: req.GetNonce()}, nil
}
