package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestTLSIdentities runs a gRPC server over TLS as a node does (client
// certificates of the peer CA or the client CA verified if given) with the
// authorizer's interceptors, and calls it with certificates made here.
// The services are unimplemented: a call the authorizer lets through
// fails with Unimplemented, one it refuses with PermissionDenied or
// Unauthenticated.
func TestTLSIdentities(t *testing.T) {
	peerCA, clientCA, foreignCA := newCA(t, "cluster CA"), newCA(t, "client CA"), newCA(t, "foreign CA")
	policy, err := Parse([]byte(`{
		"certs": {"reader": "read-only", "writer.example": "read-write", "spiffe://cairn/ops": "admin"},
		"tokens": {"` + HashToken("rw-token") + `": "read-write"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	serverCert, _ := peerCA.issue(t, certSpec{cn: "n1", dns: []string{"localhost"}, ips: []net.IP{net.IPv4(127, 0, 0, 1)}, node: true})
	clientCAs := peerCA.pool()
	clientCAs.AddCert(clientCA.cert)

	start := func(peerCAs *x509.CertPool) string {
		a := New(policy, peerCAs)
		srv := grpc.NewServer(append(a.ServerOptions(), grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{serverCert},
			ClientCAs:    clientCAs,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			MinVersion:   tls.VersionTLS13,
		})))...)
		cairnpb.RegisterKVServer(srv, cairnpb.UnimplementedKVServer{})
		cairnpb.RegisterClusterServer(srv, cairnpb.UnimplementedClusterServer{})
		cairnpb.RegisterReadIndexServer(srv, cairnpb.UnimplementedReadIndexServer{})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		if err := CheckCovered(srv.GetServiceInfo()); err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	withPeers, withoutPeers := start(peerCA.pool()), start(nil)

	dial := func(addr string, cert *tls.Certificate, token string) *grpc.ClientConn {
		cfg := &tls.Config{RootCAs: peerCA.pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(TokenCredentials(token)))
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	cert := func(ca *testCA, s certSpec) *tls.Certificate {
		c, _ := ca.issue(t, s)
		return &c
	}
	node2 := cert(peerCA, certSpec{cn: "n2", node: true})
	reader := cert(clientCA, certSpec{cn: "reader"})
	writer := cert(clientCA, certSpec{cn: "someone", dns: []string{"writer.example"}})
	ops := cert(peerCA, certSpec{cn: "ops", uris: []string{"spiffe://cairn/ops"}}) // client usage only: no peer
	stranger := cert(peerCA, certSpec{cn: "stranger"})
	foreignNode := cert(foreignCA, certSpec{cn: "n2", node: true})

	type call struct {
		name string
		do   func(ctx context.Context, cc *grpc.ClientConn) error
	}
	get := call{"Get", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := cairnpb.NewKVClient(cc).Get(ctx, &cairnpb.GetRequest{Key: []byte("k")})
		return err
	}}
	put := call{"Put", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := cairnpb.NewKVClient(cc).Put(ctx, &cairnpb.PutRequest{Key: []byte("k")})
		return err
	}}
	addMember := call{"AddMember", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := cairnpb.NewClusterClient(cc).AddMember(ctx, &cairnpb.AddMemberRequest{})
		return err
	}}
	trace := call{"Trace (stream)", func(ctx context.Context, cc *grpc.ClientConn) error {
		s, err := cairnpb.NewClusterClient(cc).Trace(ctx, &cairnpb.TraceRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}}
	confirm := call{"Confirm", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := cairnpb.NewReadIndexClient(cc).Confirm(ctx, &cairnpb.ConfirmRequest{})
		return err
	}}
	healthCheck := call{"Health", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}}
	const (
		ok     = codes.Unimplemented // let through to the unimplemented service
		denied = codes.PermissionDenied
		unauth = codes.Unauthenticated
	)
	for _, c := range []struct {
		who   string
		addr  string
		cert  *tls.Certificate
		token string
		want  map[*call]codes.Code
	}{
		{"peer node", withPeers, node2, "", map[*call]codes.Code{&get: ok, &put: ok, &addMember: ok, &trace: ok, &confirm: ok}},
		{"peer node, peer CA unknown", withoutPeers, node2, "", map[*call]codes.Code{&get: denied, &confirm: denied}},
		{"reader (CN)", withPeers, reader, "", map[*call]codes.Code{&get: ok, &put: denied, &addMember: denied, &trace: denied, &confirm: denied, &healthCheck: codes.OK}},
		{"writer (DNS SAN)", withPeers, writer, "", map[*call]codes.Code{&get: ok, &put: ok, &addMember: denied, &confirm: denied}},
		{"ops (URI SAN, peer CA, client usage)", withPeers, ops, "", map[*call]codes.Code{&put: ok, &addMember: ok, &trace: ok, &confirm: denied}},
		{"unmapped certificate", withPeers, stranger, "", map[*call]codes.Code{&get: denied, &healthCheck: codes.OK}},
		{"unmapped certificate with a token", withPeers, stranger, "rw-token", map[*call]codes.Code{&put: ok, &addMember: denied}},
		{"reader certificate wins over a token", withPeers, reader, "rw-token", map[*call]codes.Code{&get: ok, &put: denied}},
		{"token only", withPeers, nil, "rw-token", map[*call]codes.Code{&put: ok, &trace: denied}},
		{"nothing", withPeers, nil, "", map[*call]codes.Code{&get: unauth, &trace: unauth, &confirm: unauth, &healthCheck: codes.OK}},
		{"unknown token", withPeers, nil, "guess", map[*call]codes.Code{&get: unauth}},
		// A certificate of another CA is not even sent (the server asks
		// for its CAs' certificates): the caller is anonymous.
		{"foreign node", withPeers, foreignNode, "", map[*call]codes.Code{&get: unauth, &confirm: unauth, &healthCheck: codes.OK}},
	} {
		cc := dial(c.addr, c.cert, c.token)
		for cl, want := range c.want {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := cl.do(ctx, cc)
			cancel()
			if got := status.Code(err); got != want {
				t.Errorf("%s: %s: %v, want %v", c.who, cl.name, err, want)
			}
			if status.Code(err) == denied && !strings.Contains(err.Error(), "needs role") {
				t.Errorf("%s: %s: %v does not name the role needed", c.who, cl.name, err)
			}
		}
	}

	// Plaintext: a token works without TLS (TokenCredentials does not
	// require transport security).
	a := New(policy, nil)
	srv := grpc.NewServer(a.ServerOptions()...)
	cairnpb.RegisterKVServer(srv, cairnpb.UnimplementedKVServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(TokenCredentials("rw-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := put.do(ctx, cc); status.Code(err) != ok {
		t.Fatalf("token over plaintext: %v", err)
	}
}
