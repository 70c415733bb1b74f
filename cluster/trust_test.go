package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/auth"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/internal/testnet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The attacks of the trust review (README.md, "Security"), each run against
// real nodes: an attacker who has the gossip key joins gossip with members
// whose gRPC address is a fake server it runs and whose raft address is
// dead or another node's.

// fakePeer is an attacker's gRPC server: it claims, on every call, to be a
// healthy, caught-up follower of the leader, and records every credential
// and secret sent to it.
type fakePeer struct {
	cairnpb.UnimplementedClusterServer
	cairnpb.UnimplementedReadIndexServer
	id, leaderID string
	addr         string
	srv          *grpc.Server

	mu      sync.Mutex
	tokens  []string // authorization headers received
	methods []string // methods called
	keys    int      // gossip keys received (keyring install/use/remove)
}

func startFakePeer(t *testing.T, id, leaderID string) *fakePeer {
	t.Helper()
	lis, err := net.Listen("tcp", testnet.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{id: id, leaderID: leaderID, addr: lis.Addr().String()}
	f.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		f.mu.Lock()
		f.tokens = append(f.tokens, md.Get(auth.AuthorizationKey)...)
		f.methods = append(f.methods, info.FullMethod)
		f.mu.Unlock()
		return h(ctx, req)
	}))
	cairnpb.RegisterClusterServer(f.srv, f)
	cairnpb.RegisterReadIndexServer(f.srv, f)
	go f.srv.Serve(lis)
	t.Cleanup(f.srv.Stop)
	return f
}

// Status lies: a follower of the leader, in every term, far ahead.
func (f *fakePeer) Status(context.Context, *cairnpb.StatusRequest) (*cairnpb.StatusResponse, error) {
	return &cairnpb.StatusResponse{NodeId: f.id, LeaderId: f.leaderID, Term: 1 << 40, LastLogIndex: 1 << 40,
		State: cairnpb.RaftState_FOLLOWER, LastLeaderContactMs: 1}, nil
}

// ProvePeer answers with a made-up proof.
func (f *fakePeer) ProvePeer(_ context.Context, req *cairnpb.ProvePeerRequest) (*cairnpb.ProvePeerResponse, error) {
	nonce, proof := make([]byte, 32), make([]byte, 32)
	rand.Read(nonce)
	rand.Read(proof)
	return &cairnpb.ProvePeerResponse{NodeId: f.id, GrpcAddr: f.addr, Nonce: nonce, Proof: proof}, nil
}

func (f *fakePeer) GossipKeyring(_ context.Context, req *cairnpb.GossipKeyringRequest) (*cairnpb.GossipKeyringResponse, error) {
	f.mu.Lock()
	if len(req.GetKey()) > 0 {
		f.keys++
	}
	f.mu.Unlock()
	return &cairnpb.GossipKeyringResponse{Nodes: []*cairnpb.GossipKeyringNode{{NodeId: f.id}}}, nil
}

// seen returns what the fake server received.
func (f *fakePeer) seen() (tokens, methods []string, keys int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tokens), slices.Clone(f.methods), f.keys
}

// startImpostor joins the gossip of join as member id, claiming grpcAddr
// and raftAddr, with the cluster's gossip key.
func startImpostor(t *testing.T, id string, key []byte, grpcAddr, raftAddr, join string) *membership.Discovery {
	t.Helper()
	host, port, _ := net.SplitHostPort(testnet.Addr(t))
	p, _ := strconv.Atoi(port)
	d, err := membership.New(membership.Config{
		Meta:     membership.Meta{ID: id, RaftAddr: raftAddr, GRPCAddr: grpcAddr, Incarnation: uint64(time.Now().UnixNano())},
		BindAddr: host, BindPort: p, Profile: membership.ProfileLocal, SecretKey: key,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown() })
	if _, err := d.Join([]string{join}); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTrustGossipKeyAloneWithoutTLS (finding 1): two impostors that have
// only the gossip key join a cluster that authenticates peers by token,
// with fake gRPC servers and dead raft addresses. They are never made raft
// servers, no node sends them the peer token (status polls, the status
// page's fan-out, the keyring fan-out) or a gossip key, and the cluster
// keeps its leader and takes writes.
func TestTrustGossipKeyAloneWithoutTLS(t *testing.T) {
	const peerTok, rwTok, adminTok = "peer-secret-token", "rw-token", "admin-token"
	policy := writePolicy(t, map[string]string{peerTok: "peer", rwTok: "read-write", adminTok: "admin"})
	gossipKey := bytes.Repeat([]byte{9}, 32)
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(c *Config) {
		c.AuthFile, c.AuthPeerToken, c.InsecureAuthWithoutTLS = policy, peerTok, true
		c.GossipKey = gossipKey
	})
	leader := tc.leader()
	var fakes []*fakePeer
	for _, id := range []string{"evil1", "evil2"} {
		f := startFakePeer(t, id, leader.ID())
		fakes = append(fakes, f)
		startImpostor(t, id, gossipKey, f.addr, testnet.Addr(t), leader.GossipAddr())
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, "the impostors alive in gossip of "+n.ID(), func() bool {
			return seesAlive(n, "evil1") && seesAlive(n, "evil2")
		})
	}
	rounds := leader.reconcileRounds.Load()
	waitFor(t, 10*time.Second, "20 reconcile rounds", func() bool { return leader.reconcileRounds.Load() >= rounds+20 })

	// The status page's fan-out and a keyring rotation through a
	// follower, with an admin token.
	if _, err := leader.MemberStatuses(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	adm := cairnpb.NewClusterClient(tokenConn(t, otherThan(nodes, leader), adminTok))
	newKey := bytes.Repeat([]byte{10}, 32)
	kr, err := adm.GossipKeyring(ctxTimeout(t, 10*time.Second), &cairnpb.GossipKeyringRequest{Op: cairnpb.GossipKeyringRequest_INSTALL, Key: newKey})
	if err != nil {
		t.Fatalf("keyring install: %v", err)
	}
	for _, nd := range kr.GetNodes() {
		if (nd.GetNodeId() == "evil1" || nd.GetNodeId() == "evil2") && nd.GetError() == "" {
			t.Errorf("the keyring install answered for impostor %s without an error", nd.GetNodeId())
		}
	}

	if ids := configIDs(leader); !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
		t.Fatalf("configuration %v: an impostor became a raft server", ids)
	}
	for _, f := range fakes {
		tokens, methods, keys := f.seen()
		if len(tokens) > 0 {
			t.Errorf("impostor %s received %d authorization headers (methods %v)", f.id, len(tokens), methods)
		}
		if keys > 0 {
			t.Errorf("impostor %s received %d gossip keys", f.id, keys)
		}
		if !slices.Contains(methods, cairnpb.ReadIndex_ProvePeer_FullMethodName) {
			t.Errorf("impostor %s was never asked to prove itself: %v", f.id, methods)
		}
	}
	kv := cairnpb.NewKVClient(tokenConn(t, leader, rwTok))
	put(t, kv, "after-impostors", "v")
	if got := get(t, kv, "after-impostors", cairnpb.Consistency_LINEARIZABLE); string(got.GetKv().GetValue()) != "v" {
		t.Fatalf("get after the impostors: %v", got)
	}
}

// TestTrustTLSImpostorsCannotJoinOrTakeOver (finding 4): with TLS, twelve
// impostors with the gossip key but no node certificate are never added,
// and one claiming the raft address of a voter that just crashed does not
// get it removed; the voter, restarted, is a voter again.
func TestTrustTLSImpostorsCannotJoinOrTakeOver(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	gossipKey := bytes.Repeat([]byte{11}, 32)
	tc := newTestCluster(t)
	tc.clientTLS = clientTLS(t, ca, ca, "admin")
	nodes := tc.formCluster(3, func(c *Config) {
		withTLS(t, c, ca, nil)
		c.GossipKey = gossipKey
		// One voter may go: a take-over would be allowed by the floor.
		c.Policy.MinQuorum = 1
		c.Policy.FailedGracePeriod = time.Minute
	})
	leader := tc.leader()
	victim := otherThan(nodes, leader)
	victimRaft, victimID := string(victim.raftAddr), victim.ID()
	if err := victim.kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "gossip to see the victim dead", func() bool {
		m, ok := leader.member(victimID)
		return ok && m.State == membership.StateDead
	})
	// Claim the victim's raft address, and a dozen more members.
	f := startFakePeer(t, "evil", leader.ID())
	startImpostor(t, "evil", gossipKey, f.addr, victimRaft, leader.GossipAddr())
	for i := range 12 {
		g := startFakePeer(t, fmt.Sprintf("evil-%d", i), leader.ID())
		startImpostor(t, g.id, gossipKey, g.addr, testnet.Addr(t), leader.GossipAddr())
	}
	waitFor(t, 10*time.Second, "the impostors alive in the leader's gossip", func() bool {
		for i := range 12 {
			if !seesAlive(leader, fmt.Sprintf("evil-%d", i)) {
				return false
			}
		}
		return seesAlive(leader, "evil")
	})
	rounds := leader.reconcileRounds.Load()
	waitFor(t, 10*time.Second, "20 reconcile rounds", func() bool { return leader.reconcileRounds.Load() >= rounds+20 })
	ids := configIDs(leader)
	if !slices.Contains(ids, victimID) || len(ids) != 3 {
		t.Fatalf("configuration %v: the crashed voter %s was taken over, or an impostor added", ids, victimID)
	}
	tc.restart(victimID)
	tc.waitReady(tc.live(), 3)
}

// TestTrustNodeCertificateBoundToNodeID (finding 5): a node certificate
// of the cluster CA is a peer only while the node it names is in the
// configuration. One naming no member gets no role; a removed member's
// loses its role.
func TestTrustNodeCertificateBoundToNodeID(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, []byte(`{"certs": {"admin": "admin"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t)
	tc.clientTLS = clientTLS(t, ca, ca, "admin")
	nodes := tc.formCluster(3, func(c *Config) {
		withTLS(t, c, ca, ca)
		c.AuthFile = policy
	})
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	// asNode dials n with a node certificate naming id.
	asNode := func(n *Node, id string) cairnpb.KVClient {
		t.Helper()
		files := ca.node(t, id)
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cairnpb.NewKVClient(cc)
	}
	tryPut := func(kv cairnpb.KVClient, key string) error {
		_, err := kv.Put(ctxTimeout(t, 10*time.Second), &cairnpb.PutRequest{Key: []byte(key), Value: []byte("v")})
		return err
	}
	// A node certificate of a node that is not a member.
	for _, n := range []*Node{leader, follower} {
		wantCode(t, "put with a stranger's node certificate via "+n.ID(), tryPut(asNode(n, "n9"), "stranger"), codes.PermissionDenied, "")
	}
	// A member's: a peer.
	victim := otherThan(nodes, leader)
	victimKV := asNode(leader, victim.ID())
	if err := tryPut(victimKV, "member"); err != nil {
		t.Fatalf("put with member %s's node certificate: %v", victim.ID(), err)
	}
	// Removed, the member's certificate is no peer any more. (Stopped
	// first: alive in gossip, reconcile would add it back.)
	if err := victim.kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "gossip to see the member dead", func() bool {
		m, ok := leader.member(victim.ID())
		return ok && m.State == membership.StateDead
	})
	if _, err := tc.admin(leader).RemoveMember(ctxTimeout(t, 10*time.Second), &cairnpb.RemoveMemberRequest{Id: victim.ID()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the removal", func() bool { return !slices.Contains(configIDs(leader), victim.ID()) })
	waitFor(t, 10*time.Second, "the removed member's certificate refused", func() bool {
		err := tryPut(victimKV, "removed")
		return status.Code(err) == codes.PermissionDenied
	})
	// Nothing the refused calls asked for was written.
	for _, key := range []string{"stranger", "removed"} {
		if r := get(t, tc.kv(leader), key, cairnpb.Consistency_LINEARIZABLE); r.GetKv() != nil {
			t.Fatalf("a refused put of %s wrote: %v", key, r)
		}
	}
}
