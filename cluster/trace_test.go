package cluster

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnkv/cairn/api/cairnpb"
)

func TestTraceRequestValidation(t *testing.T) {
	n := &Node{}
	for _, req := range []*cairnpb.TraceRequest{
		{DurationMs: 0}, {DurationMs: -5}, {DurationMs: int64(maxTraceDuration.Milliseconds()) + 1},
		{DurationMs: 1000, MaxSizeBytes: -1},
	} {
		err := n.trace(context.Background(), req, nil)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

// TestChunkPipeBacklog checks that the trace's writer never blocks: past
// the backlog, writes fail (stopping the trace) instead of waiting.
func TestChunkPipeBacklog(t *testing.T) {
	p := newChunkPipe(10)
	if n, err := p.Write([]byte("0123456")); n != 7 || err != nil {
		t.Fatal(n, err)
	}
	select {
	case <-p.ready:
	default:
		t.Fatal("a write did not signal ready")
	}
	if _, err := p.Write([]byte("7890")); !errors.Is(err, errTraceBacklog) {
		t.Fatalf("write past the backlog: %v", err)
	}
	if got := p.take(); len(got) != 1 || string(got[0]) != "0123456" {
		t.Fatalf("take: %q", got)
	}
	if _, err := p.Write([]byte("7890")); err != nil {
		t.Fatalf("write after take: %v", err)
	}
}
