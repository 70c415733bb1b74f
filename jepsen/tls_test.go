package main

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flagValue returns the value after flag in args.
func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// With TLS the nodes' command lines carry their own certificate, key and
// the CA as peer and client CA, and the clients' configuration presents a
// client certificate and verifies the nodes: a handshake between the two
// succeeds, and one with a node certificate of another CA does not.
func TestLocalClusterTLS(t *testing.T) {
	c, err := planLocalCluster(localConfig{Nodes: 3, Bin: "/nonexistent", LogDir: t.TempDir(), BaseDir: t.TempDir(), TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tlsCfg := c.ClientTLS()
	if tlsCfg == nil || tlsCfg.RootCAs == nil || len(tlsCfg.Certificates) != 1 {
		t.Fatalf("client TLS config %+v", tlsCfg)
	}
	for i, n := range c.nodes {
		args := c.args[i]
		cert, key := flagValue(args, "--tls-cert"), flagValue(args, "--tls-key")
		peerCA, clientCA := flagValue(args, "--tls-peer-ca"), flagValue(args, "--tls-client-ca")
		if filepath.Base(cert) != n.ID+".pem" || filepath.Base(key) != n.ID+"-key.pem" ||
			filepath.Base(peerCA) != "ca.pem" || clientCA != peerCA {
			t.Fatalf("%s: TLS flags %q %q %q %q in %v", n.ID, cert, key, peerCA, clientCA, args)
		}
		if !strings.HasPrefix(cert, c.dataDir) {
			t.Errorf("%s: certificate %s outside the work directory %s", n.ID, cert, c.dataDir)
		}
		info, err := os.Stat(key)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: key %v %v", n.ID, info, err)
		}
		// The client, dialing the node's gRPC address, accepts its
		// certificate and presents one the node accepts.
		host, _, _ := net.SplitHostPort(n.GRPCAddr)
		if err := handshake(t, tlsCfg, host, cert, key, peerCA); err != nil {
			t.Fatalf("%s: %v", n.ID, err)
		}
	}

	// A plaintext run has no TLS flags and no client TLS.
	p, err := planLocalCluster(localConfig{Nodes: 3, Bin: "/nonexistent", LogDir: t.TempDir(), BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.ClientTLS() != nil || slices.ContainsFunc(p.args[0], func(a string) bool { return strings.HasPrefix(a, "--tls") }) {
		t.Fatalf("plaintext run: %v %v", p.ClientTLS(), p.args[0])
	}

	// Another run's certificates are not accepted.
	other, err := planLocalCluster(localConfig{Nodes: 1, Bin: "/nonexistent", LogDir: t.TempDir(), BaseDir: t.TempDir(), TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oa := other.args[0]
	if err := handshake(t, tlsCfg, "127.0.0.1", flagValue(oa, "--tls-cert"), flagValue(oa, "--tls-key"), flagValue(oa, "--tls-peer-ca")); err == nil {
		t.Fatal("the client accepted a node of another CA")
	}
}

// handshake runs a TLS handshake between the client configuration (as
// dialing host) and a server with the node's certificate requiring client
// certificates of clientCA, as a node with --tls-client-ca does.
func handshake(t *testing.T, client *tls.Config, host, cert, key, clientCA string) error {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(clientCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	srvCfg := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	srvErr := make(chan error, 1)
	go func() {
		s := tls.Server(sc, srvCfg)
		err := s.Handshake()
		if err == nil && len(s.ConnectionState().PeerCertificates) == 0 {
			err = os.ErrInvalid
		}
		sc.Close()
		srvErr <- err
	}()
	cfg := client.Clone()
	cfg.ServerName = host
	cerr := tls.Client(cc, cfg).Handshake()
	cc.Close()
	serr := <-srvErr
	if cerr != nil {
		return cerr
	}
	return serr
}

func TestParseFlagsTLS(t *testing.T) {
	cfg, err := parseFlags([]string{"--tls"})
	if err != nil || !cfg.tls {
		t.Fatalf("--tls: %+v %v", cfg, err)
	}
	if _, err := parseFlags([]string{"--tls", "--mode", "docker"}); err == nil || !strings.Contains(err.Error(), "--tls is for --mode local") {
		t.Fatalf("--tls --mode docker: %v", err)
	}
}
