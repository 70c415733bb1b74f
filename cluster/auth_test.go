package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/auth"
	"github.com/cairnkv/cairn/cluster/membership"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// writePolicy writes an authorization policy giving each token its role.
func writePolicy(t testing.TB, tokens map[string]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"certs": {"admin": "admin"}, "tokens": {`)
	first := true
	for tok, role := range tokens {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString(`"` + auth.HashToken(tok) + `": "` + role + `"`)
	}
	b.WriteString("}}")
	name := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(name, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// tokenConn dials n sending token ("" none) with every call.
func tokenConn(t testing.TB, n *Node, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.TokenCredentials(token)))
	}
	cc, err := grpc.NewClient(n.GRPCAddr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// wantCode fails the test unless err has code want (and, for
// PermissionDenied, names the role needed).
func wantCode(t testing.TB, what string, err error, want codes.Code, role string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	if want == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), "needs role "+role) {
		t.Fatalf("%s: %v does not name the role needed (%s)", what, err, role)
	}
}

// TestAuthTokens runs a 3-node plaintext cluster with an authorization
// policy of bearer tokens; the nodes recognise each other by their peer
// token, so that followers forward and the leader confirms reads.
func TestAuthTokens(t *testing.T) {
	const ro, rw, admin, peerTok = "ro-token", "rw-token", "admin-token", "peer-token"
	policy := writePolicy(t, map[string]string{ro: "read-only", rw: "read-write", admin: "admin", peerTok: "peer"})
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(c *Config) {
		c.AuthFile, c.AuthPeerToken, c.InsecureAuthWithoutTLS = policy, peerTok, true
		c.GossipKey = bytes.Repeat([]byte{7}, 16) // for the keyring fan-out below
	})
	// Every method the node serves has a role.
	if err := auth.CheckCovered(nodes[0].grpc.GetServiceInfo()); err != nil {
		t.Fatal(err)
	}
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	ctx := func() context.Context { return ctxTimeout(t, 20*time.Second*waitSlack) }

	// read-write writes, on the leader and through a follower (which
	// forwards as a peer).
	for i, n := range []*Node{leader, follower} {
		kv := cairnpb.NewKVClient(tokenConn(t, n, rw))
		key := []string{"via-leader", "via-follower"}[i]
		put(t, kv, key, "v")
		resp := get(t, kv, key, cairnpb.Consistency_LINEARIZABLE)
		if string(resp.GetKv().GetValue()) != "v" {
			t.Fatalf("get %s via %s: %v", key, n.ID(), resp)
		}
	}

	// read-only reads, linearizable ones through a follower too (forwarded,
	// and confirmed by the leader with its peers), but writes nothing and
	// administers nothing.
	for _, n := range []*Node{leader, follower} {
		cc := tokenConn(t, n, ro)
		kv := cairnpb.NewKVClient(cc)
		for _, cons := range []cairnpb.Consistency{cairnpb.Consistency_LINEARIZABLE, cairnpb.Consistency_SERIALIZABLE} {
			waitFor(t, 10*time.Second, "read-only reads", func() bool {
				r, err := kv.Get(ctx(), &cairnpb.GetRequest{Key: []byte("via-follower"), Consistency: cons})
				if err != nil && !retryable(err) {
					t.Fatalf("read-only get via %s: %v", n.ID(), err)
				}
				return err == nil && string(r.GetKv().GetValue()) == "v"
			})
		}
		if _, err := cairnpb.NewClusterClient(cc).Status(ctx(), &cairnpb.StatusRequest{}); err != nil {
			t.Fatalf("read-only status: %v", err)
		}
		_, err := kv.Put(ctx(), &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v"), ClientId: "ro", Seq: 1})
		wantCode(t, "read-only put via "+n.ID(), err, codes.PermissionDenied, "read-write")
		_, err = kv.Txn(ctx(), &cairnpb.TxnRequest{})
		wantCode(t, "read-only txn", err, codes.PermissionDenied, "read-write")
		_, err = cairnpb.NewClusterClient(cc).TransferLeader(ctx(), &cairnpb.TransferLeaderRequest{})
		wantCode(t, "read-only transfer-leader", err, codes.PermissionDenied, "admin")
		_, err = cairnpb.NewClusterClient(cc).RemoveMember(ctx(), &cairnpb.RemoveMemberRequest{Id: otherThan(nodes, n).ID()})
		wantCode(t, "read-only remove-member", err, codes.PermissionDenied, "admin")
		_, err = cairnpb.NewReadIndexClient(cc).Confirm(ctx(), &cairnpb.ConfirmRequest{Term: 1, LeaderId: "x"})
		wantCode(t, "read-only confirm", err, codes.PermissionDenied, "peer")
	}
	// read-write may not administer, streams (Backup) included.
	rwAdmin := cairnpb.NewClusterClient(tokenConn(t, follower, rw))
	_, err := rwAdmin.Snapshot(ctx(), &cairnpb.SnapshotRequest{})
	wantCode(t, "read-write snapshot", err, codes.PermissionDenied, "admin")
	if bs, err := rwAdmin.Backup(ctx(), &cairnpb.BackupRequest{}); err == nil {
		_, err = bs.Recv()
		wantCode(t, "read-write backup", err, codes.PermissionDenied, "admin")
	} else {
		wantCode(t, "read-write backup", err, codes.PermissionDenied, "admin")
	}

	// admin administers: a snapshot, and a gossip keyring listing that
	// the node fans out to its peers (as a peer).
	adm := cairnpb.NewClusterClient(tokenConn(t, follower, admin))
	if _, err := adm.Snapshot(ctx(), &cairnpb.SnapshotRequest{}); err != nil {
		t.Fatalf("admin snapshot: %v", err)
	}
	bctx, cancel := context.WithTimeout(context.Background(), 20*time.Second*waitSlack)
	bs, err := adm.Backup(bctx, &cairnpb.BackupRequest{})
	if err == nil {
		_, err = bs.Recv() // the first chunk; cancel ends the stream
	}
	cancel()
	if err != nil {
		t.Fatalf("admin backup: %v", err)
	}
	// The fan-out asks the members the follower's gossip sees alive: wait
	// until that is all three (formCluster waits for raft, not gossip).
	waitFor(t, 10*time.Second, "the follower's gossip to see 3 alive members", func() bool {
		alive := 0
		for _, m := range *follower.members.Load() {
			if m.State == membership.StateAlive {
				alive++
			}
		}
		return alive == 3
	})
	kr, err := adm.GossipKeyring(ctx(), &cairnpb.GossipKeyringRequest{Op: cairnpb.GossipKeyringRequest_LIST})
	if err != nil {
		t.Fatalf("admin keyring list: %v", err)
	}
	if len(kr.GetNodes()) != 3 {
		t.Fatalf("keyring list answered for %d nodes: %v", len(kr.GetNodes()), kr)
	}
	for _, nd := range kr.GetNodes() {
		if nd.GetError() != "" {
			t.Fatalf("keyring list: node %s: %s", nd.GetNodeId(), nd.GetError())
		}
	}

	// No token, or an unknown one: Unauthenticated; health checks stay
	// open.
	for _, tok := range []string{"", "guess"} {
		cc := tokenConn(t, follower, tok)
		_, err := cairnpb.NewKVClient(cc).Get(ctx(), &cairnpb.GetRequest{Key: []byte("via-leader")})
		wantCode(t, "get with token "+tok, err, codes.Unauthenticated, "")
		_, err = cairnpb.NewKVClient(cc).Put(ctx(), &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v"), ClientId: "x", Seq: 1})
		wantCode(t, "put with token "+tok, err, codes.Unauthenticated, "")
		if _, err := healthpb.NewHealthClient(cc).Check(ctx(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check without a token: %v", err)
		}
		if strings.Contains(status.Convert(err).Message(), "guess") {
			t.Fatalf("the token shows in %v", err)
		}
	}
	// Nothing a refused write asked for happened.
	if r := get(t, cairnpb.NewKVClient(tokenConn(t, leader, rw)), "k", cairnpb.Consistency_LINEARIZABLE); r.GetKv() != nil {
		t.Fatalf("a refused put wrote: %v", r)
	}
}

// TestAuthConfig: a node refuses to start with a bad policy, or with one
// under which its peers could not call it.
func TestAuthConfig(t *testing.T) {
	const peerTok, rwTok, otherTok = "peer-token-xyz", "rw-token-xyz", "other-token-xyz"
	good := writePolicy(t, map[string]string{peerTok: "peer", rwTok: "read-write"})
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"tokens": {"rw": "read-write"}}`), 0o600)
	ca := newTestCA(t, "cluster CA")
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string // "" for success
	}{
		{"policy and peer token", func(c *Config) { c.AuthFile, c.AuthPeerToken, c.InsecureAuthWithoutTLS = good, peerTok, true }, ""},
		{"policy without TLS, not said insecure", func(c *Config) { c.AuthFile, c.AuthPeerToken = good, peerTok }, "insecure-auth-without-tls"},
		{"policy and peer CA", func(c *Config) { c.AuthFile, c.TLS = good, ca.node(t, c.ID) }, ""},
		{"certificate of another node", func(c *Config) { c.AuthFile, c.TLS = good, ca.node(t, "n7") }, `not this node's ID "n1"`},
		{"no policy", func(c *Config) {}, ""},
		{"bad policy", func(c *Config) { c.AuthFile, c.AuthPeerToken = bad, peerTok; c.InsecureAuthWithoutTLS = true }, "never the token itself"},
		{"missing policy", func(c *Config) {
			c.AuthFile, c.AuthPeerToken = bad+".missing", peerTok
			c.InsecureAuthWithoutTLS = true
		}, "no such file"},
		{"no way to recognise peers", func(c *Config) { c.AuthFile = good; c.InsecureAuthWithoutTLS = true }, "nodes must recognise each other"},
		{"peer token without the peer role", func(c *Config) { c.AuthFile, c.AuthPeerToken = good, rwTok; c.InsecureAuthWithoutTLS = true }, "role peer"},
		{"unknown peer token", func(c *Config) { c.AuthFile, c.AuthPeerToken = good, otherTok; c.InsecureAuthWithoutTLS = true }, "role peer"},
		{"peer token with a space", func(c *Config) { c.AuthFile, c.AuthPeerToken = good, "a b"; c.InsecureAuthWithoutTLS = true }, "printable ASCII"},
		{"peer token without policy", func(c *Config) { c.AuthPeerToken = peerTok }, "without an authorization file"},
		{"bad peer CA file", func(c *Config) { c.AuthFile, c.TLS = good, ca.node(t, c.ID); c.TLS.PeerCAFile = bad }, "peer CA file"},
	} {
		cfg := testConfig(t, "n1")
		c.set(&cfg)
		n, err := New(cfg, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: New = %v, want an ErrInvalidConfig mentioning %q", c.name, err, c.want)
		}
		if c.want == "" && c.set != nil && cfg.AuthFile != "" && n.auth == nil {
			t.Errorf("%s: no authorizer", c.name)
		}
		for _, tok := range []string{peerTok, rwTok, otherTok} {
			if err != nil && strings.Contains(err.Error(), tok) {
				t.Errorf("%s: the token shows in %v", c.name, err)
			}
		}
	}
}

// A three-node cluster with TLS and an authorization policy naming client
// certificates: identities come from the certificates' common names, a
// follower forwards an authorized write as itself (a peer by its node
// certificate), a read-only certificate may read but not write or run an
// admin call, and a certificate of the right CA whose name the policy does
// not know is authenticated but has no role (PermissionDenied).
func TestAuthTLSCluster(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, []byte(`{"certs": {"admin": "admin", "writer": "read-write", "reader": "read-only"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t)
	tc.clientTLS = clientTLS(t, ca, ca, "admin")
	nodes := tc.formCluster(3, func(c *Config) {
		withTLS(t, c, ca, ca)
		c.AuthFile = policy
	})
	follower := otherThan(nodes, tc.leader())
	dial := func(name string) *grpc.ClientConn {
		t.Helper()
		c, err := grpc.NewClient(follower.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, ca, name))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := func() context.Context { return ctxTimeout(t, 20*time.Second) }
	writer, reader, stranger := dial("writer"), dial("reader"), dial("stranger")

	before := sum(follower.forwarded.snapshot())
	if _, err := cairnpb.NewKVClient(writer).Put(ctx(), &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("writer's put through a follower: %v", err)
	}
	if sum(follower.forwarded.snapshot()) == before {
		t.Fatalf("the follower did not forward the put (it must, as a peer, to the leader)")
	}
	r, err := cairnpb.NewKVClient(reader).Get(ctx(), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_LINEARIZABLE})
	if err != nil || string(r.GetKv().GetValue()) != "v" {
		t.Fatalf("reader's linearizable get through a follower: %v, %v", r, err)
	}
	if _, err := cairnpb.NewKVClient(reader).Put(ctx(), &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("x")}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reader's put: %v, want PermissionDenied", err)
	}
	if _, err := cairnpb.NewClusterClient(writer).TransferLeader(ctx(), &cairnpb.TransferLeaderRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("writer's leader transfer: %v, want PermissionDenied", err)
	}
	if _, err := cairnpb.NewKVClient(stranger).Get(ctx(), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_SERIALIZABLE}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"stranger" has no role`) {
		t.Fatalf("get with a certificate the policy does not name: %v, want PermissionDenied", err)
	}
	// The refused put changed nothing.
	r, err = cairnpb.NewKVClient(writer).Get(ctx(), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_LINEARIZABLE})
	if err != nil || string(r.GetKv().GetValue()) != "v" {
		t.Fatalf("after the refused put: %v, %v", r, err)
	}
}
