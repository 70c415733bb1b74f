package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// snapshot is every file of dir: name → contents and mode.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = info.Mode().String() + " " + string(b)
	}
	return m
}

func pool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("ca.pem: no certificate")
	}
	return p
}

// pair loads name's certificate and key as crypto/tls does.
func pair(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile(name)), filepath.Join(dir, KeyFile(name)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := kp.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("%s: key %T, want ECDSA P-256", name, kp.PrivateKey)
	}
	return c
}

func TestGenerateChains(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	res, err := Generate(Options{Dir: dir, Nodes: []string{"n1", "n2"}, Hosts: []string{"10.0.0.7", "db.example.com"},
		Clients: []string{"admin", "reader"}, Validity: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.ReusedCA || len(res.Written) != 10 {
		t.Fatalf("result %+v", res)
	}
	roots := pool(t, dir)
	ca, _, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA %v, %v", ca.IsCA, ca.PublicKeyAlgorithm)
	}
	for _, n := range []string{"n1", "n2"} {
		c := pair(t, dir, n)
		if c.Subject.CommonName != n {
			t.Errorf("%s: CN %q", n, c.Subject.CommonName)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			for _, host := range []string{n, "localhost", "127.0.0.1", "::1", "10.0.0.7", "db.example.com"} {
				if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("%s for %v as %s: %v", n, usage, host, err)
				}
			}
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example.com"}); err == nil {
			t.Errorf("%s verifies for a host it does not name", n)
		}
		if !slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv6loopback) }) {
			t.Errorf("%s: IPs %v", n, c.IPAddresses)
		}
		if d := c.NotAfter.Sub(c.NotBefore); d < 48*time.Hour || d > 49*time.Hour {
			t.Errorf("%s: valid for %v", n, d)
		}
	}
	for _, n := range []string{"admin", "reader"} {
		c := pair(t, dir, n)
		if c.Subject.CommonName != n {
			t.Errorf("%s: CN %q", n, c.Subject.CommonName)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client %s: %v", n, err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("client %s verifies as a server", n)
		}
	}
	// A foreign CA does not accept them.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := Generate(Options{Dir: other, Clients: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pair(t, dir, "n1").Verify(x509.VerifyOptions{Roots: pool(t, other), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("n1 verifies against another CA")
	}
	// Modes.
	for name, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, "n1.pem": 0o644, "n1-key.pem": 0o600, "admin-key.pem": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, info.Mode().Perm(), want)
		}
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("dir: %v %v", info.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 10 {
		t.Errorf("%d files in the directory, want 10 (no temporary files left)", len(ents))
	}
}

func TestGenerateRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(Options{Dir: dir, Nodes: []string{"n1"}, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	_, err := Generate(Options{Dir: dir, Nodes: []string{"n1", "n2"}, Clients: []string{"admin"}})
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "n1.pem") || !strings.Contains(err.Error(), "admin-key.pem") {
		t.Fatalf("second run: %v", err)
	}
	if after := snapshot(t, dir); !mapsEqual(before, after) {
		t.Fatalf("a refused run changed the directory: %d files before, %d after", len(before), len(after))
	}

	// A half CA is refused too, and nothing is written.
	os.Remove(filepath.Join(dir, CAKeyFile))
	before = snapshot(t, dir)
	if _, err := Generate(Options{Dir: dir, Nodes: []string{"n9"}}); err == nil || !strings.Contains(err.Error(), "without") {
		t.Fatalf("half a CA: %v", err)
	}
	if after := snapshot(t, dir); !mapsEqual(before, after) {
		t.Fatal("a refused run changed the directory")
	}

	// --force makes everything anew.
	res, err := Generate(Options{Dir: dir, Nodes: []string{"n1"}, Clients: []string{"admin"}, Force: true})
	if err != nil || res.ReusedCA {
		t.Fatalf("force: %+v %v", res, err)
	}
	after := snapshot(t, dir)
	for _, f := range []string{CAFile, "n1.pem", "n1-key.pem", "admin.pem"} {
		if after[f] == before[f] {
			t.Errorf("force: %s unchanged", f)
		}
	}
	if _, err := pair(t, dir, "n1").Verify(x509.VerifyOptions{Roots: pool(t, dir)}); err != nil {
		t.Fatal(err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A directory with a CA gets new certificates signed by it; SkipExisting
// keeps the ones there.
func TestGenerateReusesCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(Options{Dir: dir, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	res, err := Generate(Options{Dir: dir, Nodes: []string{"n2"}, Clients: []string{"admin"}})
	if err != nil || !res.ReusedCA {
		t.Fatalf("%+v %v", res, err)
	}
	after := snapshot(t, dir)
	for f, v := range before {
		if after[f] != v {
			t.Errorf("%s changed", f)
		}
	}
	roots := pool(t, dir)
	for _, n := range []string{"n1", "n2", "admin"} {
		if _, err := pair(t, dir, n).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	res, err = Generate(Options{Dir: dir, Nodes: []string{"n1", "n2", "n3"}, Clients: []string{"admin"}, SkipExisting: true})
	if err != nil || !slices.Equal(res.Skipped, []string{"n1", "n2", "admin"}) || len(res.Written) != 2 {
		t.Fatalf("skip existing: %+v %v", res, err)
	}
	if snapshot(t, dir)["n1.pem"] != after["n1.pem"] {
		t.Fatal("skip existing rewrote n1.pem")
	}
	// An existing certificate of another CA is not skipped silently.
	other := t.TempDir()
	if _, err := Generate(Options{Dir: other, Nodes: []string{"n4"}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"n4.pem", "n4-key.pem"} {
		b, _ := os.ReadFile(filepath.Join(other, f))
		os.WriteFile(filepath.Join(dir, f), b, 0o600)
	}
	if _, err := Generate(Options{Dir: dir, Nodes: []string{"n4"}, SkipExisting: true}); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("foreign existing cert: %v", err)
	}
}

func TestGenerateBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Nodes: []string{"n1"}}, "no directory"},
		{Options{Dir: dir}, "no nodes and no clients"},
		{Options{Dir: dir, Nodes: []string{"../evil"}}, `node name "../evil"`},
		{Options{Dir: dir, Nodes: []string{""}}, `node name ""`},
		{Options{Dir: dir, Clients: []string{"a/b"}}, `client name "a/b"`},
		{Options{Dir: dir, Clients: []string{"ca"}}, "CA's file name"},
		{Options{Dir: dir, Nodes: []string{"x-key"}}, "x-key"},
		{Options{Dir: dir, Nodes: []string{"n1"}, Clients: []string{"n1"}}, "also a node name"},
		{Options{Dir: dir, Nodes: []string{"n1", "n1"}}, "also a node name"},
		{Options{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"bad host"}}, `host "bad host"`},
		{Options{Dir: dir, Nodes: []string{"n1"}, Validity: -time.Hour}, "validity"},
		{Options{Dir: dir, Nodes: []string{"n1"}, Force: true, SkipExisting: true}, "give one"},
	} {
		_, err := Generate(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("bad options wrote %d files", len(ents))
	}
	// A corrupt CA is reported, not used.
	os.WriteFile(filepath.Join(dir, CAFile), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("junk"), 0o600)
	if _, err := Generate(Options{Dir: dir, Nodes: []string{"n1"}}); err == nil || !strings.Contains(err.Error(), "no PEM CERTIFICATE") {
		t.Fatalf("corrupt CA: %v", err)
	}
	// A CA whose key is another's.
	a, b := t.TempDir(), t.TempDir()
	Generate(Options{Dir: a, Nodes: []string{"n1"}})
	Generate(Options{Dir: b, Nodes: []string{"n1"}})
	k, _ := os.ReadFile(filepath.Join(b, CAKeyFile))
	os.WriteFile(filepath.Join(a, CAKeyFile), k, 0o600)
	if _, err := Generate(Options{Dir: a, Nodes: []string{"n2"}}); err == nil || !strings.Contains(err.Error(), "is not the key of") {
		t.Fatalf("mismatched CA key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a, "n2.pem")); err == nil {
		t.Fatal("n2.pem written with a bad CA")
	}
}
