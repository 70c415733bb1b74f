package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	// Failures are retried until the timeout: short ones for the calls
	// that must fail.
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
