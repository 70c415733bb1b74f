package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

var verbose = flag.Bool("cluster.log", false, "log the test nodes' output")

// The CLI tests share one 3-node cluster, started on first use.
var shared struct {
	once  sync.Once
	dir   string
	nodes []*cluster.Node
	err   error
}

func nodeConfig(dir, id string) cluster.Config {
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", id)
	}
	return cluster.Config{
		ID: id, DataDir: filepath.Join(dir, id),
		GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		// raft's defaults: these tests kill no leader, so fast elections
		// buy nothing, and shorter timeouts made elections churn and
		// leadership transfers time out under -race on a loaded 2-core
		// machine (150ms did; 300ms still did with CPU hogs).
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		RequestTimeout: 5 * time.Second, LeaderWaitTimeout: 2 * time.Second, ShutdownTimeout: 2 * time.Second,
		ReconcileInterval: 100 * time.Millisecond,
		Policy: membership.Policy{FailedGracePeriod: time.Minute, MinQuorum: 3, CatchUpThreshold: 256,
			StabilizationTime: 200 * time.Millisecond, MaxVoters: 5, MaxLastContact: 2 * time.Second},
		GossipProfile: membership.ProfileLocal,
		GossipTune: func(c *memberlist.Config) {
			c.ProbeInterval, c.ProbeTimeout, c.GossipInterval, c.SuspicionMult = 200*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond, 2
		},
		// Encrypted gossip, so that `cairn gossip-key` has a keyring
		// to rotate.
		GossipKey: bytes.Repeat([]byte{1}, 32),
		Logger:    logger,
	}
}

// testNodes returns the shared cluster's nodes, starting it if needed.
func testNodes(t testing.TB) []*cluster.Node {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "cairn-cli-test"); shared.err != nil {
			return
		}
		var seed string
		for i := 1; i <= 3; i++ {
			cfg := nodeConfig(shared.dir, fmt.Sprintf("n%d", i))
			cfg.BootstrapExpect = 3
			if seed != "" {
				cfg.Join = []string{seed}
			}
			n, err := cluster.New(cfg, nil)
			if err == nil {
				err = n.Start()
			}
			if err != nil {
				shared.err = err
				return
			}
			if seed == "" {
				seed = n.GossipAddr()
			}
			shared.nodes = append(shared.nodes, n)
		}
		shared.err = waitLeader(shared.nodes, 20*time.Second)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.nodes
}

// waitLeader waits until every node knows the same leader and its address.
func waitLeader(nodes []*cluster.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leader, ok := "", true
		for _, n := range nodes {
			if n.IsLeader() {
				leader = n.ID()
			}
		}
		for _, n := range nodes {
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

func endpoints(nodes []*cluster.Node) string {
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.GRPCAddr())
	}
	return strings.Join(eps, ",")
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	stopped := stopNodes(shared.nodes, 20*time.Second)
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	if code == 0 && stopped {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is one in-process run of the CLI.
type result struct {
	stdout, stderr string
	code           int
}

// cairn runs the CLI in-process with stdin and the arguments (to which it
// adds --endpoints of the shared cluster unless the arguments set them).
func cairn(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	hasEndpoints := false
	for _, a := range args {
		if strings.HasPrefix(a, "--endpoints") {
			hasEndpoints = true
		}
	}
	if !hasEndpoints && os.Getenv(envEndpoints) == "" {
		args = append([]string{"--endpoints", endpoints(testNodes(t))}, args...)
	}
	// A generous deadline unless the test sets one: on a loaded machine an
	// election can outlast the default 5s.
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--timeout") }) {
		args = append([]string{"--timeout", "30s"}, args...)
	}
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return result{out.String(), errb.String(), code}
}

// ok runs the CLI and fails the test unless it exits with 0.
func ok(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	r := cairn(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("cairn %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// stopNodes shuts the nodes down in parallel, giving up after timeout
// (reporting false): a test binary must not hang on a node that does not
// stop (a whole cluster stopping at once used to hang one, see
// cluster.TestConcurrentShutdown).
func stopNodes(nodes []*cluster.Node, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
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
		return true
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "warning: the test cluster did not shut down within %v\n", timeout)
		return false
	}
}
