package client_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

var verbose = flag.Bool("cluster.log", false, "log the test nodes' output")

// nodeConfig is a node configuration for loopback tests: free ports, fast
// raft and gossip timings.
func nodeConfig(dir, id string) cluster.Config {
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id)
	}
	return cluster.Config{
		ID:         id,
		DataDir:    filepath.Join(dir, id),
		GRPCAddr:   "127.0.0.1:0",
		RaftAddr:   "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0",
		// raft's defaults: these tests kill no leader, so fast elections
		// buy nothing, and shorter timeouts made elections churn and
		// leadership transfers time out under -race on a loaded 2-core
		// machine (150ms did; 300ms still did with CPU hogs).
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		RequestTimeout:     5 * time.Second,
		LeaderWaitTimeout:  2 * time.Second,
		ShutdownTimeout:    2 * time.Second,
		ReconcileInterval:  100 * time.Millisecond,
		Policy: membership.Policy{
			FailedGracePeriod: time.Minute,
			MinQuorum:         3,
			CatchUpThreshold:  256,
			StabilizationTime: 200 * time.Millisecond,
			MaxVoters:         5,
			MaxLastContact:    2 * time.Second,
		},
		GossipProfile: membership.ProfileLocal,
		GossipTune: func(c *memberlist.Config) {
			c.ProbeInterval = 200 * time.Millisecond
			c.ProbeTimeout = 100 * time.Millisecond
			c.GossipInterval = 50 * time.Millisecond
			c.SuspicionMult = 2
		},
		Logger: logger,
	}
}

// testCluster is a set of in-process nodes on loopback.
type testCluster struct {
	nodes []*cluster.Node
}

// startCluster starts size nodes n1..n<size> that form a cluster by
// bootstrap-expect, and waits until every node knows the leader and its
// address.
func startCluster(dir string, size int) (*testCluster, error) {
	tc := &testCluster{}
	var seed string
	for i := 1; i <= size; i++ {
		cfg := nodeConfig(dir, fmt.Sprintf("n%d", i))
		cfg.BootstrapExpect = size
		if seed != "" {
			cfg.Join = []string{seed}
		}
		n, err := cluster.New(cfg, nil)
		if err == nil {
			err = n.Start()
		}
		if err != nil {
			tc.stop()
			return nil, err
		}
		if seed == "" {
			seed = n.GossipAddr()
		}
		tc.nodes = append(tc.nodes, n)
	}
	if err := tc.waitLeader(20 * time.Second); err != nil {
		tc.stop()
		return nil, err
	}
	return tc, nil
}

func newTestCluster(t testing.TB, size int) *testCluster {
	t.Helper()
	tc, err := startCluster(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.stop)
	return tc
}

// waitLeader waits until one node leads and every running node knows its
// ID and gRPC address.
func (tc *testCluster) waitLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var leader string
		ok := true
		for _, n := range tc.nodes {
			if n.IsLeader() {
				leader = n.ID()
			}
		}
		for _, n := range tc.nodes {
			if id, addr := n.Leader(); leader == "" || id != leader || addr == "" {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader after %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (tc *testCluster) endpoints() []string {
	var eps []string
	for _, n := range tc.nodes {
		eps = append(eps, n.GRPCAddr())
	}
	return eps
}

// stableLeader waits until every node knows one leader (an election may be
// under way on a loaded machine) and returns it.
func (tc *testCluster) stableLeader(t testing.TB) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := tc.waitLeader(time.Until(deadline)); err != nil {
			t.Fatal(err)
		}
		if l := tc.leader(); l != nil {
			return l
		}
	}
}

// leader returns the node that currently leads, or nil.
func (tc *testCluster) leader() *cluster.Node {
	for _, n := range tc.nodes {
		if n.IsLeader() {
			return n
		}
	}
	return nil
}

// stop shuts the nodes down in parallel. It gives up after 20s: a test
// must not hang on a node that does not stop (a whole cluster stopping at
// once used to hang one, see cluster.TestConcurrentShutdown).
func (tc *testCluster) stop() {
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, n := range tc.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				n.Shutdown(ctx)
			}()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Fprintln(os.Stderr, "warning: the test cluster did not shut down within 20s")
		stopHung.Store(true)
	}
}

// stopHung is set if a cluster did not shut down (goroutines then leak).
var stopHung atomic.Bool

func newClient(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The examples share one single-node cluster, started on first use.
var example struct {
	once sync.Once
	dir  string
	tc   *testCluster
	err  error
}

// exampleEndpoint returns the gRPC address of a single-node cluster for
// the examples; a program would use its nodes' addresses, such as
// client.DefaultEndpoint for a node started with no flags.
func exampleEndpoint() string {
	example.once.Do(func() {
		example.dir, example.err = os.MkdirTemp("", "cairn-example")
		if example.err == nil {
			example.tc, example.err = startCluster(example.dir, 1)
		}
	})
	if example.err != nil {
		panic(example.err)
	}
	return example.tc.nodes[0].GRPCAddr()
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if example.tc != nil {
		example.tc.stop()
	}
	if example.dir != "" {
		os.RemoveAll(example.dir)
	}
	if code == 0 && !stopHung.Load() {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}
