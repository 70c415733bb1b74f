package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// testPKI writes, in dir, a CA (ca.pem), a node certificate n1.pem /
// n1-key.pem (server and client usages, SANs localhost and 127.0.0.1) and a
// client certificate app.pem / app-key.pem.
func testPKI(t *testing.T, dir string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	for i, c := range []struct {
		name  string
		usage []x509.ExtKeyUsage
	}{
		{"n1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{"app", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: c.name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: c.usage,
			DNSNames: []string{c.name, "localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		write(c.name+".pem", "CERTIFICATE", der)
		write(c.name+"-key.pem", "PRIVATE KEY", kder)
	}
}

// The TLS flags reach cluster.Config.TLS; combinations that make no sense
// are refused naming the flags, and bad files stop the node with one line
// saying which file and why.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	testPKI(t, dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"--tls-cert", f("n1.pem"), "--tls-key", f("n1-key.pem"), "--tls-peer-ca", f("ca.pem"), "--tls-client-ca", f("ca.pem")}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&stderr)
	want := cluster.TLSConfig{CertFile: f("n1.pem"), KeyFile: f("n1-key.pem"), PeerCAFile: f("ca.pem"), ClientCAFile: f("ca.pem")}
	if err != nil || cfg.TLS != want {
		t.Fatalf("TLS config %+v, %v; want %+v", cfg.TLS, err, want)
	}
	o, _ = parseFlags(nil, &stderr)
	if cfg, err := o.clusterConfig(&stderr); err != nil || cfg.TLS.Enabled() {
		t.Fatalf("no TLS flags: %+v, %v", cfg.TLS, err)
	}

	garbage := f("garbage.pem")
	os.WriteFile(garbage, []byte("nope"), 0o600)
	data := func(n string) []string {
		return []string{"--id", "t", "--data-dir", filepath.Join(dir, n), "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--metrics-addr", ""}
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", f("n1.pem"), "--tls-peer-ca", f("ca.pem")}, "--tls-cert needs --tls-key"},
		{"key without cert", []string{"--tls-key", f("n1-key.pem")}, "--tls-key needs --tls-cert"},
		{"cert without peer CA", []string{"--tls-cert", f("n1.pem"), "--tls-key", f("n1-key.pem")}, "--tls-cert needs --tls-peer-ca"},
		{"client CA alone", []string{"--tls-client-ca", f("ca.pem")}, "need --tls-cert and --tls-key"},
		{"missing cert", append(data("d1"), "--tls-cert", f("none.pem"), "--tls-key", f("n1-key.pem"), "--tls-peer-ca", f("ca.pem")), "none.pem: no such file"},
		{"cert not PEM", append(data("d2"), "--tls-cert", garbage, "--tls-key", f("n1-key.pem"), "--tls-peer-ca", f("ca.pem")), "garbage.pem: no PEM certificate"},
		{"key of another cert", append(data("d3"), "--tls-cert", f("n1.pem"), "--tls-key", f("app-key.pem"), "--tls-peer-ca", f("ca.pem")), "does not match the certificate"},
		{"client cert as node cert", append(data("d4"), "--tls-cert", f("app.pem"), "--tls-key", f("app-key.pem"), "--tls-peer-ca", f("ca.pem")), "not a valid node certificate"},
		{"health cert without CA", []string{"health", "--cert", f("app.pem"), "--key", f("app-key.pem")}, "need --cacert"},
		{"health cert without key", []string{"health", "--cacert", f("ca.pem"), "--cert", f("app.pem")}, "--cert and --key go together"},
		{"health CA not PEM", []string{"health", "--cacert", garbage}, "TLS: CA file " + garbage + ": not PEM"},
		{"health CA missing", []string{"health", "--cacert", f("none.pem")}, "TLS: CA file: open " + f("none.pem") + ": no such file"},
		{"health CA is a key", []string{"health", "--cacert", f("app-key.pem")}, `TLS: CA file ` + f("app-key.pem") + ` holds a PEM "PRIVATE KEY" block, not a certificate`},
		{"health cert and key swapped", []string{"health", "--cacert", f("ca.pem"), "--cert", f("app-key.pem"), "--key", f("app.pem")},
			`TLS: certificate file ` + f("app-key.pem") + ` holds a PEM "PRIVATE KEY" block, not a certificate`},
		{"health key of another cert", []string{"health", "--cacert", f("ca.pem"), "--cert", f("app.pem"), "--key", f("n1-key.pem")}, "does not match"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		out := stderr.String()
		if code != 2 || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line with %q", c.name, code, out, c.want)
		}
	}
}

// A node started with TLS and a client CA: `health` with the CA and a
// client certificate reports it SERVING; without TLS, or without a
// client certificate, it fails.
func TestServeTLSHealth(t *testing.T) {
	dir := t.TempDir()
	testPKI(t, dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{
			"--id", "n1", "--data-dir", filepath.Join(dir, "data"),
			"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--metrics-addr", "",
			"--tls-cert", f("n1.pem"), "--tls-key", f("n1-key.pem"), "--tls-peer-ca", f("ca.pem"), "--tls-client-ca", f("ca.pem"),
		}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("no shutdown")
		}
	}()
	line := regexp.MustCompile(`serving gRPC on (127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(60 * time.Second)
	m := waitListening(t, line, &stdout, &stderr, done, deadline)
	health := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"health", "--grpc-addr", m[1], "--timeout", "5s"}, args...), &out, &errb)
		return code, errb.String()
	}
	tlsArgs := []string{"--cacert", f("ca.pem"), "--cert", f("app.pem"), "--key", f("app-key.pem")}
	for code, msg := health(tlsArgs...); code != 0; code, msg = health(tlsArgs...) {
		if time.Now().After(deadline) {
			t.Fatalf("health over TLS: exit %d: %s", code, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The node's own certificate is a client certificate too.
	if code, msg := health("--cacert", f("ca.pem"), "--cert", f("n1.pem"), "--key", f("n1-key.pem"), "--server-name", "n1"); code != 0 {
		t.Fatalf("health with the node's certificate: exit %d: %s", code, msg)
	}
	if code, _ := health(); code != 1 {
		t.Fatalf("plaintext health of a TLS node: exit %d, want 1", code)
	}
	if code, _ := health("--cacert", f("ca.pem")); code != 1 {
		t.Fatalf("health without a client certificate: exit %d, want 1", code)
	}
}
