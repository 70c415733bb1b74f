package cluster

import (
	"context"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
)

// Defaults of the gRPC server's limits (Config.MaxRequestTimeout,
// Config.MaxConcurrentStreams).
const (
	// DefaultMaxRequestTimeout caps the deadline of a unary request: a
	// client that asks for an hour holds a server goroutine, a raft future
	// and (on a follower) a forwarded call for no more than this.
	DefaultMaxRequestTimeout = time.Minute
	// DefaultMaxConcurrentStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
	// the server announces: how many calls one client connection may have
	// in flight. gRPC's own default is unbounded. 1024 is 4x the most the
	// cluster benchmark keeps in flight (put256: 256 clients; cairn bench
	// shares one connection among its clients).
	DefaultMaxConcurrentStreams = 1024
)

// serverLimitOptions are the gRPC server options that bound what one client
// can make the node hold (see README.md, "Security"):
//
//   - messages larger than maxMessageSize fail with ResourceExhausted
//     ("grpc: received message larger than max"), before they are decoded;
//   - a connection has at most Config.MaxConcurrentStreams calls open: a
//     gRPC client queues the calls beyond it until one ends (they fail with
//     DeadlineExceeded if their deadline passes first); a client that
//     ignores the setting gets its extra streams refused (Unavailable);
//   - every unary call runs under a deadline (limitDeadline).
//
// The key, value, Txn and Scan limits are checked per request
// (api/cairnpb/limits.go; InvalidArgument, or a Scan limit reduced to
// MaxScanLimit).
func (n *Node) serverLimitOptions() []grpc.ServerOption {
	c := &n.cfg
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageSize(c.MaxValueSize)),
		grpc.MaxSendMsgSize(maxMessageSize(c.MaxValueSize)),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.ChainUnaryInterceptor(n.limitDeadline),
	}
}

// limitDeadline is a unary server interceptor that gives a call without a
// deadline Config.RequestTimeout and cuts a deadline further away than
// Config.MaxRequestTimeout to it, so that every handler (serializable reads
// and Status included, which never pass through requestContext) ends. A
// call cut short fails with DeadlineExceeded, as it would at its own
// deadline. Streaming calls (Backup, Trace) are not bounded here: they last
// as long as the data they carry, and end when the client goes away; nor is
// Snapshot, whose raft snapshot of a large state machine takes minutes
// (`cairn snapshot take` gives it 10).
func (n *Node) limitDeadline(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == cairnpb.Cluster_Snapshot_FullMethodName {
		return handler(ctx, req)
	}
	ctx, cancel := n.boundDeadline(ctx)
	defer cancel()
	return handler(ctx, req)
}

// boundDeadline returns ctx with a deadline of at most MaxRequestTimeout
// from now, RequestTimeout if ctx had none.
func (n *Node) boundDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	switch {
	case !ok:
		return context.WithTimeout(ctx, n.cfg.RequestTimeout)
	case time.Until(dl) > n.cfg.MaxRequestTimeout:
		return context.WithTimeout(ctx, n.cfg.MaxRequestTimeout)
	}
	return ctx, func() {}
}
