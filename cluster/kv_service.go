package cluster

import (
	"context"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
)

// kvService implements cairnpb.KVServer.
type kvService struct {
	cairnpb.UnimplementedKVServer
	n *Node
}

func (s *kvService) Put(ctx context.Context, req *cairnpb.PutRequest) (*cairnpb.PutResponse, error) {
	return write(ctx, s.n, req, func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.PutResponse, error) {
		return c.Put(ctx, req)
	})
}

func (s *kvService) Delete(ctx context.Context, req *cairnpb.DeleteRequest) (*cairnpb.DeleteResponse, error) {
	return write(ctx, s.n, req, func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.DeleteResponse, error) {
		return c.Delete(ctx, req)
	})
}

func (s *kvService) DeleteRange(ctx context.Context, req *cairnpb.DeleteRangeRequest) (*cairnpb.DeleteRangeResponse, error) {
	return write(ctx, s.n, req, func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.DeleteRangeResponse, error) {
		return c.DeleteRange(ctx, req)
	})
}

func (s *kvService) Txn(ctx context.Context, req *cairnpb.TxnRequest) (*cairnpb.TxnResponse, error) {
	return write(ctx, s.n, req, func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.TxnResponse, error) {
		return c.Txn(ctx, req)
	})
}

func (s *kvService) Get(ctx context.Context, req *cairnpb.GetRequest) (*cairnpb.GetResponse, error) {
	n := s.n
	if err := checkKey(req.GetKey()); err != nil {
		return nil, n.toStatus(err)
	}
	return read(ctx, n, req.GetConsistency(),
		func() (*cairnpb.GetResponse, error) {
			kv, err := n.fsm.Get(req.GetKey())
			if err != nil {
				return nil, err
			}
			return &cairnpb.GetResponse{Kv: kv}, nil
		},
		func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.GetResponse, error) {
			return c.Get(ctx, req)
		})
}

func (s *kvService) Scan(ctx context.Context, req *cairnpb.ScanRequest) (*cairnpb.ScanResponse, error) {
	n := s.n
	return read(ctx, n, req.GetConsistency(),
		func() (*cairnpb.ScanResponse, error) { return n.fsm.Scan(req) },
		func(ctx context.Context, c cairnpb.KVClient) (*cairnpb.ScanResponse, error) {
			return c.Scan(ctx, req)
		})
}

// headered is a read response with a header.
type headered interface {
	*cairnpb.GetResponse | *cairnpb.ScanResponse
}

// read serves a read: a serializable one from the local engine; a
// linearizable one on the leader after readIndex, forwarded to the leader
// by a follower.
func read[Resp headered](ctx context.Context, n *Node, c cairnpb.Consistency,
	local func() (Resp, error),
	forward func(context.Context, cairnpb.KVClient) (Resp, error)) (Resp, error) {
	var zero Resp
	serve := func() (Resp, error) {
		hdr := &cairnpb.ResponseHeader{NodeId: n.cfg.ID, RaftTerm: n.raft.CurrentTerm(), AppliedIndex: n.fsm.AppliedIndex()}
		resp, err := local()
		if err != nil {
			return zero, err
		}
		switch r := any(resp).(type) {
		case *cairnpb.GetResponse:
			r.Header = hdr
		case *cairnpb.ScanResponse:
			r.Header = hdr
		}
		return resp, nil
	}
	if n.cfg.UnsafeLocalReads && c == cairnpb.Consistency_LINEARIZABLE {
		c = cairnpb.Consistency_SERIALIZABLE // jepsen's must-fail check only (Config.UnsafeLocalReads)
	}
	switch c {
	case cairnpb.Consistency_SERIALIZABLE:
		resp, err := serve()
		return resp, n.toStatus(err)
	case cairnpb.Consistency_LINEARIZABLE:
	default:
		return zero, n.toStatus(fmt.Errorf("%w: unknown consistency %d", errInvalidRequest, c))
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	return route(ctx, n,
		func(ctx context.Context) (Resp, error) {
			if _, err := n.readIndex(ctx); err != nil {
				return zero, err
			}
			return serve()
		},
		func(ctx context.Context, cc *grpc.ClientConn) (Resp, error) {
			return forward(ctx, cairnpb.NewKVClient(cc))
		})
}

// checkKey validates a key before a request is routed (the FSM checks it
// again where it is served).
func checkKey(k []byte) error {
	switch {
	case len(k) == 0:
		return fmt.Errorf("%w: empty key", errInvalidRequest)
	case len(k) > cairnpb.MaxKeySize:
		return fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", errInvalidRequest, len(k), cairnpb.MaxKeySize)
	}
	return nil
}
