package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// peerConnectBackoff is the reconnect backoff of the connections to peers:
// gRPC's default (1s, growing 1.6× to 2 minutes). A peer that was down for
// minutes would therefore stay unreachable for up to two minutes after it
// is back, so watchMembers resets the backoff as soon as gossip reports
// the peer alive (forwarder.resetBackoff). A variable for tests.
var peerConnectBackoff = backoff.DefaultConfig

// peerDialOptions are added to the options of connections to peers (tests:
// a dialer that counts attempts).
var peerDialOptions []grpc.DialOption

// forwarder keeps one gRPC client connection per peer address, for
// forwarding requests to the leader and for the leader's status polls.
type forwarder struct {
	maxMsg int
	creds  credentials.TransportCredentials // plaintext, or mTLS with the node's certificate
	mu     struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		closed bool
		// token, if set, gives a new connection to addr its per-call
		// credentials (the peer token, sent only to verified peers:
		// cluster/auth.go, verify.go).
		token func(addr string) grpc.DialOption
	}
}

func newForwarder(maxValueSize int, creds credentials.TransportCredentials) *forwarder {
	f := &forwarder{maxMsg: maxMessageSize(maxValueSize), creds: creds}
	f.mu.conns = make(map[string]*grpc.ClientConn)
	return f
}

// conn returns the cached connection to addr, creating it if needed
// (grpc.NewClient connects lazily and reconnects by itself).
func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return nil, ErrShutdown
	}
	if c, ok := f.mu.conns[addr]; ok {
		return c, nil
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(f.creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: peerConnectBackoff, MinConnectTimeout: 20 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(f.maxMsg), grpc.MaxCallSendMsgSize(f.maxMsg)),
	}, peerDialOptions...)
	if f.mu.token != nil {
		opts = append(opts, f.mu.token(addr))
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	f.mu.conns[addr] = c
	return c, nil
}

// resetBackoff makes the connection to addr, if there is one and it waits
// out a reconnect backoff (TRANSIENT_FAILURE), try again now; it reports
// whether it did. Call it when the peer is known to be back: without it,
// the leader's status polls of a peer that was down for minutes keep
// failing (and the peer reads as unhealthy) until the backoff, up to two
// minutes, ends.
func (f *forwarder) resetBackoff(addr string) bool {
	f.mu.Lock()
	c, ok := f.mu.conns[addr]
	f.mu.Unlock()
	if !ok || c.GetState() != connectivity.TransientFailure {
		return false
	}
	c.ResetConnectBackoff()
	return true
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.closed = true
	for _, c := range f.mu.conns {
		c.Close()
	}
	f.mu.conns = nil
}

// incomingHops returns how many times the request in ctx was forwarded.
func incomingHops(ctx context.Context) int {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return 0
	}
	vs := md.Get(cairnpb.ForwardHopsKey)
	if len(vs) == 0 {
		return 0
	}
	h, err := strconv.Atoi(vs[0])
	if err != nil || h < 0 {
		return cairnpb.MaxForwardHops // malformed: do not forward further
	}
	return h
}

// leaderTarget returns a context and connection for forwarding the request
// in ctx to the leader: it waits (up to LeaderWaitTimeout) for a leader
// whose gRPC address gossip knows. It fails with a NotLeader status when
// the hop limit is reached, when this node became the leader meanwhile
// (errBecameLeader), or when no leader can be found.
func (n *Node) leaderTarget(ctx context.Context) (context.Context, *grpc.ClientConn, error) {
	hops := incomingHops(ctx)
	if hops >= cairnpb.MaxForwardHops {
		id, addr := n.Leader()
		return nil, nil, notLeaderError(id, addr, "request forwarded %d times without reaching the leader", hops)
	}
	id, addr, err := n.waitLeaderAddr(ctx)
	if err != nil {
		return nil, nil, err
	}
	if id == n.cfg.ID {
		return nil, nil, errBecameLeader
	}
	conn, err := n.peerConn(ctx, id, addr)
	if err != nil {
		return nil, nil, notLeaderError(id, addr, "cannot forward to the leader: %v", err)
	}
	out := metadata.Pairs(cairnpb.ForwardHopsKey, strconv.Itoa(hops+1))
	return metadata.NewOutgoingContext(ctx, out), conn, nil
}

// waitLeaderAddr waits until a leader and its gRPC address are known: up
// to LeaderWaitTimeout, and never into the last part of the caller's
// deadline (its last third: the answer must still reach the caller on a
// loaded machine; a quarter, 125 ms of 500, was once not enough under the
// race detector). A node without a leader must answer "not leader" while
// the caller can still try another node; running out the caller's deadline
// told it nothing, and a client kept timing out on a node that knew no
// leader (jepsen/README.md, track record #3).
func (n *Node) waitLeaderAddr(ctx context.Context) (id, addr string, err error) {
	wait := n.cfg.LeaderWaitTimeout
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		wait = min(wait, rem-max(rem/3, 20*time.Millisecond))
	}
	wctx, cancel := context.WithTimeout(ctx, max(wait, 0))
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		ch := n.leaderChange.wait()
		id, addr = n.Leader()
		if id != "" && addr != "" {
			return id, addr, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", "", ctx.Err()
			}
			if id == "" {
				return "", "", notLeaderError("", "", "no leader known")
			}
			return "", "", notLeaderError(id, "", "leader %s has no known gRPC address", id)
		case <-n.ctx.Done():
			return "", "", ErrShutdown
		case <-ch:
		case <-t.C:
		}
	}
}
