package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCertsCmd(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"certs"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// dirFiles is every file of dir with its mode and contents.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, _ := e.Info()
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = info.Mode().String() + string(b)
	}
	return m
}

func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	out, errs, code := runCertsCmd("--dir", dir, "--nodes", "n1,n2,n3", "--hosts", "10.1.2.3,cairn.internal", "--clients", "admin,reader", "--days", "30")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "wrote 12 files") || !strings.Contains(out, "a new CA") {
		t.Fatalf("stdout: %q", out)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	load := func(name string) *x509.Certificate {
		t.Helper()
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		c := load(n)
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			for _, host := range []string{n, "localhost", "127.0.0.1", "::1", "10.1.2.3", "cairn.internal"} {
				if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					t.Errorf("%s, usage %v, host %s: %v", n, u, host, err)
				}
			}
		}
		if c.Subject.CommonName != n {
			t.Errorf("%s: CN %q", n, c.Subject.CommonName)
		}
	}
	for _, n := range []string{"admin", "reader"} {
		c := load(n)
		if c.Subject.CommonName != n {
			t.Errorf("%s: CN %q", n, c.Subject.CommonName)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, f := range []string{"ca-key.pem", "n1-key.pem", "n2-key.pem", "n3-key.pem", "admin-key.pem", "reader-key.pem"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, info.Mode().Perm())
		}
	}

	// Again without --force: refused, nothing changes.
	before := dirFiles(t, dir)
	_, errs, code = runCertsCmd("--dir", dir, "--nodes", "n1,n2,n3,n4", "--clients", "admin")
	if code != 1 || !strings.Contains(errs, "--force") || !strings.Contains(errs, "n1.pem") {
		t.Fatalf("second run: exit %d: %s", code, errs)
	}
	after := dirFiles(t, dir)
	if len(after) != len(before) {
		t.Fatalf("second run changed the file set: %d → %d files", len(before), len(after))
	}
	for f, v := range before {
		if after[f] != v {
			t.Errorf("second run changed %s", f)
		}
	}

	// --skip-existing adds n4, signed by the same CA.
	out, errs, code = runCertsCmd("--dir", dir, "--nodes", "n1,n2,n3,n4", "--clients", "admin", "--skip-existing")
	if code != 0 || !strings.Contains(out, "kept existing certificates of n1, n2, n3, admin") || !strings.Contains(out, "wrote 2 files") {
		t.Fatalf("skip existing: exit %d: %s %s", code, out, errs)
	}
	if _, err := load("n4").Verify(x509.VerifyOptions{Roots: roots, DNSName: "n4"}); err != nil {
		t.Fatalf("n4: %v", err)
	}
	if dirFiles(t, dir)["ca.pem"] != before["ca.pem"] {
		t.Fatal("the CA changed")
	}

	// --force: a new CA.
	if _, errs, code = runCertsCmd("--dir", dir, "--nodes", "n1", "--force"); code != 0 {
		t.Fatalf("force: exit %d: %s", code, errs)
	}
	if dirFiles(t, dir)["ca.pem"] == before["ca.pem"] {
		t.Fatal("--force kept the CA")
	}
}

func TestCertsCommandBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--nodes", "n1"}, 2, "--dir is required"},
		{[]string{"--dir", dir}, 2, "give --nodes, --clients or both"},
		{[]string{"--dir", dir, "--nodes", "n1", "--days", "0"}, 2, "--days 0: must be positive"},
		{[]string{"--dir", dir, "--nodes", "n1", "--days", "x"}, 2, "invalid value"},
		{[]string{"--dir", dir, "--nodes", "n1", "--force", "--skip-existing"}, 2, "give one of them"},
		{[]string{"--dir", dir, "--nodes", "n1", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--dir", dir, "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--dir", dir, "--nodes", "n1/../x"}, 1, `node name "n1/../x"`},
		{[]string{"--dir", dir, "--nodes", "n1", "--hosts", "not a host"}, 1, `host "not a host"`},
		{[]string{"--dir", dir, "--nodes", "n1", "--clients", "n1"}, 1, "also a node name"},
	} {
		_, errs, code := runCertsCmd(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("certs %v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("bad flags wrote %d files", len(ents))
	}
	if _, errs, code := runCertsCmd("-h"); code != 0 || !strings.Contains(errs, "usage: cairn-node certs") {
		t.Fatalf("-h: %d %q", code, errs)
	}
}
