package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/internal/certs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// tlsKVServer is a one-node stand-in holding keys in a map, serving over
// TLS; it records the CN of each caller's client certificate.
type tlsKVServer struct {
	cairnpb.UnimplementedKVServer
	cairnpb.UnimplementedClusterServer
	addr string

	mu      sync.Mutex
	data    map[string][]byte
	callers []string
}

func (s *tlsKVServer) caller(ctx context.Context) {
	cn := "(none)"
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			cn = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	s.mu.Lock()
	s.callers = append(s.callers, cn)
	s.mu.Unlock()
}

func (s *tlsKVServer) Put(ctx context.Context, req *cairnpb.PutRequest) (*cairnpb.PutResponse, error) {
	s.caller(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[string(req.Key)] = req.Value
	return &cairnpb.PutResponse{}, nil
}

func (s *tlsKVServer) Get(ctx context.Context, req *cairnpb.GetRequest) (*cairnpb.GetResponse, error) {
	s.caller(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[string(req.Key)]
	if !ok {
		return &cairnpb.GetResponse{}, nil
	}
	return &cairnpb.GetResponse{Kv: &cairnpb.KeyValue{Key: req.Key, Value: v, Version: 1}}, nil
}

func (s *tlsKVServer) Status(ctx context.Context, _ *cairnpb.StatusRequest) (*cairnpb.StatusResponse, error) {
	return &cairnpb.StatusResponse{NodeId: "n1", GrpcAddr: s.addr, LeaderId: "n1", LeaderGrpcAddr: s.addr, State: cairnpb.RaftState_LEADER}, nil
}

// serveTLSNode serves a tlsKVServer with n1's certificate from dir,
// requiring a client certificate signed by dir's CA when mTLS is set.
func serveTLSNode(t *testing.T, dir string, mTLS bool) *tlsKVServer {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if mTLS {
		b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		cfg.ClientCAs.AppendCertsFromPEM(b)
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsKVServer{addr: lis.Addr().String(), data: map[string][]byte{}}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	cairnpb.RegisterKVServer(srv, s)
	cairnpb.RegisterClusterServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

func tlsCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := certs.Generate(certs.Options{Dir: dir, Nodes: []string{"n1"}, Clients: []string{"admin", "reader"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The CLI talks TLS with --cacert, presents --cert/--key, reads them from
// the environment too, and fails clearly with the wrong CA or none.
func TestCLITLS(t *testing.T) {
	dir, other := tlsCerts(t), tlsCerts(t)
	p := func(d, f string) string { return filepath.Join(d, f) }

	// Server-authenticated TLS only.
	s := serveTLSNode(t, dir, false)
	if out := ok(t, "", "--endpoints", s.addr, "--cacert", p(dir, "ca.pem"), "put", "k", "v1"); out != "OK\n" {
		t.Fatalf("put over TLS: %q", out)
	}
	if out := ok(t, "", "--endpoints", s.addr, "--cacert", p(dir, "ca.pem"), "get", "k"); out != "v1\n" {
		t.Fatalf("get over TLS: %q", out)
	}
	// A certificate that does not verify fails at once, not after
	// --timeout's retries, naming the cause; status shows it per node.
	start := time.Now()
	r := cairn(t, "", "--endpoints", s.addr, "--timeout", "30s", "--cacert", p(other, "ca.pem"), "get", "k")
	if took := time.Since(start); r.code != 1 || !strings.Contains(r.stderr, "x509: certificate signed by unknown authority") ||
		strings.Contains(r.stderr, "deadline") || took > 10*time.Second {
		t.Fatalf("wrong CA: after %v: %+v", took, r)
	}
	t.Logf("wrong CA: %s", r.stderr)
	r = cairn(t, "", "--endpoints", s.addr, "--timeout", "30s", "--cacert", p(other, "ca.pem"), "status")
	if r.code != 1 || !regexp.MustCompile(`(?m)^\? +`+regexp.QuoteMeta(s.addr)+` +tls error `).MatchString(r.stdout) ||
		!strings.Contains(r.stderr, "the TLS handshake failed with every node") {
		t.Fatalf("status with the wrong CA: %+v", r)
	}
	r = cairn(t, "", "--endpoints", s.addr, "--timeout", "2s", "get", "k")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "give --cacert") {
		t.Fatalf("no --cacert against a TLS node: %+v", r)
	}
	t.Logf("no --cacert: %s", r.stderr)

	// TLS against a plaintext node.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.NewServer()
	ps := &tlsKVServer{addr: lis.Addr().String(), data: map[string][]byte{}}
	cairnpb.RegisterKVServer(plain, ps)
	cairnpb.RegisterClusterServer(plain, ps)
	go plain.Serve(lis)
	t.Cleanup(plain.Stop)
	start = time.Now()
	r = cairn(t, "", "--endpoints", ps.addr, "--timeout", "30s", "--cacert", p(dir, "ca.pem"), "get", "k")
	if took := time.Since(start); r.code != 1 || !strings.Contains(r.stderr, "the node does not serve TLS") || took > 10*time.Second {
		t.Fatalf("TLS against a plaintext node: after %v: %+v", took, r)
	}

	// mTLS: the client certificate is required, and the one from the
	// flags (or the environment) is presented.
	m := serveTLSNode(t, dir, true)
	if out := ok(t, "", "--endpoints", m.addr, "--cacert", p(dir, "ca.pem"), "--cert", p(dir, "admin.pem"), "--key", p(dir, "admin-key.pem"), "put", "k", "v2"); out != "OK\n" {
		t.Fatalf("put over mTLS: %q", out)
	}
	t.Setenv(envCACert, p(dir, "ca.pem"))
	t.Setenv(envCert, p(dir, "reader.pem"))
	t.Setenv(envKey, p(dir, "reader-key.pem"))
	if out := ok(t, "", "--endpoints", m.addr, "get", "k"); out != "v2\n" {
		t.Fatalf("get over mTLS, files from the environment: %q", out)
	}
	m.mu.Lock()
	callers := strings.Join(m.callers, ",")
	m.mu.Unlock()
	if callers != "admin,reader" {
		t.Fatalf("client certificates seen by the node: %s, want admin,reader", callers)
	}
	// Flags win over the environment: a foreign client certificate is
	// refused, at once.
	start = time.Now()
	r = cairn(t, "", "--endpoints", m.addr, "--timeout", "30s", "--cert", p(other, "admin.pem"), "--key", p(other, "admin-key.pem"), "get", "k")
	if took := time.Since(start); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "remote error: tls: unknown certificate authority") ||
		took > 10*time.Second {
		t.Fatalf("foreign client certificate: after %v: %+v", took, r)
	}
	t.Setenv(envCert, "")
	t.Setenv(envKey, "")
	start = time.Now()
	r = cairn(t, "", "--endpoints", m.addr, "--timeout", "30s", "get", "k")
	if took := time.Since(start); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "remote error: tls: certificate required") ||
		took > 10*time.Second {
		t.Fatalf("no client certificate: after %v: %+v", took, r)
	}
	t.Setenv(envCACert, "")

	// Bad TLS settings: clear errors, nothing sent.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cert", p(dir, "admin.pem")}, 2, "--cert and --key go together"},
		{[]string{"--key", p(dir, "admin-key.pem"), "--cacert", p(dir, "ca.pem")}, 2, "--cert and --key go together"},
		{[]string{"--cacert", p(dir, "nope.pem")}, 1, "nope.pem: no such file"},
		{[]string{"--cacert", p(dir, "admin-key.pem")}, 1, `holds a PEM "PRIVATE KEY" block, not a certificate`},
		{[]string{"--cacert", p(dir, "ca.pem"), "--cert", p(dir, "admin.pem"), "--key", p(dir, "reader-key.pem")}, 1, "does not match"},
	} {
		r := cairn(t, "", append(append([]string{"--endpoints", m.addr}, c.args...), "put", "k", "bad")...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "BEGIN") {
			t.Errorf("%v: %+v, want exit %d and %q", c.args, r, c.code, c.want)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if string(m.data["k"]) != "v2" || len(m.callers) != 2 {
		t.Fatalf("a refused call reached the node: %q, callers %v", m.data["k"], m.callers)
	}
}
