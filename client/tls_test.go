package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/internal/certs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// tlsNode is a one-node stand-in serving Get and Status over TLS.
type tlsNode struct {
	cairnpb.UnimplementedKVServer
	cairnpb.UnimplementedClusterServer
	addr string
}

func (n *tlsNode) Get(ctx context.Context, req *cairnpb.GetRequest) (*cairnpb.GetResponse, error) {
	return &cairnpb.GetResponse{Kv: &cairnpb.KeyValue{Key: req.Key, Value: []byte("secret value")}}, nil
}

func (n *tlsNode) Status(ctx context.Context, _ *cairnpb.StatusRequest) (*cairnpb.StatusResponse, error) {
	return &cairnpb.StatusResponse{NodeId: "n1", GrpcAddr: n.addr, LeaderId: "n1", LeaderGrpcAddr: n.addr, State: cairnpb.RaftState_LEADER}, nil
}

// serveTLS starts a node with n1's certificate from dir; with mTLS it
// requires a client certificate signed by dir's CA.
func serveTLS(t *testing.T, dir string, mTLS bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveTLSOn(t, dir, mTLS, lis)
}

// serveTLSOn is serveTLS on lis. It may be called from any goroutine: it
// reports errors with t.Error.
func serveTLSOn(t *testing.T, dir string, mTLS bool, lis net.Listener) string {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"))
	if err != nil {
		t.Error(err)
		lis.Close()
		return ""
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if mTLS {
		b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
		if err != nil {
			t.Error(err)
			lis.Close()
			return ""
		}
		cfg.ClientCAs = x509.NewCertPool()
		cfg.ClientCAs.AppendCertsFromPEM(b)
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	n := &tlsNode{addr: lis.Addr().String()}
	cairnpb.RegisterKVServer(srv, n)
	cairnpb.RegisterClusterServer(srv, n)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return n.addr
}

func genCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := certs.Generate(certs.Options{Dir: dir, Nodes: []string{"n1"}, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadTLSConnects(t *testing.T) {
	dir, other := genCerts(t), genCerts(t)
	addr := serveTLS(t, dir, true)
	// A plaintext client of a TLS node is retried until the timeout:
	// short ones for the calls that must fail.
	timeout := 30 * time.Second
	get := func(cfg *tls.Config) error {
		t.Helper()
		c, err := New(Config{Endpoints: []string{addr}, TLS: cfg, RequestTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		kv, err := c.Get(context.Background(), []byte("k"))
		if err == nil && string(kv.Value) != "secret value" {
			t.Fatalf("got %q", kv.Value)
		}
		return err
	}
	p := func(d, f string) string { return filepath.Join(d, f) }

	cfg, err := LoadTLS(p(dir, "ca.pem"), p(dir, "admin.pem"), p(dir, "admin-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := get(cfg); err != nil {
		t.Fatalf("right CA and client certificate: %v", err)
	}
	timeout = 2 * time.Second
	// The server's certificate is from a CA the client does not trust.
	cfg, err = LoadTLS(p(other, "ca.pem"), p(dir, "admin.pem"), p(dir, "admin-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := get(cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("wrong CA: %v", err)
	}
	// A client certificate from another CA, or none, is refused by the server.
	for name, files := range map[string][2]string{"foreign client certificate": {p(other, "admin.pem"), p(other, "admin-key.pem")}, "no client certificate": {}} {
		cfg, err = LoadTLS(p(dir, "ca.pem"), files[0], files[1])
		if err != nil {
			t.Fatal(err)
		}
		if err := get(cfg); err == nil {
			t.Fatalf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Plaintext against a TLS port fails.
	if err := get(nil); err == nil {
		t.Fatal("plaintext client: no error")
	}
}

func TestLoadTLSErrors(t *testing.T) {
	dir := genCerts(t)
	p := func(f string) string { return filepath.Join(dir, f) }
	junk := p("junk.pem")
	os.WriteFile(junk, []byte("not pem at all"), 0o600)
	other := genCerts(t)
	for _, c := range []struct {
		name            string
		ca, cert, key   string
		want, forbidden string
	}{
		{"cert without key", "", p("admin.pem"), "", "without its key file", ""},
		{"key without cert", "", "", p("admin-key.pem"), "without its certificate file", ""},
		{"CA not PEM", junk, "", "", "junk.pem: not PEM", ""},
		{"CA is a key", p("ca-key.pem"), "", "", `holds a PEM "PRIVATE KEY" block, not a certificate`, "BEGIN"},
		{"CA missing", p("nope.pem"), "", "", "no such file", ""},
		{"cert and key swapped", "", p("admin-key.pem"), p("admin.pem"), "not a certificate", "BEGIN"},
		{"key not PEM", "", p("admin.pem"), junk, "key file " + junk + ": not PEM", ""},
		{"key of another cert", "", p("admin.pem"), filepath.Join(other, "admin-key.pem"), "does not match", ""},
	} {
		cfg, err := LoadTLS(c.ca, c.cert, c.key)
		if err == nil || cfg != nil || !strings.Contains(err.Error(), c.want) || (c.forbidden != "" && strings.Contains(err.Error(), c.forbidden)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Only a CA: server-authenticated TLS; nothing: the system's roots.
	cfg, err := LoadTLS(p("ca.pem"), "", "")
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 0 {
		t.Fatalf("CA only: %+v %v", cfg, err)
	}
	cfg, err = LoadTLS("", "", "")
	if err != nil || cfg == nil || cfg.RootCAs != nil {
		t.Fatalf("nothing: %+v %v", cfg, err)
	}
}

// A TLS handshake that cannot succeed (a certificate that does not verify,
// a client certificate the node refuses, a node that does not speak TLS)
// fails the call at once, naming the cause, instead of being retried until
// the deadline; a node that is merely down is still retried, and one of
// several nodes refusing does not fail a call another node can serve.
func TestTLSHandshakeFailsFast(t *testing.T) {
	dir, other := genCerts(t), genCerts(t)
	expired := t.TempDir()
	if _, err := certs.Generate(certs.Options{Dir: expired, Nodes: []string{"n1"}, Validity: time.Hour,
		Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, dir, true)
	otherAddr := serveTLS(t, other, false)
	expiredAddr := serveTLS(t, expired, false)
	plain := servePlain(t)
	p := filepath.Join
	load := func(ca, cert, key string) *tls.Config {
		t.Helper()
		cfg, err := LoadTLS(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	good := load(p(dir, "ca.pem"), p(dir, "admin.pem"), p(dir, "admin-key.pem"))
	wrongName := good.Clone()
	wrongName.ServerName = "n2"

	// Every case would be retried for 30s before.
	const timeout = 30 * time.Second
	for _, c := range []struct {
		name      string
		endpoints []string
		cfg       *tls.Config
		want      string
	}{
		{"unknown CA", []string{addr}, load(p(other, "ca.pem"), p(dir, "admin.pem"), p(dir, "admin-key.pem")),
			"x509: certificate signed by unknown authority"},
		{"unknown CA, two nodes", []string{addr, otherAddr}, load(p(expired, "ca.pem"), p(dir, "admin.pem"), p(dir, "admin-key.pem")),
			"x509: certificate signed by unknown authority"},
		{"wrong name", []string{addr}, wrongName, "x509: certificate is valid for"},
		{"expired", []string{expiredAddr}, load(p(expired, "ca.pem"), "", ""), "x509: certificate has expired"},
		{"no client certificate", []string{addr}, load(p(dir, "ca.pem"), "", ""), "tls: certificate required"},
		{"foreign client certificate", []string{addr}, load(p(dir, "ca.pem"), p(other, "admin.pem"), p(other, "admin-key.pem")),
			"tls: unknown certificate authority"},
		{"plaintext node", []string{plain}, good, "first record does not look like a TLS handshake"},
	} {
		for _, pinned := range []bool{false, true} {
			c := c
			c.name += map[bool]string{true: ", WithEndpoint"}[pinned]
			cl, err := New(Config{Endpoints: c.endpoints, TLS: c.cfg, RequestTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			var opts []Option
			if pinned {
				opts = append(opts, WithEndpoint(c.endpoints[0]))
			}
			start := time.Now()
			_, err = cl.Get(context.Background(), []byte("k"), opts...)
			took := time.Since(start)
			cl.Close()
			if err == nil || !errors.Is(err, ErrTLSHandshake) || !strings.Contains(err.Error(), c.want) ||
				errors.Is(err, context.DeadlineExceeded) || took > timeout/3 {
				t.Errorf("%s: after %v: %v; want ErrTLSHandshake with %q at once", c.name, took, err, c.want)
				continue
			}
			t.Logf("%s: after %v: %v", c.name, took.Round(time.Millisecond), err)
		}
	}

	// New with a DialTimeout fails at once too.
	start := time.Now()
	_, err := New(Config{Endpoints: []string{addr, otherAddr}, TLS: load(p(expired, "ca.pem"), "", ""), DialTimeout: timeout})
	if took := time.Since(start); !errors.Is(err, ErrTLSHandshake) || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") ||
		took > timeout/3 {
		t.Errorf("New with DialTimeout %v and the wrong CA: after %v: %v", timeout, took, err)
	}

	// One node of two refusing: the call goes to the other.
	cl, err := New(Config{Endpoints: []string{otherAddr, addr}, TLS: good, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // the first attempts go to each node in turn
		if _, err := cl.Get(context.Background(), []byte("k"), WithConsistency(Serializable)); err != nil {
			t.Fatalf("get %d with one node refusing the handshake: %v", i, err)
		}
	}
	cl.Close()

	// A node that is down (connection refused) is retried until the
	// deadline; one that comes up within it answers.
	down := freeAddr(t)
	cl, err = New(Config{Endpoints: []string{down}, TLS: good, RequestTimeout: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Get(context.Background(), []byte("k"))
	var ce *Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTLSHandshake) ||
		!errors.As(err, &ce) || ce.Attempts < 2 {
		t.Fatalf("node down: %v; want retries until the deadline", err)
	}
	listened := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		lis, err := net.Listen("tcp", down)
		if err == nil {
			serveTLSOn(t, dir, true, lis)
		}
		listened <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err = cl.Get(ctx, []byte("k"))
	if lerr := <-listened; lerr != nil {
		t.Skipf("cannot listen on %s again: %v", down, lerr)
	}
	if err != nil {
		t.Fatalf("node coming up during the retries: %v", err)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// servePlain starts a node serving without TLS.
func servePlain(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	n := &tlsNode{addr: lis.Addr().String()}
	cairnpb.RegisterKVServer(srv, n)
	cairnpb.RegisterClusterServer(srv, n)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return n.addr
}
