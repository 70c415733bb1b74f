package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/auth"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/snapstore"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ErrNotStarted is returned by methods that need a started node.
var ErrNotStarted = errors.New("cluster: node not started")

// ErrShutdown is returned by Start after Shutdown.
var ErrShutdown = errors.New("cluster: node shut down")

// minStepWait is the least time runBounded gives a step of stopping.
const minStepWait = 500 * time.Millisecond

// ErrStopIncomplete is wrapped by Shutdown's error when a step of stopping
// the node (raft, gossip, the background loops, closing the stores) did not
// finish within Config.StopTimeout and was abandoned. The data directory
// is released anyway; abandoned goroutines may still hold its files open,
// so the process should exit rather than start the node again.
var ErrStopIncomplete = errors.New("cluster: node did not stop cleanly")

// Node is one cairn server: a raft member whose state machine is an fsm.FSM,
// discovered by its peers through memberlist, serving the KV and Cluster
// gRPC services. See doc.go for its parts and their lifecycle.
//
// Create it with New, then Start it; Shutdown stops it (once). Its methods
// are safe for concurrent use.
type Node struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	// Set by Start, read-only afterwards.
	fsm        *raftFSM
	raft       *raft.Raft
	logs       raft.LogStore          // the log cache over the log store
	closers    []io.Closer            // stores the node opened, closed last
	lock       *os.File               // the data directory's lock, released at the very end
	netTrans   *raft.NetworkTransport // the TCP transport, if the node made it
	snapStore  *snapstore.Store       // cairn's snapshot store, unless Deps gave another
	disc       *membership.Discovery
	grpc       *grpc.Server
	health     *health.Server
	lis        net.Listener
	fwd        *forwarder
	tls        *tlsState // nil without TLS
	raftTLS    *tlsStreamLayer
	notifyCh   chan bool
	grpcAddr   string // advertised
	raftAddr   string // advertised
	gossipAddr string // advertised
	applier    *membership.Applier
	// incarnation identifies this run in gossip (membership.Meta).
	incarnation uint64

	// readyTerm is the term in which this node, as leader, completed its
	// barrier: from then on its commit index covers every entry committed
	// by earlier leaders, and it may serve linearizable reads.
	readyTerm atomic.Uint64
	// leaderChange wakes waiters on readyTerm and on leadership.
	leaderChange notifier
	// reads batches linearizable reads' leadership confirmation rounds.
	reads readBarrier
	// leaders records the leader changes this node sees (observe.go).
	leaders leaderWatch
	// reconcileActions counts the reconcile loop's actions by kind.
	reconcileActions kindCounter
	// forwarded counts the requests forwarded to the leader by gRPC
	// method (route).
	forwarded kindCounter

	// members caches the gossip view by ID, refreshed on every membership
	// change by watchMembers.
	members atomic.Pointer[map[string]membership.Member]
	// reconcilePoke and bootstrapPoke wake the loops that act on
	// membership changes (coalescing channels of capacity one).
	reconcilePoke chan struct{}
	bootstrapPoke chan struct{}
	// progress is the leader's latest view of its followers (nil on
	// followers), for Members.
	progress atomic.Pointer[map[raft.ServerID]membership.ServerProgress]
	// reconcileRounds counts reconcile rounds (for tests).
	reconcileRounds atomic.Uint64
	// testGossipView, if set, replaces the gossip view reconcile reads
	// (tests stage a stale view with it).
	testGossipView atomic.Pointer[func() []membership.Member]
	// savedPeers is what savePeers last wrote.
	savedPeers []string
	// keyringMu serializes gossip keyring changes with the writes of the
	// keyring file (gossipkeys.go).
	keyringMu sync.Mutex
	// compactions hears the engine's compactions, for the snapshot
	// refresh (snaprefresh.go).
	compactions *compactionEvents
	// auth authorizes gRPC calls (nil without Config.AuthFile).
	auth *auth.Authorizer
	// verifier keeps the members verified as peers (verify.go).
	verifier *peerVerifier
	// raftStarted is n.raft once NewRaft returned, for the goroutines that
	// may run before (the raft transport's handshakes).
	raftStarted atomic.Pointer[raft.Raft]
	// cluster is the node's cluster ID (clusterid.go).
	cluster clusterIdentity
	// refusedSeen holds the gossip refusals already logged.
	refusedSeen sync.Map
	// failCh receives the reason the node must not go on (Failed);
	// failed is set then: its Shutdown does not leave gossip (a leave in
	// the name of a node whose ID it shares would be the other node's).
	failCh chan error
	failed atomic.Bool
	// raftUp is closed once raftStarted is set.
	raftUp chan struct{}
	// peerIDs caches the configuration's server IDs for peerIDAllowed.
	peerIDs atomic.Pointer[peerIDs]
	// peerIDsLoading: a goroutine is re-reading peerIDs.
	peerIDsLoading atomic.Bool
	// repl is the leader's view of its followers' replication
	// (replprogress.go).
	repl *replTracker
	// retention counts the raft log's bytes, under the log cache, for
	// its byte bounds (retention.go).
	retention *logBytes

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	lifeMu   sync.Mutex
	started  bool // REQUIRES: lifeMu
	shutdown bool // REQUIRES: lifeMu
}

// New checks cfg and returns a node ready to Start. deps may be nil.
func New(cfg Config, deps *Deps) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: c, log: c.Logger.With("node", c.ID)}
	if deps != nil {
		n.deps = *deps
	}
	if (n.deps.LogStore == nil) != (n.deps.StableStore == nil) {
		return nil, fmt.Errorf("%w: supply both a LogStore and a StableStore, or neither", ErrInvalidConfig)
	}
	var peerCAs *x509.CertPool
	if c.TLS.Enabled() {
		if n.tls, err = c.TLS.load(n.log); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		peerCAs = n.tls.peerCAs
		// Peers verify a node by the ID its certificate names
		// (verify.go): one that does not name this node's would never be
		// added to a cluster, so say so now.
		if leaf := n.tls.cert.Leaf; leaf != nil && !slices.Contains(auth.NodeNames(leaf), c.ID) {
			return nil, fmt.Errorf("%w: TLS certificate file %s names %q (its CN), not this node's ID %q: "+
				"peers identify a node by its ID in its certificate", ErrInvalidConfig, c.TLS.CertFile, auth.NodeNames(leaf), c.ID)
		}
	}
	if n.auth, err = newAuthorizer(&n.cfg, peerCAs); err != nil {
		return nil, err
	}
	mode := verifyNone
	switch {
	case n.tls != nil:
		mode = verifyTLS
	case c.AuthPeerToken != "":
		mode = verifyToken
	}
	n.verifier = newPeerVerifier(mode, c.AuthPeerToken)
	if n.tls != nil {
		n.tls.raftPeerAllowed = n.peerIDAllowed
	}
	n.raftUp = make(chan struct{})
	n.failCh = make(chan error, 1)
	n.leaderChange.init()
	n.reconcilePoke = make(chan struct{}, 1)
	n.bootstrapPoke = make(chan struct{}, 1)
	empty := map[string]membership.Member{}
	n.members.Store(&empty)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// Start opens the node's stores, starts raft, gossip and the gRPC server,
// and joins or bootstraps the cluster as configured. It returns once the
// node serves; it does not wait for a leader (see WaitLeader). On error
// everything started is stopped again.
func (n *Node) Start() (err error) {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	switch {
	case n.shutdown:
		return ErrShutdown
	case n.started:
		return errors.New("cluster: node already started")
	}
	defer func() {
		if err != nil {
			n.cancel()
			n.stopLocked(context.Background(), false)
			n.shutdown = true
		}
	}()
	c := &n.cfg
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return fmt.Errorf("cluster: data directory: %w", err)
	}
	lock, err := lockDataDir(c.DataDir)
	if err != nil {
		return err
	}
	n.lock = lock
	if err := checkNodeID(c.DataDir, c.ID); err != nil {
		return err
	}
	if err := checkSeedComplete(c.DataDir); err != nil {
		return err
	}
	raftDir := filepath.Join(c.DataDir, raftDirName)
	if err := os.MkdirAll(raftDir, 0o755); err != nil {
		return fmt.Errorf("cluster: data directory: %w", err)
	}

	// Listeners and gossip first: a port in use fails fast, before any
	// state opens.
	n.lis, err = net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return fmt.Errorf("cluster: gRPC address %s: %w", c.GRPCAddr, err)
	}
	n.lis = limitListener(n.lis, c.MaxConnsPerIP, func(ip string) {
		n.log.Debug("cluster: refused a gRPC connection: too many from its address", "ip", ip, "cap", c.MaxConnsPerIP)
	})
	if n.grpcAddr, err = advertiseAddr(c.AdvertiseGRPCAddr, n.lis.Addr()); err != nil {
		return fmt.Errorf("cluster: gRPC address %s: %w", c.GRPCAddr, err)
	}
	trans := n.deps.Transport
	if trans == nil {
		nt, err := n.newTCPTransport()
		if err != nil {
			return err
		}
		trans = nt
		n.netTrans = nt
		n.closers = append(n.closers, nt)
	}
	// The leader judges its followers' health from its own raft's
	// replication (replprogress.go).
	n.repl = newReplTracker(c.Now)
	trans = newObservedTransport(trans, n.repl)
	n.raftAddr = string(trans.LocalAddr())
	peerCreds := insecure.NewCredentials()
	if n.tls != nil {
		peerCreds = credentials.NewTLS(n.tls.peerClientConfig("grpc-out"))
	}
	n.fwd = newForwarder(n.cfg.MaxValueSize, peerCreds)
	if n.incarnation, err = nextIncarnation(c.DataDir, time.Now()); err != nil {
		return err
	}
	if n.cluster.id, err = loadClusterID(c.DataDir); err != nil {
		return err
	}
	if n.cluster.id != "" {
		n.log.Info("cluster: data directory belongs to cluster", "cluster_id", n.cluster.id)
	}
	if err := n.startGossip(); err != nil {
		return err
	}

	// Raft's stores.
	logStore, stable := n.deps.LogStore, n.deps.StableStore
	if logStore == nil {
		kind, why, err := resolveLogStore(c.RaftLogStore, raftDir)
		if err != nil {
			return err
		}
		n.log.Info("raft log store", "store", kind, "why", why, "dir", raftDir)
		var closer io.Closer
		logStore, stable, closer, err = openNodeLogStore(c, kind, raftDir)
		if err != nil {
			return err
		}
		n.closers = append(n.closers, closer)
	}
	if n.retention, err = newLogBytes(logStore); err != nil {
		return fmt.Errorf("cluster: reading the raft log: %w", err)
	}
	if n.logs, err = raft.NewLogCache(logCacheSize, n.retention); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	snaps := n.deps.SnapshotStore
	var ownSnaps *snapstore.Store
	if snaps == nil {
		ss, err := openSnapshotStore(c, raftDir, log.New(slogWriter{n.log}, "", 0))
		if err != nil {
			return err
		}
		snaps, ownSnaps = ss, ss
	}
	// A store that keeps checkpoint directories lets Restore link them.
	checkpoints, _ := snaps.(fsm.CheckpointSource)

	// The state machine. Its engine reports compactions to the snapshot
	// refresh (snaprefresh.go).
	var engine lsm.Options
	if c.Engine != nil {
		engine = *c.Engine
	}
	n.compactions = newCompactionEvents()
	engine.EventListener = n.compactions.listener(engine.EventListener)
	f, err := fsm.New(filepath.Join(c.DataDir, fsmDirName), &fsm.Options{
		Engine:       &engine,
		MaxValueSize: c.MaxValueSize,
		Checkpoints:  checkpoints,
		Logger:       log.New(slogWriter{n.log}, "", 0),
	})
	if err != nil {
		return err
	}
	departed, err := loadDeparted(c.DataDir)
	if err != nil {
		f.Close()
		return err
	}
	n.fsm = &raftFSM{FSM: f, snaps: snaps, departed: departed, log: n.log,
		onClusterID: func(id string) { n.adoptClusterID(id, "raft entry") }}
	n.fsm.loadSnapshotConfigIndex()
	restore, why, err := restoreOnStart(snaps, f)
	if err != nil {
		return err
	}
	n.log.Info("cluster: opened state machine", "applied_index", f.AppliedIndex(), "restore_snapshot", restore, "why", why)

	// Raft.
	rc := c.raftConfig()
	rc.NoSnapshotRestoreOnStart = !restore
	rc.Logger = newHCLogger("raft", n.log, c.RaftLogLevel)
	n.notifyCh = make(chan bool, 16)
	rc.NotifyCh = n.notifyCh
	hasState, err := raft.HasExistingState(n.logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("cluster: reading raft state: %w", err)
	}
	if err := checkRaftState(hasState, f, c.DataDir); err != nil {
		return err
	}
	if n.raft, err = raft.NewRaft(rc, n.fsm, n.logs, stable, snaps, trans); err != nil {
		return fmt.Errorf("cluster: starting raft: %w", err)
	}
	n.raftStarted.Store(n.raft)
	close(n.raftUp)
	n.applier = &membership.Applier{Raft: n.raft, Timeout: c.ApplyTimeout}

	// gRPC.
	serverOpts := append(n.serverLimitOptions(),
		// Serve requests on a pool of goroutines whose stacks have grown
		// already (gRPC falls back to a new goroutine when every worker is
		// busy): a new goroutine per request spent ~12% of a leader's CPU
		// growing its stack (runtime.newstack/copystack) under 64 clients
		// of linearizable gets.
		grpc.NumStreamWorkers(grpcStreamWorkers),
	)
	if n.tls != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(n.tls.grpcServerConfig())))
	}
	// Authorization runs after the limits and the metrics interceptors
	// (GRPCServerOptions), so that refused calls are counted.
	serverOpts = append(append(serverOpts, c.GRPCServerOptions...), n.authOptions()...)
	n.grpc = grpc.NewServer(serverOpts...)
	cairnpb.RegisterKVServer(n.grpc, &kvService{n: n})
	cairnpb.RegisterClusterServer(n.grpc, &clusterService{n: n})
	cairnpb.RegisterReadIndexServer(n.grpc, &readIndexService{n: n})
	n.health = health.NewServer()
	hs := &healthService{Server: n.health, n: n}
	healthpb.RegisterHealthServer(n.grpc, hs)
	reflection.Register(n.grpc)
	for _, svc := range []string{cairnpb.KV_ServiceDesc.ServiceName, cairnpb.Cluster_ServiceDesc.ServiceName} {
		n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	// The overall status is readiness, which healthLoop keeps current.
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	lis := n.lis
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("cluster: gRPC server stopped", "err", err)
		}
	}()

	// Background loops.
	n.wg.Add(5)
	go n.watchMembers()
	go n.leadershipLoop()
	go n.watchLeaders()
	go n.healthLoop(hs)
	go n.clusterIDLoop()
	if ownSnaps != nil {
		n.snapStore = ownSnaps
		ownSnaps.OnCommit(n.compactions.wake)
		n.wg.Add(1)
		go n.refreshSnapshotsLoop(ownSnaps, filepath.Join(c.DataDir, fsmDirName, "engine"), snapshotRefresh)
	}
	n.wg.Add(1)
	go n.retainLogLoop()
	seeds := slices.Clone(c.Join)
	for _, p := range loadPeers(c.DataDir) {
		if p != n.gossipAddr && !slices.Contains(seeds, p) {
			seeds = append(seeds, p)
		}
	}
	if len(seeds) > 0 {
		n.wg.Add(1)
		go n.joinLoop(seeds)
	}
	switch {
	case hasState:
		n.log.Info("cluster: resuming with existing raft state")
	case c.BootstrapExpect == 1:
		if err := n.bootstrap([]raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(c.ID), Address: raft.ServerAddress(n.raftAddr)}}); err != nil {
			return err
		}
	case c.BootstrapExpect > 1:
		n.wg.Add(1)
		go n.bootstrapLoop()
	default:
		n.log.Info("cluster: waiting to be added to a cluster")
	}
	n.started = true
	n.log.Info("cluster: node started", "grpc", n.grpcAddr, "raft", n.raftAddr, "gossip", n.gossipAddr)
	return nil
}

// grpcStreamWorkers is the number of gRPC server worker goroutines. A
// write holds its worker until raft commits it, so with more calls in
// flight than workers every further call runs on a new goroutine, which
// grows its stack again (runtime.newstack/copystack was ~5% of a leader's
// CPU under 256 concurrent puts with 64 workers). An idle worker costs its
// stack (8-32 KiB).
const grpcStreamWorkers = 256

// maxMessageSize bounds gRPC messages: the largest value and key with room
// for the rest of a request.
func maxMessageSize(maxValue int) int {
	return maxValue + cairnpb.MaxKeySize + 1<<20
}

// raftNetTimeout is the raft transport's I/O timeout (and its TLS
// handshakes').
const raftNetTimeout = 10 * time.Second

// newTCPTransport makes the raft transport: plain TCP, or TLS with
// Config.TLS.
func (n *Node) newTCPTransport() (*raft.NetworkTransport, error) {
	c := &n.cfg
	var adv net.Addr
	switch {
	case c.AdvertiseRaftAddr != "":
		a, err := resolveTCP(c.AdvertiseRaftAddr)
		if err != nil {
			return nil, fmt.Errorf("cluster: advertised raft address: %w", err)
		}
		adv = a
	default:
		host, port, err := splitHostPort(c.RaftAddr)
		if err != nil {
			return nil, fmt.Errorf("cluster: raft address: %w", err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			if port == 0 {
				return nil, fmt.Errorf("cluster: raft address %s binds all interfaces on a random port: set an advertised raft address", c.RaftAddr)
			}
			s, err := advertiseAddr("", &net.TCPAddr{IP: net.IPv4zero, Port: port})
			if err != nil {
				return nil, fmt.Errorf("cluster: raft address %s: %w", c.RaftAddr, err)
			}
			if adv, err = resolveTCP(s); err != nil {
				return nil, fmt.Errorf("cluster: raft address %s: %w", c.RaftAddr, err)
			}
		}
	}
	tc := &raft.NetworkTransportConfig{
		MaxPool: 3,
		// No pipelined replication (fewer than 2 RPCs in flight turns it
		// off): hashicorp/raft's pipeline wedges when a follower rejects
		// an append. Its response decoder then stops while the sender may
		// park for ever on the pipeline's channel, so the leader sends
		// that follower heartbeats but never another entry, and raft's
		// Shutdown waits for the parked sender
		// (TestFollowerRejectionDoesNotWedgeReplication;
		// grafana/pyroscope#5518 found the same). Without it each
		// follower gets one AppendEntries at a time, of up to
		// MaxAppendEntries entries.
		MaxRPCsInFlight: 1,
		Timeout:         raftNetTimeout,
		Logger:          newHCLogger("raft-net", n.log, c.RaftLogLevel),
	}
	if n.tls != nil {
		sl, err := newTLSStreamLayer(c.RaftAddr, adv, n.tls, raftNetTimeout)
		if err != nil {
			return nil, fmt.Errorf("cluster: raft address %s: %w", c.RaftAddr, err)
		}
		n.raftTLS = sl
		tc.Stream = sl
		return raft.NewNetworkTransportWithConfig(tc), nil
	}
	t, err := raft.NewTCPTransportWithConfig(c.RaftAddr, adv, tc)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft address %s: %w", c.RaftAddr, err)
	}
	return t, nil
}

func (n *Node) startGossip() error {
	c := &n.cfg
	host, port, err := splitHostPort(c.GossipAddr)
	if err != nil {
		return fmt.Errorf("cluster: gossip address: %w", err)
	}
	primaryKey, otherKeys, err := n.gossipKeys()
	if err != nil {
		return err
	}
	mc := membership.Config{
		Meta: membership.Meta{
			ID:          c.ID,
			RaftAddr:    n.raftAddr,
			GRPCAddr:    n.grpcAddr,
			NonVoter:    c.NonVoter,
			Incarnation: n.incarnation,
			ClusterID:   n.cluster.id,
		},
		OnRefuse:  n.onRefused,
		BindAddr:  host,
		BindPort:  port,
		Profile:   c.GossipProfile,
		SecretKey: primaryKey,
		Keys:      otherKeys,
		Logger:    n.log.With("component", "memberlist"),
		Now:       c.Now,
		Tune:      c.GossipTune,
	}
	if c.AdvertiseGossipAddr != "" {
		ah, ap, err := splitHostPort(c.AdvertiseGossipAddr)
		if err != nil {
			return fmt.Errorf("cluster: advertised gossip address: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	}
	if n.disc, err = membership.New(mc); err != nil {
		return fmt.Errorf("cluster: gossip address %s: %w", c.GossipAddr, err)
	}
	n.gossipAddr = n.disc.LocalAddr()
	n.refreshMembers()
	return nil
}

// Shutdown stops the node gracefully: it stops reporting healthy, announces
// its leave to the cluster (unless Config.SkipLeaveOnShutdown), hands
// leadership to another voter if it leads, drains the gRPC server, and then
// stops raft and closes its stores and the engine. ctx bounds the graceful steps (each is also bounded by
// Config.ShutdownTimeout); the node is stopped in any case: the stopping
// steps after them are bounded by Config.StopTimeout together, and a step
// that does not finish by then is abandoned and logged, and the data
// directory released regardless (the error wraps ErrStopIncomplete).
// Calling it again does nothing.
func (n *Node) Shutdown(ctx context.Context) error {
	return n.stop(ctx, true)
}

// stop stops the node once; see stopLocked.
func (n *Node) stop(ctx context.Context, graceful bool) error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.shutdown {
		return nil
	}
	n.shutdown = true
	if !n.started {
		n.cancel()
		return nil
	}
	return n.stopLocked(ctx, graceful)
}

// stopLocked stops everything Start started. graceful adds the leave, the
// leadership transfer and the gRPC drain. REQUIRES: lifeMu held.
func (n *Node) stopLocked(ctx context.Context, graceful bool) error {
	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, n.cfg.ShutdownTimeout)
	}
	var errs []error
	if n.health != nil {
		n.health.Shutdown() // every service NOT_SERVING
	}
	if graceful && n.disc != nil && !n.cfg.SkipLeaveOnShutdown && !n.failed.Load() {
		// Each of the leave's two broadcasts normally goes out within a
		// gossip interval; if no peer is left to take it, do not wait long.
		if err := n.disc.Leave(min(n.cfg.ShutdownTimeout, time.Second)); err != nil {
			n.log.Warn("cluster: leaving gossip", "err", err)
		}
	}
	if graceful && n.raft != nil && n.raft.State() == raft.Leader && n.hasOtherVoter() {
		sctx, cancel := step()
		if err := n.transferLeadership(sctx, ""); err != nil {
			n.log.Warn("cluster: transferring leadership before shutdown", "err", err)
		}
		cancel()
	}
	if n.grpc != nil {
		if graceful {
			sctx, cancel := step()
			done := make(chan struct{})
			go func() { n.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-sctx.Done():
				n.grpc.Stop()
				<-done
			}
			cancel()
		} else {
			n.grpc.Stop()
		}
	} else if n.lis != nil {
		n.lis.Close()
	}
	n.cancel()

	// From here on every step must finish by one deadline; a step that
	// does not is abandoned (left running, its resources open) and logged,
	// and the data directory is released all the same, so that the
	// process can exit or a supervisor can start the node again.
	deadline := time.Now().Add(n.cfg.StopTimeout)
	var abandoned []string
	raftStopped := true
	if n.raft != nil {
		done, err := runBounded(deadline, func() error { return n.raft.Shutdown().Error() })
		switch {
		case !done:
			raftStopped = false
			abandoned = append(abandoned, "raft's shutdown (its goroutines, log store and state machine stay open)")
		case err != nil:
			errs = append(errs, fmt.Errorf("cluster: raft shutdown: %w", err))
		}
	}
	if n.netTrans != nil {
		// raft closes the listener; close the pooled connections too, so
		// that peers' handlers of them (and ours of theirs) end.
		n.netTrans.CloseStreams()
		if !raftStopped {
			n.netTrans.Close()
		}
	}
	if n.disc != nil {
		done, err := runBounded(deadline, n.disc.Shutdown)
		switch {
		case !done:
			abandoned = append(abandoned, "gossip's shutdown")
		case err != nil:
			errs = append(errs, err)
		}
	}
	if done, _ := runBounded(deadline, func() error { n.wg.Wait(); return nil }); !done {
		abandoned = append(abandoned, "the node's background loops")
	}
	if n.fwd != nil {
		n.fwd.close()
	}
	if raftStopped {
		for i := len(n.closers) - 1; i >= 0; i-- {
			done, err := runBounded(deadline, n.closers[i].Close)
			switch {
			case !done:
				abandoned = append(abandoned, fmt.Sprintf("closing %T", n.closers[i]))
			case err != nil && !errors.Is(err, net.ErrClosed):
				errs = append(errs, fmt.Errorf("cluster: closing: %w", err))
			}
		}
		if n.fsm != nil {
			done, err := runBounded(deadline, n.fsm.Close)
			switch {
			case !done:
				abandoned = append(abandoned, "closing the state machine")
			case err != nil:
				errs = append(errs, err)
			}
		}
	}
	if n.lock != nil {
		n.lock.Close()
	}
	n.leaderChange.notify()
	if len(abandoned) > 0 {
		n.log.Error("cluster: node did not stop cleanly; released its data directory anyway", "stop_timeout", n.cfg.StopTimeout, "abandoned", strings.Join(abandoned, "; "),
			"stuck", stuckGoroutines())
		errs = append(errs, fmt.Errorf("%w after %v: abandoned %s", ErrStopIncomplete, n.cfg.StopTimeout, strings.Join(abandoned, "; ")))
	}
	if len(errs) == 0 && n.started {
		n.log.Info("cluster: node stopped", "graceful", graceful)
	}
	return errors.Join(errs...)
}

// stuckGoroutines returns the stacks of the goroutines running raft's,
// gossip's or cairn's cluster code, for the log of an abandoned stop: what
// they wait on is what a stop that never finishes is stuck on.
func stuckGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "hashicorp/memberlist") || strings.Contains(g, "cairn/cluster") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// runBounded runs fn and waits for it until deadline, or for at least
// minStepWait (a step after an abandoned one still gets a chance). done
// reports whether it returned (with err); if not, it is left running.
func runBounded(deadline time.Time, fn func() error) (done bool, err error) {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	t := time.NewTimer(max(time.Until(deadline), minStepWait))
	defer t.Stop()
	select {
	case err := <-ch:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// hasOtherVoter reports whether the configuration has a voter besides
// this node.
func (n *Node) hasOtherVoter() bool {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return false
	}
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.cfg.ID) {
			return true
		}
	}
	return false
}

// kill stops the node abruptly, as a crash would (but with files closed):
// no leave, no leadership transfer, no drain. For tests.
func (n *Node) kill() error {
	return n.stop(context.Background(), false)
}

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// GRPCAddr returns the advertised gRPC address (valid after Start).
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// RaftAddr returns the advertised raft address (valid after Start).
func (n *Node) RaftAddr() string { return n.raftAddr }

// GossipAddr returns the advertised gossip address, for other nodes' Join
// (valid after Start).
func (n *Node) GossipAddr() string { return n.gossipAddr }

// Leader returns the current leader's ID and gRPC address as this node
// knows them; empty if it knows no leader (the address is empty while
// gossip has not told it).
func (n *Node) Leader() (id, grpcAddr string) {
	if n.raft == nil {
		return "", ""
	}
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	return string(lid), n.memberGRPCAddr(string(lid))
}

// IsLeader reports whether this node is the raft leader.
func (n *Node) IsLeader() bool {
	return n.raft != nil && n.raft.State() == raft.Leader
}

// WaitLeader waits until this node knows a leader, and returns its ID.
func (n *Node) WaitLeader(ctx context.Context) (string, error) {
	if n.raft == nil {
		return "", ErrNotStarted
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, id := n.raft.LeaderWithID(); id != "" {
			return string(id), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-n.ctx.Done():
			return "", ErrShutdown
		case <-t.C:
		}
	}
}

// AppliedIndex returns the raft index the state machine has applied.
func (n *Node) AppliedIndex() uint64 {
	if n.fsm == nil {
		return 0
	}
	return n.fsm.AppliedIndex()
}

// raftFSM is the FSM as raft sees it; it counts restores, so that tests and
// the Status log can tell a snapshot install from a restart.
type raftFSM struct {
	*fsm.FSM
	restores atomic.Int64
	// snaps is raft's snapshot store, read for the configuration index a
	// snapshot carries.
	snaps raft.SnapshotStore
	// configIndex is the raft index of the newest configuration entry the
	// state machine has seen applied (from the log, or from the newest
	// snapshot). raft v1.7.3's GetConfiguration does not report one, and
	// membership changes need it as their prevIndex.
	configIndex atomic.Uint64
	// beforeApply, if set, runs before each batch is applied (tests use it
	// to stall the state machine).
	beforeApply atomic.Pointer[func()]
	// departed holds the departure records (departed.go): entries carrying
	// one are recorded here and reach the engine's FSM as no-ops.
	departed *departedSet
	// log receives failures to persist a departure record.
	log *slog.Logger
	// onClusterID is called with the ID of every cluster-ID entry
	// applied (clusterid.go).
	onClusterID func(id string)
}

func (r *raftFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	if h := r.beforeApply.Load(); h != nil {
		(*h)()
	}
	logs = r.takeDepartures(logs)
	results := r.FSM.ApplyBatch(logs)
	for _, l := range logs {
		if l.Type == raft.LogConfiguration {
			r.noteConfigIndex(l.Index)
		}
	}
	return results
}

// takeDepartures records the departure records and cluster-ID entries
// (clusterid.go) among logs and returns logs with each of their entries
// replaced by a no-op copy (the engine's FSM
// advances its applied index over it and keeps nothing). logs itself is not
// modified.
func (r *raftFSM) takeDepartures(logs []*raft.Log) []*raft.Log {
	out, cloned := logs, false
	for i, l := range logs {
		if l.Type != raft.LogCommand || len(l.Extensions) == 0 {
			continue
		}
		id, inc, ok := decodeDeparture(l.Extensions)
		if cid, isCID := decodeClusterIDEntry(l.Extensions); isCID {
			if r.onClusterID != nil {
				r.onClusterID(cid)
			}
		} else if !ok {
			continue
		} else if r.departed != nil {
			if err := r.departed.record(id, inc); err != nil && r.log != nil {
				r.log.Warn("cluster: keeping a departure record", "server", id, "err", err)
			}
		}
		if !cloned {
			out, cloned = slices.Clone(logs), true
		}
		out[i] = &raft.Log{Index: l.Index, Term: l.Term, Type: raft.LogNoop, AppendedAt: l.AppendedAt}
	}
	return out
}

// noteConfigIndex raises configIndex to index.
func (r *raftFSM) noteConfigIndex(index uint64) {
	for {
		cur := r.configIndex.Load()
		if index <= cur || r.configIndex.CompareAndSwap(cur, index) {
			return
		}
	}
}

// loadSnapshotConfigIndex takes the configuration index of the newest
// snapshot in the store, if any.
func (r *raftFSM) loadSnapshotConfigIndex() {
	if r.snaps == nil {
		return
	}
	if metas, err := r.snaps.List(); err == nil && len(metas) > 0 {
		r.noteConfigIndex(metas[0].ConfigurationIndex)
	}
}

func (r *raftFSM) Apply(l *raft.Log) interface{} {
	return r.ApplyBatch([]*raft.Log{l})[0]
}

func (r *raftFSM) Restore(rc io.ReadCloser) error {
	r.restores.Add(1)
	if err := r.FSM.Restore(rc); err != nil {
		return err
	}
	// raft stored the snapshot before restoring it: its configuration is
	// now the state machine's.
	r.loadSnapshotConfigIndex()
	return nil
}

var _ raft.BatchingFSM = (*raftFSM)(nil)

// notifier wakes every waiter on a condition: waiters take the current
// channel, check their condition, and wait on the channel, which notify
// closes and replaces.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (nf *notifier) init() { nf.ch = make(chan struct{}) }

func (nf *notifier) wait() <-chan struct{} {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	return nf.ch
}

func (nf *notifier) notify() {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	close(nf.ch)
	nf.ch = make(chan struct{})
}

// poke does a non-blocking send on a coalescing channel of capacity one.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
