package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultEndpoint is the gRPC address of a node started with no flags.
const DefaultEndpoint = "127.0.0.1:7379"

// Config configures a Client. Only Endpoints is required.
type Config struct {
	// Endpoints are gRPC addresses (host:port) of some of the cluster's
	// nodes. The client connects to all of them, and also to any leader
	// address the cluster names that is not among them.
	Endpoints []string
	// DialTimeout, if positive, makes New wait until it has connected to
	// at least one endpoint, failing with ErrUnavailable after that long
	// (at once with ErrTLSHandshake if the TLS handshake with every
	// endpoint failed in a way a retry would repeat).
	// Zero: New returns at once and connects lazily (a first request to
	// unreachable nodes fails with ErrUnavailable after retries).
	DialTimeout time.Duration
	// TLS, if set, secures the connections; nil means plaintext.
	TLS *tls.Config
	// Token, if set, is sent with every call as "authorization: Bearer
	// <token>" metadata, for a cluster with an authorization policy (see
	// token.go). It is sent over plaintext connections too (tests, dev
	// clusters on loopback), where anyone on the path can read it: set
	// TLS for anything else.
	Token string
	// ClientID names this client's writes for at-most-once execution
	// (see the package documentation). Default: a random 128-bit ID, which
	// is what almost every program wants. Two Clients must never share an
	// ID. At most 240 bytes.
	ClientID string
	// RequestTimeout bounds each call whose context has no deadline,
	// retries included. Default 30s.
	RequestTimeout time.Duration
	// MaxRetryBackoff caps the pause between retries. Default 1s.
	MaxRetryBackoff time.Duration
	// MaxMessageSize bounds a gRPC message in either direction. Default
	// 64 MiB (the default largest value, 16 MiB, with room to spare).
	MaxMessageSize int
	// Logger receives the client's debug logs (retries, leader changes);
	// nil discards them.
	Logger *slog.Logger
	// DialOptions are added to the client's own when it dials a node (for
	// interceptors, tracing, custom dialers).
	DialOptions []grpc.DialOption
}

// maxClientIDPrefix leaves room for the "/<n>" session suffix within
// cairnpb.MaxClientIDSize.
const maxClientIDPrefix = cairnpb.MaxClientIDSize - 16

func (c Config) withDefaults() (Config, error) {
	if len(c.Endpoints) == 0 {
		return c, errors.New("cairn: no endpoints")
	}
	eps := make([]string, 0, len(c.Endpoints))
	for _, e := range c.Endpoints {
		if e == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(e); err != nil {
			return c, fmt.Errorf("cairn: endpoint %q: want host:port", e)
		}
		if !slices.Contains(eps, e) {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return c, errors.New("cairn: no endpoints")
	}
	c.Endpoints = eps
	if err := checkToken(c.Token); err != nil {
		return c, err
	}
	if c.ClientID == "" {
		var b [16]byte
		rand.Read(b[:])
		c.ClientID = hex.EncodeToString(b[:])
	}
	if len(c.ClientID) > maxClientIDPrefix {
		return c, fmt.Errorf("cairn: client ID of %d bytes (at most %d)", len(c.ClientID), maxClientIDPrefix)
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = time.Second
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Client is a connection to a cairn cluster. It is safe for concurrent use
// by many goroutines; create one per process and Close it when done.
type Client struct {
	cfg      Config
	log      *slog.Logger
	sessions sessionPool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // background leader lookups

	mu struct {
		sync.Mutex
		closed bool
		// conns holds one connection per node address, the endpoints
		// first (in Config order), then leaders learned from the cluster.
		conns map[string]*nodeConn
		// order lists the addresses of conns in the order they were added.
		order []string
		// leader is the gRPC address of the leader as last learned; ""
		// when unknown.
		leader string
		// next is the round-robin position over order for requests that
		// may go anywhere, and for leader requests while no leader is known.
		next int
		// idByAddr maps node addresses to raft IDs as Status told us, to
		// notice when a node forwarded a request (the response names
		// another node).
		idByAddr map[string]string
		// lookingUp is set while a background leader lookup runs.
		lookingUp bool
		// lastLookup is when the last lookup started (lookups are rate
		// limited).
		lastLookup time.Time
	}
}

// nodeConn is the connection to one node.
type nodeConn struct {
	addr    string
	cc      *grpc.ClientConn
	kv      cairnpb.KVClient
	cluster cairnpb.ClusterClient
	// handshake is the outcome of the connection's last TLS handshake
	// (nil without TLS).
	handshake *handshakeState
}

// New returns a Client of the cluster at cfg.Endpoints. Unless
// cfg.DialTimeout is set it does not wait for connections: requests
// connect, and retry until their context's deadline.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	c.sessions.init(cfg.ClientID)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.conns = make(map[string]*nodeConn)
	c.mu.idByAddr = make(map[string]string)
	c.mu.Lock()
	for _, ep := range cfg.Endpoints {
		if _, err := c.connLocked(ep); err != nil {
			c.mu.Unlock()
			c.Close()
			return nil, err
		}
	}
	c.mu.Unlock()
	if cfg.DialTimeout > 0 {
		if err := c.waitConnected(cfg.DialTimeout); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.lookupLeader()
	return c, nil
}

// dialOptions are the options of a connection; hs, with TLS, receives its
// handshakes' outcomes.
func (c *Client) dialOptions(hs *handshakeState) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = handshakeCreds{TransportCredentials: credentials.NewTLS(c.cfg.TLS), state: hs}
	}
	minConnect := 5 * time.Second
	if c.cfg.DialTimeout > 0 {
		minConnect = c.cfg.DialTimeout
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageSize),
			grpc.MaxCallSendMsgSize(c.cfg.MaxMessageSize),
		),
		// gRPC's default reconnect backoff grows to two minutes; a node
		// that restarts must be usable again within a request's retries.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: minConnect,
		}),
	}
	if c.cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(c.cfg.Token)))
	}
	return append(opts, c.cfg.DialOptions...)
}

// connLocked returns the connection to addr, creating it.
// REQUIRES: c.mu held.
func (c *Client) connLocked(addr string) (*nodeConn, error) {
	if nc, ok := c.mu.conns[addr]; ok {
		return nc, nil
	}
	var hs *handshakeState
	if c.cfg.TLS != nil {
		hs = &handshakeState{}
	}
	cc, err := grpc.NewClient(addr, c.dialOptions(hs)...)
	if err != nil {
		return nil, fmt.Errorf("cairn: endpoint %s: %w", addr, err)
	}
	nc := &nodeConn{addr: addr, cc: cc, kv: cairnpb.NewKVClient(cc), cluster: cairnpb.NewClusterClient(cc), handshake: hs}
	c.mu.conns[addr] = nc
	c.mu.order = append(c.mu.order, addr)
	return nc, nil
}

// waitConnected waits until one endpoint's connection is ready.
func (c *Client) waitConnected(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	c.mu.Lock()
	conns := make([]*nodeConn, 0, len(c.mu.conns))
	for _, a := range c.mu.order {
		conns = append(conns, c.mu.conns[a])
	}
	c.mu.Unlock()
	ready := make(chan struct{}, len(conns))
	// refused receives the endpoints whose TLS handshake failed for good
	// (see handshakeState): once all did, waiting longer is pointless.
	type refusal struct {
		addr string
		err  error
	}
	refused := make(chan refusal, len(conns))
	for _, nc := range conns {
		go func() {
			nc.cc.Connect()
			for s := nc.cc.GetState(); ; s = nc.cc.GetState() {
				if s == connectivity.Ready {
					ready <- struct{}{}
					return
				}
				if s == connectivity.TransientFailure {
					if err := nc.handshake.last(); err != nil {
						refused <- refusal{nc.addr, err}
						return
					}
				}
				if !nc.cc.WaitForStateChange(ctx, s) {
					return
				}
			}
		}()
	}
	for n := 0; ; {
		select {
		case <-ready:
			return nil
		case r := <-refused:
			if n++; n == len(conns) {
				return tlsError("connect", r.addr, r.err, 0)
			}
		case <-ctx.Done():
			return clientError("connect", ErrUnavailable, codes.Unavailable,
				"no endpoint of %v reachable within %v", c.cfg.Endpoints, timeout)
		}
	}
}

// ClientID returns the client's ID (the prefix of its writes' client_id).
func (c *Client) ClientID() string { return c.cfg.ClientID }

// Endpoints returns the addresses the client has connections to: the
// configured endpoints, then any leader learned from the cluster.
func (c *Client) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.order)
}

// Leader returns the gRPC address of the leader as the client last learned
// it, or "" if it knows none.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.leader
}

// Close closes the connections. Calls in progress fail; later calls return
// ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	conns := c.mu.conns
	c.mu.conns = nil
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	var errs []error
	for _, nc := range conns {
		if err := nc.cc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
