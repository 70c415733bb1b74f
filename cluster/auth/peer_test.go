package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// intermediate returns a CA signed by ca whose certificate allows only
// the extended key usages eku (none: any).
func (ca *testCA) intermediate(t testing.TB, name string, eku ...x509.ExtKeyUsage) *testCA {
	return signCA(t, name, ca, eku...)
}

// tlsPeerCtx is a server context whose caller presented chain (leaf
// first) and the handshake verified it up to root.
func tlsPeerCtx(root *x509.Certificate, chain ...*x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
		PeerCertificates: chain, VerifiedChains: [][]*x509.Certificate{append(slices.Clone(chain), root)},
	}}})
}

func TestNodeNames(t *testing.T) {
	for _, c := range []struct {
		cert *x509.Certificate
		want []string
	}{
		// The SANs every node certificate carries name no node.
		{&x509.Certificate{Subject: pkix.Name{CommonName: "n1"}, DNSNames: []string{"n1", "localhost", "db.example"}}, []string{"n1"}},
		{&x509.Certificate{DNSNames: []string{"n2"}}, nil},
		{&x509.Certificate{Subject: pkix.Name{CommonName: "n3"}}, []string{"n3"}},
		{&x509.Certificate{}, nil},
	} {
		if got := NodeNames(c.cert); !slices.Equal(got, c.want) {
			t.Errorf("NodeNames(CN %q, DNS %q) = %q, want %q", c.cert.Subject.CommonName, c.cert.DNSNames, got, c.want)
		}
	}
}

// TestPeerAllowed: with SetPeerAllowed, a node certificate is a peer only
// under a name the function allows (its CN), and is then
// named by it; one it refuses is an ordinary certificate (the policy's
// role for one of its names, else none).
func TestPeerAllowed(t *testing.T) {
	ca := newCA(t, "cluster CA")
	policy, err := Parse([]byte(`{"certs": {"n4": "read-only"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := New(policy, ca.pool())
	members := map[string]bool{"n1": true, "n2": true}
	var mu sync.Mutex
	a.SetPeerAllowed(func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return members[id]
	})
	node := func(cn string, dns ...string) context.Context {
		_, leaf := ca.issue(t, certSpec{cn: cn, dns: dns, node: true})
		return tlsPeerCtx(ca.cert, leaf)
	}
	n2 := node("n2", "n2", "localhost")
	n3 := node("n3", "n3", "localhost")
	bySAN := node("renamed", "localhost", "n1")
	n4 := node("n4", "n4")
	for _, c := range []struct {
		who      string
		ctx      context.Context
		wantKind string
		wantName string
		wantRole Role
	}{
		{"n2 (a member)", n2, "peer certificate", "n2", Peer},
		{"n3 (not a member)", n3, "non-peer node certificate", "n3", Open},
		// A DNS SAN names no node (every node certificate has localhost and
		// the extra hosts): a certificate naming a member only there is
		// not that member.
		{"a member named only by a DNS SAN", bySAN, "non-peer node certificate", "renamed", Open},
		{"n4 (not a member, mapped by the policy)", n4, "certificate", "n4", ReadOnly},
	} {
		id, ok, err := a.Identify(c.ctx)
		if err != nil || !ok || id.Kind != c.wantKind || id.Name != c.wantName || id.Role != c.wantRole {
			t.Errorf("%s: Identify = %+v, %v, %v; want %s %q role %v", c.who, id, ok, err, c.wantKind, c.wantName, c.wantRole)
		}
	}
	for _, c := range []struct {
		who    string
		ctx    context.Context
		method string
		want   codes.Code
	}{
		{"n2", n2, "/cairn.v1.ReadIndex/Confirm", codes.OK},
		{"n2", n2, "/cairn.v1.KV/Put", codes.OK},
		{"n2", n2, unknownMethod, codes.OK},
		{"n3", n3, "/cairn.v1.ReadIndex/Confirm", codes.PermissionDenied},
		{"n3", n3, "/cairn.v1.KV/Put", codes.PermissionDenied},
		{"n3", n3, "/cairn.v1.Cluster/AddMember", codes.PermissionDenied},
		{"n3", n3, "/cairn.v1.KV/Get", codes.PermissionDenied},
		{"n3", n3, unknownMethod, codes.PermissionDenied},
		{"n3", n3, "/grpc.health.v1.Health/Check", codes.OK},
		{"n4", n4, "/cairn.v1.KV/Get", codes.OK},
		{"n4", n4, "/cairn.v1.KV/Put", codes.PermissionDenied},
		{"n4", n4, "/cairn.v1.ReadIndex/Confirm", codes.PermissionDenied},
	} {
		if got := status.Code(a.Authorize(c.ctx, c.method)); got != c.want {
			t.Errorf("%s calls %s: %v, want %v", c.who, c.method, got, c.want)
		}
	}
	// The function is asked on every call: removing n2 takes its peer
	// role at once, adding n3 gives it one.
	mu.Lock()
	members = map[string]bool{"n1": true, "n3": true}
	mu.Unlock()
	if err := a.Authorize(n2, "/cairn.v1.ReadIndex/Confirm"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("n2 removed: Confirm: %v", err)
	}
	if err := a.Authorize(n3, "/cairn.v1.ReadIndex/Confirm"); err != nil {
		t.Errorf("n3 added: Confirm: %v", err)
	}
	// nil: every node certificate of the peer CA is a peer again, named
	// by its CN.
	a.SetPeerAllowed(nil)
	if id, _, _ := a.Identify(bySAN); id.Role != Peer || id.Name != "renamed" {
		t.Errorf("without a function: %+v", id)
	}
}

// TestPeerAllowedOverTLS: the same over a TLS server, and on a connection
// that stays open while the node it belongs to is removed.
func TestPeerAllowedOverTLS(t *testing.T) {
	ca := newCA(t, "cluster CA")
	serverCert, _ := ca.issue(t, certSpec{cn: "n1", dns: []string{"localhost"}, node: true})
	policy, err := Parse([]byte(`{"certs": {"n4": "read-write"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := New(policy, ca.pool())
	var removed atomic.Bool // n2 is removed
	a.SetPeerAllowed(func(id string) bool { return id == "n1" || (id == "n2" && !removed.Load()) })
	addr := serveTLS(t, a, serverCert, ca.pool())

	dial := func(cert tls.Certificate) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	cert := func(cn string) tls.Certificate {
		c, _ := ca.issue(t, certSpec{cn: cn, dns: []string{cn, "localhost"}, node: true})
		return c
	}
	n2, n3, n4 := dial(cert("n2")), dial(cert("n3")), dial(cert("n4"))
	check := func(who string, cc *grpc.ClientConn, wantConfirm, wantPut codes.Code) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := cairnpb.NewReadIndexClient(cc).Confirm(ctx, &cairnpb.ConfirmRequest{})
		if status.Code(err) != wantConfirm {
			t.Errorf("%s: Confirm: %v, want %v", who, err, wantConfirm)
		}
		_, err = cairnpb.NewKVClient(cc).Put(ctx, &cairnpb.PutRequest{Key: []byte("k")})
		if status.Code(err) != wantPut {
			t.Errorf("%s: Put: %v, want %v", who, err, wantPut)
		}
	}
	const ok = codes.Unimplemented // let through to the unimplemented services
	check("n2 (a member)", n2, ok, ok)
	check("n3 (not a member)", n3, codes.PermissionDenied, codes.PermissionDenied)
	check("n4 (not a member, read-write in the policy)", n4, codes.PermissionDenied, ok)
	removed.Store(true)
	check("n2 after its removal, same connection", n2, codes.PermissionDenied, codes.PermissionDenied)
}

// serveTLS serves a's options and unimplemented cairn services over TLS
// (client certificates of clientCAs verified if given) until the test
// ends; it returns the address.
func serveTLS(t *testing.T, a *Authorizer, cert tls.Certificate, clientCAs *x509.CertPool) string {
	srv := grpc.NewServer(append(a.ServerOptions(), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    clientCAs,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS13,
	})))...)
	cairnpb.RegisterKVServer(srv, cairnpb.UnimplementedKVServer{})
	cairnpb.RegisterReadIndexServer(srv, cairnpb.UnimplementedReadIndexServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestPeerUsagesAlongChain: a node certificate (both usages) under an
// intermediate CA that allows client authentication only is no peer: the
// usages are checked along the chain, not on the leaf alone. Under an
// intermediate that allows both, or any, it is.
func TestPeerUsagesAlongChain(t *testing.T) {
	root := newCA(t, "cluster root")
	clientOnly := root.intermediate(t, "client-only intermediate", x509.ExtKeyUsageClientAuth)
	serverOnly := root.intermediate(t, "server-only intermediate", x509.ExtKeyUsageServerAuth)
	both := root.intermediate(t, "node intermediate", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	unrestricted := root.intermediate(t, "unrestricted intermediate")
	a := New(nil, root.pool())
	for _, c := range []struct {
		inter *testCA
		peer  bool
	}{{clientOnly, false}, {serverOnly, false}, {both, true}, {unrestricted, true}} {
		_, leaf := c.inter.issue(t, certSpec{cn: "n2", node: true})
		// What the old leaf-only check looked at holds for all: the leaf
		// has both usages, the chain ends at the peer CA.
		if !hasUsage(leaf, x509.ExtKeyUsageServerAuth) || !hasUsage(leaf, x509.ExtKeyUsageClientAuth) {
			t.Fatal("test certificate without both usages")
		}
		id, _, _ := a.Identify(tlsPeerCtx(root.cert, leaf, c.inter.cert))
		if got := id.Role == Peer; got != c.peer {
			t.Errorf("node certificate under the %s: identity %+v; want peer %v", c.inter.cert.Subject.CommonName, id, c.peer)
		}
		if err := a.Authorize(tlsPeerCtx(root.cert, leaf, c.inter.cert), "/cairn.v1.ReadIndex/Confirm"); (err == nil) != c.peer {
			t.Errorf("node certificate under the %s: Confirm: %v", c.inter.cert.Subject.CommonName, err)
		}
	}

	// Over TLS: the handshake (client authentication only) accepts the
	// chain under the client-only intermediate; the authorizer does not
	// make it a peer.
	serverCert, _ := root.issue(t, certSpec{cn: "n1", dns: []string{"localhost"}, node: true})
	addr := serveTLS(t, a, serverCert, root.pool())
	for _, c := range []struct {
		inter *testCA
		want  codes.Code
	}{{clientOnly, codes.PermissionDenied}, {both, codes.Unimplemented}} {
		leafCert, _ := c.inter.issue(t, certSpec{cn: "n2", node: true})
		leafCert.Certificate = append(leafCert.Certificate, c.inter.cert.Raw)
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: root.pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leafCert},
		})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = cairnpb.NewReadIndexClient(cc).Confirm(ctx, &cairnpb.ConfirmRequest{})
		cancel()
		cc.Close()
		if status.Code(err) != c.want {
			t.Errorf("node certificate under the %s over TLS: Confirm: %v, want %v", c.inter.cert.Subject.CommonName, err, c.want)
		}
	}
}

// countingCodec is the proto codec, counting the requests it decodes.
type countingCodec struct {
	encoding.CodecV2
	puts atomic.Int64
}

func (c *countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*cairnpb.PutRequest); ok {
		c.puts.Add(1)
	}
	return c.CodecV2.Unmarshal(data, v)
}

// TestTapHandleRefusesBeforeDecoding: a call without credentials, or with
// a bad token, to a method that needs a role is refused with
// Unauthenticated before the server decodes (or reads) its request; with
// the interceptors alone, the request is decoded first. Open methods
// pass; a known token's role is still checked by the interceptors.
func TestTapHandleRefusesBeforeDecoding(t *testing.T) {
	policy, err := Parse([]byte(`{"tokens": {"` + HashToken("reader") + `": "read-only", "` + HashToken("writer") + `": "read-write"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := New(policy, nil)
	serve := func(opts ...grpc.ServerOption) (string, *countingCodec) {
		codec := &countingCodec{CodecV2: encoding.GetCodecV2("proto")}
		srv := grpc.NewServer(append(opts, grpc.ForceServerCodecV2(codec), grpc.MaxRecvMsgSize(8<<20))...)
		cairnpb.RegisterKVServer(srv, cairnpb.UnimplementedKVServer{})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		return lis.Addr().String(), codec
	}
	withTap, tapCodec := serve(a.ServerOptions()...)
	interceptorsOnly, icCodec := serve(grpc.ChainUnaryInterceptor(a.UnaryInterceptor))

	cc := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	tapConn, icConn := cc(withTap), cc(interceptorsOnly)
	big := &cairnpb.PutRequest{Key: []byte("k"), Value: make([]byte, 4<<20)}
	put := func(conn *grpc.ClientConn, header string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, header)
		}
		_, err := cairnpb.NewKVClient(conn).Put(ctx, big)
		return err
	}
	for _, header := range []string{"", "Bearer guess", "Basic writer", "Bearer "} {
		if err := put(tapConn, header); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Put with authorization %q: %v, want Unauthenticated", header, err)
		}
	}
	if n := tapCodec.puts.Load(); n != 0 {
		t.Fatalf("the server decoded %d refused requests", n)
	}
	// Health checks need nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(tapConn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without credentials: %v", err)
	}
	// A known token passes the tap handle; its role is the interceptors'
	// business.
	if err := put(tapConn, "Bearer reader"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Put with a read-only token: %v, want PermissionDenied", err)
	}
	if err := put(tapConn, "Bearer writer"); status.Code(err) != codes.Unimplemented {
		t.Errorf("Put with a read-write token: %v, want Unimplemented", err)
	}
	if n := tapCodec.puts.Load(); n != 2 {
		t.Errorf("the server decoded %d requests with known tokens, want 2", n)
	}
	// The test sees decoding: without the tap handle the same refused
	// call is decoded first.
	if err := put(icConn, ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("interceptors only: Put without credentials: %v", err)
	}
	if n := icCodec.puts.Load(); n != 1 {
		t.Errorf("interceptors only: %d decoded, want 1", n)
	}
}
