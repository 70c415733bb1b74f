package cluster

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

var shutdownIters = flag.Int("shutdown.iters", 3, "iterations of TestConcurrentShutdown")

// TestConcurrentShutdown starts a 3-node cluster, writes to it, and shuts
// all three down at once, gracefully, many times (-shutdown.iters): each
// Shutdown must return (and release its data directory) within a bound
// however the others' shutdowns interleave with it. On a hang it prints
// every goroutine.
func TestConcurrentShutdown(t *testing.T) {
	for iter := range *shutdownIters {
		tc := newTestCluster(t)
		nodes := tc.formCluster(3, nil)
		for i := range 20 {
			put(t, tc.kv(tc.leader()), fmt.Sprintf("k%d", i), "v")
		}
		var wg sync.WaitGroup
		errs := make([]error, len(nodes))
		start := time.Now()
		for i, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = n.Shutdown(ctxTimeout(t, 30*time.Second))
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			var b bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&b, 2)
			os.Stderr.Write(b.Bytes())
			t.Fatalf("iteration %d: shutting down 3 nodes at once did not finish in 60s", iter)
		}
		t.Logf("iteration %d: all stopped in %v (errors %v)", iter, time.Since(start).Round(time.Millisecond), errs)
		// The data directories are released: each node restarts.
		for _, n := range nodes {
			tc.restart(n.ID())
		}
		tc.waitReady(tc.live(), 3)
		if got := get(t, tc.kv(tc.leader()), "k19", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "v" {
			t.Fatalf("iteration %d: after restart, k19 = %v", iter, got)
		}
		tc.close()
	}
}

// A node whose raft cannot shut down (here its state machine is stuck in
// an apply, and raft waits for it) still returns from Shutdown after
// StopTimeout, with ErrStopIncomplete, and releases its data directory.
// Before the bound, Shutdown waited for ever.
func TestShutdownAbandonsStuckRaft(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	cfg.StopTimeout = time.Second
	var logs lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	release := make(chan struct{})
	stuck := make(chan struct{}, 1)
	stall := func() {
		select {
		case stuck <- struct{}{}:
		default:
		}
		<-release
	}
	n.fsm.beforeApply.Store(&stall)
	go tc.kv(n).Put(ctxTimeout(t, 5*time.Second), &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	<-stuck

	start := time.Now()
	err := n.Shutdown(ctxTimeout(t, 10*time.Second))
	took := time.Since(start)
	if !errors.Is(err, ErrStopIncomplete) || !strings.Contains(err.Error(), "raft's shutdown") || took > 8*time.Second {
		t.Fatalf("Shutdown of a stuck node: %v after %v", err, took)
	}
	t.Logf("Shutdown returned after %v: %v", took.Round(time.Millisecond), err)
	// The log says where raft is stuck: the FSM goroutine, in the apply.
	if l := logs.String(); !strings.Contains(l, "did not stop cleanly") || !strings.Contains(l, "runFSM") {
		t.Fatalf("the log of the abandoned stop does not show the stuck goroutine:\n%s", l)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		t.Fatalf("data directory still locked: %v", err)
	}
	lock.Close()

	// Let the abandoned raft finish, and close what it left open.
	close(release)
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.closers {
		c.Close()
	}
	n.fsm.Close()
}
