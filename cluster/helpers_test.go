package cluster

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/internal/testnet"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var verbose = flag.Bool("cluster.log", false, "log the test nodes' output")

// waitSlack scales every waitFor timeout: the timeouts in the tests are
// what an idle machine needs with room to spare, and the tests must also
// pass on a loaded 2-core machine under -race (GOMAXPROCS=1, CPU hogs on
// both cores), where everything takes several times longer. A timeout
// only bounds how long a failing test takes to fail.
const waitSlack = 4

// waitFor polls cond until it holds, failing the test after timeout (times
// waitSlack).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout *= waitSlack
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testConfig is a node configuration for loopback tests: addresses that
// stay free for a restart (package testnet), fast raft and gossip
// timings, a fast reconcile policy.
func testConfig(t testing.TB, id string) Config {
	// A stop that is abandoned is logged in any case, with the stacks of
	// the goroutines it is stuck on: such a failure is rare and the log is
	// what explains it.
	logger := slog.New(stopFailureHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})})
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return Config{
		ID:                 id,
		DataDir:            filepath.Join(t.TempDir(), id),
		GRPCAddr:           testnet.Addr(t),
		RaftAddr:           testnet.Addr(t),
		GossipAddr:         testnet.Addr(t),
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		RequestTimeout:     5 * time.Second,
		LeaderWaitTimeout:  2 * time.Second,
		ShutdownTimeout:    2 * time.Second,
		ReconcileInterval:  100 * time.Millisecond,
		Policy: membership.Policy{
			FailedGracePeriod: 2 * time.Second,
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
			// Anti-entropy catches what lost UDP broadcasts missed.
			c.PushPullInterval = time.Second
		},
		Logger: logger.With("test", t.Name()),
	}
}

// stopFailureHandler passes on only the records of abandoned stops.
type stopFailureHandler struct{ slog.Handler }

func (h stopFailureHandler) Handle(ctx context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "did not stop cleanly") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h stopFailureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return stopFailureHandler{h.Handler.WithAttrs(as)}
}

func (h stopFailureHandler) WithGroup(name string) slog.Handler {
	return stopFailureHandler{h.Handler.WithGroup(name)}
}

// otherThan returns the first of nodes that is not n (a follower, when n
// is the leader), or nil.
func otherThan(nodes []*Node, n *Node) *Node {
	for _, o := range nodes {
		if o != n {
			return o
		}
	}
	return nil
}

// testCluster is a set of in-process nodes.
type testCluster struct {
	t     testing.TB
	nodes map[string]*Node
	cfgs  map[string]Config
	deps  map[string]*Deps
	conns map[string]*grpc.ClientConn
	// clientTLS, if set, is the TLS configuration of conn's connections
	// (plaintext without).
	clientTLS *tls.Config

	// mu guards loadConns, the connections load generators use.
	mu        sync.Mutex
	loadConns []*grpc.ClientConn
	allLoad   []*grpc.ClientConn // closed at the end
}

// setLoadTargets points the load generators at the live nodes.
func (tc *testCluster) setLoadTargets() {
	tc.t.Helper()
	var conns []*grpc.ClientConn
	for _, n := range tc.live() {
		c, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tc.t.Fatal(err)
		}
		conns = append(conns, c)
	}
	tc.mu.Lock()
	tc.loadConns = conns
	tc.allLoad = append(tc.allLoad, conns...)
	tc.mu.Unlock()
}

func newTestCluster(t testing.TB) *testCluster {
	tc := &testCluster{t: t, nodes: map[string]*Node{}, cfgs: map[string]Config{}, deps: map[string]*Deps{}, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(tc.close)
	return tc
}

// start starts a node with cfg (and deps, possibly nil).
func (tc *testCluster) start(cfg Config, deps *Deps) *Node {
	tc.t.Helper()
	n, err := New(cfg, deps)
	if err != nil {
		tc.t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		tc.t.Fatalf("starting %s: %v", cfg.ID, err)
	}
	// A restart reuses the actual addresses.
	cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = n.GRPCAddr(), n.RaftAddr(), n.GossipAddr()
	if deps != nil && deps.Transport != nil {
		cfg.RaftAddr = "127.0.0.1:0"
	}
	tc.nodes[cfg.ID], tc.cfgs[cfg.ID], tc.deps[cfg.ID] = n, cfg, deps
	// Stop the node before its data directory is removed: t.TempDir's
	// cleanup (registered by testConfig, before this one) runs after
	// this, whereas tc.close was registered before it and runs after the
	// removal, which failed ("directory not empty") when a node still
	// wrote.
	tc.t.Cleanup(func() { n.kill() })
	if c := tc.conns[cfg.ID]; c != nil {
		c.Close()
		delete(tc.conns, cfg.ID)
	}
	return n
}

// formCluster starts size nodes n1..n<size> that form a cluster by
// bootstrap-expect, and waits for a leader ready to serve reads.
func (tc *testCluster) formCluster(size int, tune func(*Config)) []*Node {
	tc.t.Helper()
	var nodes []*Node
	var seed string
	for i := 1; i <= size; i++ {
		cfg := testConfig(tc.t, fmt.Sprintf("n%d", i))
		cfg.BootstrapExpect = size
		if seed != "" {
			cfg.Join = []string{seed}
		}
		if tune != nil {
			tune(&cfg)
		}
		n := tc.start(cfg, nil)
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	tc.waitReady(nodes, size)
	return nodes
}

// waitReady waits until one of nodes leads a configuration of voters
// voters and serves linearizable reads, and every node knows it.
func (tc *testCluster) waitReady(nodes []*Node, voters int) *Node {
	tc.t.Helper()
	var leader *Node
	waitFor(tc.t, 15*time.Second, "a ready leader", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				leader = n
			}
		}
		if leader == nil || tc.voters(leader) != voters {
			return false
		}
		for _, n := range nodes {
			if id, addr := n.Leader(); id != leader.ID() || addr == "" {
				return false
			}
		}
		return true
	})
	return leader
}

// leader returns the live node that leads, waiting for one.
func (tc *testCluster) leader() *Node {
	tc.t.Helper()
	var leader *Node
	waitFor(tc.t, 15*time.Second, "a ready leader", func() bool {
		for _, n := range tc.live() {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func (tc *testCluster) voters(n *Node) int {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return -1
	}
	v := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// configIDs returns the IDs in n's raft configuration, sorted.
func configIDs(n *Node) []string {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	var ids []string
	for _, s := range cf.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	return ids
}

// live returns the nodes not shut down, sorted by ID.
func (tc *testCluster) live() []*Node {
	var out []*Node
	for _, n := range tc.nodes {
		n.lifeMu.Lock()
		down := n.shutdown
		n.lifeMu.Unlock()
		if !down {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *Node) int { return cmpString(a.ID(), b.ID()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// restart starts a stopped node again with its configuration and
// addresses.
func (tc *testCluster) restart(id string) *Node {
	tc.t.Helper()
	cfg := tc.cfgs[id]
	cfg.BootstrapExpect = 0
	// Another process (tests run in parallel on a shared machine) may have
	// taken the node's old gRPC port: then take a new one (clients find it
	// through gossip). The raft address must stay: the configuration
	// names it.
	if l, err := net.Listen("tcp", cfg.GRPCAddr); err != nil {
		cfg.GRPCAddr = "127.0.0.1:0"
	} else {
		l.Close()
	}
	return tc.start(cfg, tc.deps[id])
}

func (tc *testCluster) conn(n *Node) *grpc.ClientConn {
	tc.t.Helper()
	if c := tc.conns[n.ID()]; c != nil {
		return c
	}
	creds := insecure.NewCredentials()
	if tc.clientTLS != nil {
		creds = credentials.NewTLS(tc.clientTLS)
	}
	c, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.conns[n.ID()] = c
	return c
}

func (tc *testCluster) kv(n *Node) cairnpb.KVClient { return cairnpb.NewKVClient(tc.conn(n)) }

func (tc *testCluster) admin(n *Node) cairnpb.ClusterClient {
	return cairnpb.NewClusterClient(tc.conn(n))
}

func (tc *testCluster) close() {
	tc.mu.Lock()
	for _, c := range tc.allLoad {
		c.Close()
	}
	tc.mu.Unlock()
	for _, c := range tc.conns {
		c.Close()
	}
	for _, n := range tc.nodes {
		if err := n.kill(); err != nil {
			tc.t.Logf("stopping %s: %v", n.ID(), err)
		}
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// helperSeq numbers the writes of put, which retries them (with the same
// client_id and seq, so at most once) while leadership moves.
var helperSeq atomic.Uint64

// retryable reports whether a request failed because leadership moved or
// was being established.
func retryable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

func put(t testing.TB, c cairnpb.KVClient, key, value string) *cairnpb.PutResponse {
	t.Helper()
	req := &cairnpb.PutRequest{Key: []byte(key), Value: []byte(value), ClientId: "test-helper", Seq: helperSeq.Add(1)}
	deadline := time.Now().Add(15 * waitSlack * time.Second)
	for {
		resp, err := c.Put(ctxTimeout(t, 5*time.Second), req)
		if err == nil {
			return resp
		}
		if !retryable(err) || time.Now().After(deadline) {
			t.Fatalf("put %q: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t testing.TB, c cairnpb.KVClient, key string, cons cairnpb.Consistency) *cairnpb.GetResponse {
	t.Helper()
	deadline := time.Now().Add(15 * waitSlack * time.Second)
	for {
		resp, err := c.Get(ctxTimeout(t, 5*time.Second), &cairnpb.GetRequest{Key: []byte(key), Consistency: cons})
		if err == nil {
			return resp
		}
		if !retryable(err) || time.Now().After(deadline) {
			t.Fatalf("get %q: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
