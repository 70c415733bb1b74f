package cluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/internal/testnet"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// A node refuses to be created with TLS files that are missing, unreadable,
// not PEM, mismatched or not a node certificate of its peer CA, and says
// which file and why.
func TestTLSConfigRefused(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	foreign := newTestCA(t, "foreign-ca")
	good := ca.node(t, "n1")
	other := ca.node(t, "n2")
	alien := foreign.node(t, "x1")
	clientOnly, clientOnlyKey := ca.issue(t, certSpec{cn: "client", usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	expired, expiredKey := ca.issue(t, certSpec{cn: "old", usage: nodeKeyUsages, notAfter: time.Now().Add(-time.Minute)})
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("not a PEM file\n"), 0o600)
	missing := filepath.Join(t.TempDir(), "missing.pem")

	with := func(f func(c *TLSConfig)) TLSConfig { c := good; f(&c); return c }
	for _, c := range []struct {
		name string
		tls  TLSConfig
		want string
	}{
		{"cert without key", with(func(c *TLSConfig) { c.KeyFile = "" }), "certificate file without a key file"},
		{"key without cert", with(func(c *TLSConfig) { c.CertFile = "" }), "key file without a certificate file"},
		{"cert without peer CA", with(func(c *TLSConfig) { c.PeerCAFile = "" }), "without a peer CA file"},
		{"client CA alone", TLSConfig{ClientCAFile: ca.File}, "without a certificate and key"},
		{"unreadable cert", with(func(c *TLSConfig) { c.CertFile = missing }), "missing.pem: no such file"},
		{"unreadable key", with(func(c *TLSConfig) { c.KeyFile = missing }), "missing.pem: no such file"},
		{"unreadable peer CA", with(func(c *TLSConfig) { c.PeerCAFile = missing }), "peer CA: open " + missing},
		{"unreadable client CA", with(func(c *TLSConfig) { c.ClientCAFile = missing }), "client CA: open " + missing},
		{"cert not PEM", with(func(c *TLSConfig) { c.CertFile = garbage }), "certificate file " + garbage + ": no PEM certificate"},
		{"key not PEM", with(func(c *TLSConfig) { c.KeyFile = garbage }), "key file " + garbage + ": no PEM private key"},
		{"key in the cert file", with(func(c *TLSConfig) { c.CertFile = good.KeyFile }), `PEM block "PRIVATE KEY" where a CERTIFICATE`},
		{"peer CA not PEM", with(func(c *TLSConfig) { c.PeerCAFile = garbage }), "peer CA file " + garbage + ": no PEM certificate"},
		{"key of another cert", with(func(c *TLSConfig) { c.KeyFile = other.KeyFile }), "does not match the certificate"},
		{"cert of a foreign CA", with(func(c *TLSConfig) { c.CertFile, c.KeyFile = alien.CertFile, alien.KeyFile }), "not a valid node certificate of the cluster CA"},
		{"client-only cert", with(func(c *TLSConfig) { c.CertFile, c.KeyFile = clientOnly, clientOnlyKey }), "incompatible key usage"},
		{"expired cert", with(func(c *TLSConfig) { c.CertFile, c.KeyFile = expired, expiredKey }), "expired"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "n1")
			cfg.TLS = c.tls
			_, err := New(cfg, nil)
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want ErrInvalidConfig saying %q", err, c.want)
			}
		})
	}

	// A good configuration is accepted; a key others can read draws a
	// warning that does not quote the key.
	var logs bytes.Buffer
	cfg := testConfig(t, "n1")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.TLS = good
	if _, err := New(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "accessible to other users") {
		t.Fatalf("warning about a 0600 key: %s", logs.String())
	}
	os.Chmod(good.KeyFile, 0o640)
	if _, err := New(cfg, nil); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(good.KeyFile)
	if !strings.Contains(logs.String(), "TLS key file is accessible to other users") || strings.Contains(logs.String(), strings.Split(string(key), "\n")[1]) {
		t.Fatalf("key mode 0640: log %q, want a warning without the key", logs.String())
	}
}

// testTLSState returns TLS material with the given certificate and peer
// CA, without load's checks (to make a node that trusts one CA and
// presents another's certificate).
func testTLSState(t *testing.T, node TLSConfig, peerCA *testCA) *tlsState {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(node.CertFile, node.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(peerCA.cert)
	return &tlsState{cert: pair, peerCAs: pool, clientCAs: pool, log: slog.New(slog.DiscardHandler)}
}

// The raft stream layer connects two nodes of the cluster CA, and refuses a
// connection in either direction when the other end's certificate is not
// from the cluster CA (or is missing): the accepting side's read fails and
// so does the dialer's.
func TestTLSStreamLayer(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	foreign := newTestCA(t, "foreign-ca")
	serverState := testTLSState(t, ca.node(t, "s1"), ca)
	server, err := newTLSStreamLayer(testnet.Addr(t), nil, serverState, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	type accepted struct {
		msg []byte
		err error
	}
	acceptCh := make(chan accepted, 1)
	acceptOne := func() {
		go func() {
			c, err := server.Accept()
			if err != nil {
				acceptCh <- accepted{err: err}
				return
			}
			defer c.Close()
			buf := make([]byte, 4)
			_, err = io.ReadFull(c, buf)
			if err == nil {
				_, err = c.Write([]byte("pong"))
			}
			acceptCh <- accepted{msg: buf, err: err}
		}()
	}
	// roundTrip dials the server from a layer with state s and exchanges
	// ping/pong; it returns the dialer's and the server's errors.
	roundTrip := func(s *tlsState) (dialErr, serverErr error) {
		t.Helper()
		acceptOne()
		client := &tlsStreamLayer{client: s.peerClientConfig("raft-out"), handshakeTimeout: 10 * time.Second}
		c, err := client.Dial(raft.ServerAddress(server.Addr().String()), 10*time.Second)
		if err == nil {
			// TLS 1.3: the server judges the client's certificate after
			// the client's handshake is done; its refusal reaches the
			// client as the first read's error.
			c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err = c.Write([]byte("ping")); err == nil {
				buf := make([]byte, 4)
				if _, err = io.ReadFull(c, buf); err == nil && string(buf) != "pong" {
					err = errors.New("bad answer " + string(buf))
				}
			}
			c.Close()
		}
		select {
		case a := <-acceptCh:
			if a.err == nil && string(a.msg) != "ping" {
				a.err = errors.New("bad message " + string(a.msg))
			}
			return err, a.err
		case <-time.After(30 * time.Second):
			t.Fatal("the server never finished with the connection")
		}
		return nil, nil
	}

	// Two nodes of the cluster.
	if dialErr, serverErr := roundTrip(testTLSState(t, ca.node(t, "c1"), ca)); dialErr != nil || serverErr != nil {
		t.Fatalf("node of the cluster CA: dial %v, server %v", dialErr, serverErr)
	}
	if n := serverState.refused.snapshot()["raft-in"]; n != 0 {
		t.Fatalf("refused %d", n)
	}

	// A dialer with a foreign certificate (that trusts the server):
	// refused by the server, and its connection fails.
	dialErr, serverErr := roundTrip(testTLSState(t, foreign.node(t, "x1"), ca))
	if dialErr == nil || serverErr == nil || !strings.Contains(serverErr.Error(), "peer certificate refused") {
		t.Fatalf("foreign client certificate: dial %v, server %v; want both to fail", dialErr, serverErr)
	}
	if n := serverState.refused.snapshot()["raft-in"]; n != 1 {
		t.Fatalf("server refused %d connections, want 1", n)
	}

	// A node certificate of the cluster CA naming a node that is not a
	// server of the configuration (a removed node's, a stranger's):
	// refused once the server checks names (Node.peerIDAllowed).
	serverState.raftPeerAllowed = func(id string) bool { return id == "c1" }
	dialErr, serverErr = roundTrip(testTLSState(t, ca.node(t, "c9"), ca))
	if dialErr == nil || serverErr == nil || !strings.Contains(serverErr.Error(), "names no server of the configuration") {
		t.Fatalf("node certificate of a non-member: dial %v, server %v; want both to fail", dialErr, serverErr)
	}
	if dialErr, serverErr := roundTrip(testTLSState(t, ca.node(t, "c1"), ca)); dialErr != nil || serverErr != nil {
		t.Fatalf("node certificate of a member: dial %v, server %v", dialErr, serverErr)
	}
	if n := serverState.refused.snapshot()["raft-in"]; n != 2 {
		t.Fatalf("server refused %d connections, want 2", n)
	}
	serverState.raftPeerAllowed = nil

	// A server with a foreign certificate: the dialer refuses it in Dial.
	foreignServer, err := newTLSStreamLayer(testnet.Addr(t), nil, testTLSState(t, foreign.node(t, "x2"), ca), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer foreignServer.Close()
	go func() {
		if c, err := foreignServer.Accept(); err == nil {
			io.Copy(io.Discard, c) // runs the handshake until the dialer hangs up
			c.Close()
		}
	}()
	dialer := testTLSState(t, ca.node(t, "c2"), ca)
	cl := &tlsStreamLayer{client: dialer.peerClientConfig("raft-out")}
	if c, err := cl.Dial(raft.ServerAddress(foreignServer.Addr().String()), 10*time.Second); err == nil || !strings.Contains(err.Error(), "peer certificate refused") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial to a foreign server: %v, want refused", err)
	}
	if n := dialer.refused.snapshot()["raft-out"]; n != 1 {
		t.Fatalf("dialer refused %d connections, want 1", n)
	}

	// No certificate, and no TLS at all.
	acceptOne()
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if c, err := tls.Dial("tcp", server.Addr().String(), noCert); err == nil {
		c.Write([]byte("ping"))
		c.Read(make([]byte, 1))
		c.Close()
	}
	if a := <-acceptCh; a.err == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	acceptOne()
	if c, err := net.Dial("tcp", server.Addr().String()); err == nil {
		c.Write([]byte("ping plaintext raft"))
		c.Close()
	}
	if a := <-acceptCh; a.err == nil {
		t.Fatal("server accepted plaintext")
	}
}

// grpcCall makes one Status call to addr with creds and returns its error.
func grpcCall(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = cairnpb.NewKVClient(c).Get(ctxTimeout(t, 20*time.Second), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_SERIALIZABLE})
	return err
}

// A three-node cluster with TLS everywhere and a client CA: it forms,
// replicates, forwards a follower's write, serves linearizable reads on a
// follower (the leader confirms over peer gRPC); it refuses clients
// without a certificate, with one of another CA, and without TLS; and a
// node with a certificate of a foreign CA never joins raft.
func TestTLSCluster(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	clientCA := newTestCA(t, "client-ca")
	foreign := newTestCA(t, "foreign-ca")
	tc := newTestCluster(t)
	tc.clientTLS = clientTLS(t, ca, clientCA, "app")
	nodes := tc.formCluster(3, func(c *Config) { withTLS(t, c, ca, clientCA) })
	leader := tc.leader()
	var followers []*Node
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}

	// A write through a follower is forwarded to the leader over mTLS
	// and replicated to every node.
	put(t, tc.kv(followers[0]), "k", "v1")
	if n := sum(followers[0].forwarded.snapshot()); n == 0 {
		t.Fatalf("the follower forwarded nothing: %v", followers[0].forwarded.snapshot())
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.ID()+" applying the write", func() bool {
			r, err := tc.kv(n).Get(ctxTimeout(t, 5*time.Second), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_SERIALIZABLE})
			return err == nil && string(r.GetKv().GetValue()) == "v1"
		})
	}
	// A linearizable read on the other follower.
	if r := get(t, tc.kv(followers[1]), "k", cairnpb.Consistency_LINEARIZABLE); string(r.GetKv().GetValue()) != "v1" {
		t.Fatalf("linearizable read: %q", r.GetKv().GetValue())
	}

	// Clients.
	addr := followers[1].GRPCAddr()
	if err := grpcCall(t, addr, credentials.NewTLS(tc.clientTLS)); err != nil {
		t.Fatalf("client with a certificate of the client CA: %v", err)
	}
	for _, c := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"no certificate", credentials.NewTLS(clientTLS(t, ca, nil, ""))},
		{"certificate of another CA", credentials.NewTLS(forceCert(clientTLS(t, ca, foreign, "intruder")))},
		{"plaintext", insecure.NewCredentials()},
	} {
		if err := grpcCall(t, addr, c.creds); status.Code(err) != codes.Unavailable {
			t.Errorf("client with %s: %v, want Unavailable", c.name, err)
		}
	}

	// A node whose certificate (and peer CA) is a foreign CA's: it joins
	// gossip (same gossip settings), but the leader's verification of it
	// (verify.go) fails the TLS check of its gRPC port, so it is never
	// made a raft server, never receives an entry and is never promoted.
	// (Leadership may move on a loaded machine: count over the three.)
	grpcRefused := func() (n uint64) {
		for _, m := range nodes {
			n += m.tls.refused.snapshot()["grpc-out"]
		}
		return n
	}
	rounds := func() (n uint64) {
		for _, m := range nodes {
			n += m.reconcileRounds.Load()
		}
		return n
	}
	refusedBefore := grpcRefused()
	cfg := testConfig(t, "n4")
	withTLS(t, &cfg, foreign, nil)
	cfg.Join = []string{nodes[0].GossipAddr()}
	intruder := tc.start(cfg, nil)
	defer func() {
		if t.Failed() {
			for _, m := range append(nodes, intruder) {
				var ids []string
				for id, mem := range *m.members.Load() {
					ids = append(ids, fmt.Sprintf("%s:%v", id, mem.State))
				}
				t.Logf("%s: leader %v, configuration %v, gossip %v, refused %v", m.ID(), m.IsLeader(), configIDs(m), ids, m.tls.refused.snapshot())
			}
		}
	}()
	waitFor(t, 15*time.Second, "the leader to verify n4 and refuse its certificate", func() bool {
		return grpcRefused() > refusedBefore
	})
	put(t, tc.kv(nodes[0]), "k", "v2")
	before := rounds()
	waitFor(t, 15*time.Second, "20 more reconcile rounds", func() bool { return rounds() >= before+20 })
	leader = tc.leader()
	cf := leader.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		t.Fatal(err)
	}
	voters := 0
	for _, s := range cf.Configuration().Servers {
		if s.ID == "n4" {
			t.Fatalf("n4, with a foreign certificate, became a raft server: %+v", cf.Configuration().Servers)
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("%d voters: %+v", voters, cf.Configuration().Servers)
	}
	if li, ai := intruder.raft.LastIndex(), intruder.AppliedIndex(); li != 0 || ai != 0 {
		t.Fatalf("n4 received raft entries: last index %d, applied %d", li, ai)
	}
}

// forceCert makes cfg present its certificate even when the server names
// other CAs as acceptable (Go's client would send none).
func forceCert(cfg *tls.Config) *tls.Config {
	cert := cfg.Certificates[0]
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}

func sum(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}

// Without a client CA the gRPC port is server-authenticated TLS: a client
// without a certificate is served, one with a certificate of an unknown
// CA is refused, plaintext is refused.
func TestTLSServerAuthOnly(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	foreign := newTestCA(t, "foreign-ca")
	tc := newTestCluster(t)
	cfg := testConfig(t, "n1")
	cfg.BootstrapExpect = 1
	withTLS(t, &cfg, ca, nil)
	n := tc.start(cfg, nil)
	tc.clientTLS = clientTLS(t, ca, nil, "")
	tc.waitReady([]*Node{n}, 1)
	put(t, tc.kv(n), "k", "v")
	if err := grpcCall(t, n.GRPCAddr(), credentials.NewTLS(tc.clientTLS)); err != nil {
		t.Fatalf("client without a certificate: %v", err)
	}
	// (Go's client leaves out a certificate of a CA the server does not
	// name: that is a client without a certificate, served. One that
	// sends it anyway is refused.)
	if err := grpcCall(t, n.GRPCAddr(), credentials.NewTLS(clientTLS(t, ca, foreign, "intruder"))); err != nil {
		t.Fatalf("client with an unsent certificate of another CA: %v", err)
	}
	if err := grpcCall(t, n.GRPCAddr(), credentials.NewTLS(forceCert(clientTLS(t, ca, foreign, "intruder")))); status.Code(err) != codes.Unavailable {
		t.Fatalf("client with a certificate of another CA: %v, want Unavailable", err)
	}
	if err := grpcCall(t, n.GRPCAddr(), insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client: %v, want Unavailable", err)
	}
	// A client that does not trust the node's CA refuses it.
	wrongRoots := clientTLS(t, foreign, nil, "")
	if err := grpcCall(t, n.GRPCAddr(), credentials.NewTLS(wrongRoots)); status.Code(err) != codes.Unavailable {
		t.Fatalf("client trusting another CA: %v, want Unavailable", err)
	}
}

// A follower that was down while the leader trimmed its log catches up over
// TLS by InstallSnapshot (a long stream on the TLS raft connection) after a
// restart, which redials every pooled connection.
func TestTLSSnapshotCatchUp(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	tc := newTestCluster(t)
	tc.clientTLS = clientTLS(t, ca, nil, "")
	nodes := tc.formCluster(3, func(c *Config) {
		withTLS(t, c, ca, nil)
		c.SnapshotThreshold = 64
		c.TrailingLogs = 16
		c.SnapshotInterval = time.Hour // snapshots only when asked
	})
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	fid := follower.ID()
	if err := follower.kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		put(t, tc.kv(leader), fmt.Sprintf("b%03d", i), "while down")
	}
	for _, n := range tc.live() {
		if _, _, err := n.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	follower = tc.restart(fid)
	waitFor(t, 15*time.Second, "the follower to catch up", func() bool {
		return follower.AppliedIndex() >= tc.leader().AppliedIndex()
	})
	if r := follower.fsm.restores.Load(); r != 1 {
		t.Fatalf("the follower restored %d snapshots, want 1", r)
	}
	if got := get(t, tc.kv(follower), "b199", cairnpb.Consistency_SERIALIZABLE).GetKv(); string(got.GetValue()) != "while down" {
		t.Fatalf("follower: b199 = %v", got)
	}
	for _, n := range tc.live() {
		if r := n.tls.refused.snapshot(); len(r) != 0 {
			t.Errorf("%s refused peer connections: %v", n.ID(), r)
		}
	}
}
