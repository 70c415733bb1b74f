package cluster

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// requestContext bounds ctx by Config.RequestTimeout if it has no deadline.
// If it has one, the node stops waiting a little earlier (a tenth of the
// time left, at most 250ms), so that its answer (DeadlineExceeded,
// ResourceExhausted) reaches the client before the client gives up on its
// own (50ms was not always enough on a loaded machine: the client saw its
// own DeadlineExceeded instead of the node's ResourceExhausted).
func (n *Node) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, n.cfg.RequestTimeout)
	}
	margin := min(time.Until(dl)/10, 250*time.Millisecond)
	return context.WithDeadline(ctx, dl.Add(-max(margin, 0)))
}

// maxRoutes bounds how often one request is re-routed on this node because
// leadership moved under it.
const maxRoutes = 3

// write serves a write request: on the leader it goes through raft and
// returns the FSM's result; on a follower it is forwarded to the leader by
// forward (a call of the same method on a KV client).
func write[Resp proto.Message](ctx context.Context, n *Node, req proto.Message,
	forward func(context.Context, cairnpb.KVClient) (Resp, error)) (Resp, error) {
	var zero Resp
	// The FSM's NewCommand stamps a Txn with this node's response bound
	// (cairnpb.MaxResponseKVBytes of Config.MaxValueSize): every replica
	// applies the bound the command carries, whatever its own.
	cmd, err := n.fsm.NewCommand(req)
	if err == nil {
		err = n.fsm.Validate(cmd)
	}
	if err != nil {
		return zero, n.toStatus(err)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	return route(ctx, n,
		func(ctx context.Context) (Resp, error) {
			res, err := n.apply(ctx, cmd)
			if err != nil {
				return zero, err
			}
			resp, ok := res.(Resp)
			if !ok {
				return zero, fmt.Errorf("cluster: state machine returned %T for %T", res, req)
			}
			setHeaderNode(resp, n.cfg.ID)
			return resp, nil
		},
		func(ctx context.Context, cc *grpc.ClientConn) (Resp, error) {
			return forward(ctx, cairnpb.NewKVClient(cc))
		})
}

// route runs local on the leader, or forward towards the leader. When
// local fails because this node is not the leader after all (and nothing
// was proposed), the request is routed again.
func route[Resp any](ctx context.Context, n *Node,
	local func(context.Context) (Resp, error),
	forward func(context.Context, *grpc.ClientConn) (Resp, error)) (Resp, error) {
	var zero Resp
	for attempt := 1; ; attempt++ {
		if n.raft.State() == raft.Leader {
			resp, err := local(ctx)
			if errors.Is(err, raft.ErrNotLeader) && attempt < maxRoutes {
				continue
			}
			if err != nil {
				return zero, n.toStatus(err)
			}
			return resp, nil
		}
		fctx, cc, err := n.leaderTarget(ctx)
		if errors.Is(err, errBecameLeader) && attempt < maxRoutes {
			continue
		}
		if err != nil {
			return zero, n.toStatus(err)
		}
		n.forwarded.add(methodName(ctx))
		return forward(fctx, cc)
	}
}

// methodName returns the name of the gRPC method ctx serves (Put for
// /cairn.v1.KV/Put), or "unknown" outside a gRPC server.
func methodName(ctx context.Context) string {
	m, ok := grpc.Method(ctx)
	if !ok {
		return "unknown"
	}
	return path.Base(m)
}

// apply proposes cmd to raft and waits for its result: the FSM's response,
// or its error.
func (n *Node) apply(ctx context.Context, cmd *fsmpb.Command) (any, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	enqueue := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		enqueue = max(min(enqueue, time.Until(dl)), time.Millisecond)
	}
	f := n.raft.Apply(data, enqueue)
	if err := waitFuture(ctx, f); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && n.raft.CommitIndex() > n.fsm.AppliedIndex() {
			// Committed entries wait for the state machine: the engine
			// is stalled.
			return nil, errWriteStalled
		}
		return nil, err
	}
	res := f.Response()
	if err, ok := res.(error); ok {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("cluster: state machine returned no result")
	}
	return res, nil
}

// setHeaderNode names the node in a write response's header.
func setHeaderNode(m proto.Message, id string) {
	var h *cairnpb.ResponseHeader
	switch r := m.(type) {
	case *cairnpb.PutResponse:
		h = r.GetHeader()
	case *cairnpb.DeleteResponse:
		h = r.GetHeader()
	case *cairnpb.DeleteRangeResponse:
		h = r.GetHeader()
	case *cairnpb.TxnResponse:
		h = r.GetHeader()
	}
	if h != nil {
		h.NodeId = id
	}
}
