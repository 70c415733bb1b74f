package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/trace"
)

// signalWriter collects a stream and closes first at its first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   []byte
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 && len(p) > 0 {
		close(w.first)
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// TestCLITraceStart traces the leader of the shared cluster under a read
// load, through the client and through the CLI: the streamed traces read
// back and hold Get records, and a second trace on the node while one runs
// is refused with FailedPrecondition.
func TestCLITraceStart(t *testing.T) {
	nodes := testNodes(t)
	c, err := client.New(client.Config{Endpoints: strings.Split(endpoints(nodes), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 300
	for i := range n {
		if _, err := c.Put(ctx, fmt.Appendf(nil, "trace/%04d", i), []byte(strings.Repeat("v", 100))); err != nil {
			t.Fatal(err)
		}
	}
	var leader string
	for _, nd := range nodes {
		if nd.IsLeader() {
			leader = nd.GRPCAddr()
		}
	}
	if leader == "" {
		t.Fatal("no leader")
	}
	// A raft snapshot flushes the leader's memtable: reads then go
	// through its block cache.
	ok(t, "", "snapshot", "take", "--endpoint", leader)

	stopLoad := make(chan struct{})
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			c.Get(ctx, fmt.Appendf(nil, "trace/%04d", i%n))
		}
	}()
	defer func() {
		close(stopLoad)
		loadWG.Wait()
	}()

	// A first trace, through the client library.
	w := &signalWriter{first: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := c.Trace(ctx, leader, client.TraceOptions{Duration: 3 * time.Second}, w)
		done <- err
	}()
	select {
	case <-w.first: // The header arrived: the trace runs.
	case err := <-done:
		t.Fatalf("first trace: %v", err)
	}
	if _, err := c.Trace(ctx, leader, client.TraceOptions{Duration: time.Second}, io.Discard); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Fatalf("second trace on the node: %v, want ErrFailedPrecondition", err)
	}
	r := cairn(t, "", "trace", "start", "--node", leader, "--duration", "1s", "--out", filepath.Join(t.TempDir(), "refused.trace"))
	if r.code != 1 || !strings.Contains(r.stderr, "already runs") {
		t.Fatalf("second trace through the CLI: %+v", r)
	}
	if err := <-done; err != nil {
		t.Fatalf("first trace: %v", err)
	}
	if gets := countGetRecords(t, w.buf); gets == 0 {
		t.Fatal("the first trace holds no Get records")
	}

	// The node is free again: a trace through the CLI.
	path := filepath.Join(t.TempDir(), "node.trace")
	out := ok(t, "", "trace", "start", "--node", leader, "--duration", "1s", "--sampling", "1", "--max-size", "64MiB", "--out", path)
	if !strings.Contains(out, "records") || !strings.Contains(out, path) {
		t.Fatalf("trace start: %q", out)
	}
	if n, err := countTraceRecords(path); err != nil || n == 0 {
		t.Fatalf("the saved trace: %d records, %v", n, err)
	}
}

func countGetRecords(t *testing.T, data []byte) int {
	t.Helper()
	rr, err := trace.NewReader(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	gets := 0
	for {
		rec, err := rr.Next()
		if err == io.EOF {
			return gets
		} else if err != nil {
			t.Fatal(err)
		}
		if rec.Caller == trace.CallerGet && rec.Type == trace.BlockData {
			gets++
		}
	}
}

func TestParseTraceMaxSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "100": 100, "4KiB": 4096, "256MiB": 256 << 20, "1G": 1 << 30} {
		if got, err := parseTraceMaxSize(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "-1", "1TiB", "99999999999GiB"} {
		if _, err := parseTraceMaxSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
