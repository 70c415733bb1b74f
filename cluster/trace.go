package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/trace"
)

const (
	// maxTraceDuration bounds a Trace RPC.
	maxTraceDuration = 24 * time.Hour
	// defaultTraceMaxSize is the size limit of a Trace RPC that sets none.
	defaultTraceMaxSize = 1 << 30
	// traceBacklogBytes bounds the trace bytes waiting for the stream:
	// the engine's read path never waits on the network, so a client
	// that reads too slowly stops the trace instead.
	traceBacklogBytes = 64 << 20
)

var errTraceBacklog = errors.New("cluster: trace stream backlog full (the client reads too slowly)")

func (s *clusterService) Trace(req *cairnpb.TraceRequest, stream cairnpb.Cluster_TraceServer) error {
	return s.n.toStatus(s.n.trace(stream.Context(), req, stream.Send))
}

// trace runs a block-cache trace of the node's engine for the request's
// duration and sends the trace file's bytes as they are written.
func (n *Node) trace(ctx context.Context, req *cairnpb.TraceRequest, send func(*cairnpb.TraceResponse) error) error {
	d := time.Duration(req.GetDurationMs()) * time.Millisecond
	if d <= 0 || d > maxTraceDuration {
		return status.Errorf(codes.InvalidArgument, "trace duration %v out of range (0, %v]", d, maxTraceDuration)
	}
	maxSize := req.GetMaxSizeBytes()
	if maxSize < 0 {
		return status.Errorf(codes.InvalidArgument, "negative trace size limit %d", maxSize)
	}
	if maxSize == 0 {
		maxSize = defaultTraceMaxSize
	}
	pipe := newChunkPipe(traceBacklogBytes)
	end, stopped, err := n.fsm.StartTrace(trace.Options{SamplingFrequency: req.GetSamplingFrequency(), MaxTraceFileSizeBytes: maxSize}, pipe)
	if errors.Is(err, trace.ErrTraceRunning) {
		return status.Errorf(codes.FailedPrecondition, "a block-cache trace already runs on node %s", n.cfg.ID)
	}
	if err != nil {
		return err
	}
	ended := false
	endTrace := func() error {
		if ended {
			return nil
		}
		ended = true
		return end()
	}
	defer endTrace()
	timer := time.NewTimer(d)
	defer timer.Stop()
	sendAll := func() error {
		for _, c := range pipe.take() {
			if err := send(&cairnpb.TraceResponse{Data: c}); err != nil {
				return err
			}
		}
		return nil
	}
	for running := true; running; {
		select {
		case <-pipe.ready:
		case <-timer.C:
			running = false
		case <-stopped:
			running = false
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := sendAll(); err != nil {
			return err
		}
	}
	terr := endTrace()
	if err := sendAll(); err != nil {
		return err
	}
	if terr != nil {
		if errors.Is(terr, errTraceBacklog) {
			return status.Errorf(codes.ResourceExhausted, "trace stopped early, the file sent is whole: %v", terr)
		}
		return fmt.Errorf("cluster: trace: %w", terr)
	}
	return nil
}

// chunkPipe is the io.Writer a trace writes to: it queues copies of the
// written bytes for the RPC's goroutine, without ever blocking the writer
// (which holds the tracer's lock on the engine's read path), up to a
// backlog after which writes fail.
type chunkPipe struct {
	ready chan struct{} // signalled (capacity 1) when chunks are queued
	max   int
	mu    struct {
		sync.Mutex
		chunks  [][]byte
		pending int
	}
}

func newChunkPipe(max int) *chunkPipe {
	return &chunkPipe{ready: make(chan struct{}, 1), max: max}
}

func (p *chunkPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.pending+len(b) > p.max {
		return 0, errTraceBacklog
	}
	p.mu.chunks = append(p.mu.chunks, append([]byte(nil), b...))
	p.mu.pending += len(b)
	select {
	case p.ready <- struct{}{}:
	default:
	}
	return len(b), nil
}

// take returns and forgets the queued chunks.
func (p *chunkPipe) take() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.mu.chunks
	p.mu.chunks, p.mu.pending = nil, 0
	return c
}
