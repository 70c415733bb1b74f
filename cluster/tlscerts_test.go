package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority made in-test, writing its certificates
// as PEM files in a temporary directory.
type testCA struct {
	name string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
}

var certSerial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(certSerial.Add(1)) }

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{name: name, dir: t.TempDir(), cert: cert, key: key}
	ca.File = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der, 0o644)
	return ca
}

func writePEM(t testing.TB, name, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
}

// certSpec describes a certificate to issue.
type certSpec struct {
	cn    string
	usage []x509.ExtKeyUsage
	hosts []string // DNS names or IPs
	// notAfter, if set, replaces a day from now.
	notAfter time.Time
}

// issue returns the PEM files of a new certificate and its key (mode
// 0600).
func (ca *testCA) issue(t testing.TB, s certSpec) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: s.cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  s.usage,
	}
	if !s.notAfter.IsZero() {
		tmpl.NotAfter = s.notAfter
	}
	for _, h := range s.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(ca.dir, s.cn+".pem")
	keyFile = filepath.Join(ca.dir, s.cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	writePEM(t, keyFile, "PRIVATE KEY", kder, 0o600)
	return certFile, keyFile
}

// node issues a node certificate (server and client usage; SANs: the
// name, localhost, 127.0.0.1 and hosts) and returns a TLSConfig with it
// and ca as the peer CA.
func (ca *testCA) node(t testing.TB, name string, hosts ...string) TLSConfig {
	t.Helper()
	cert, key := ca.issue(t, certSpec{
		cn:    name,
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		hosts: append([]string{name, "localhost", "127.0.0.1"}, hosts...),
	})
	return TLSConfig{CertFile: cert, KeyFile: key, PeerCAFile: ca.File}
}

// client returns a client TLS configuration: a certificate from ca (with
// the client usage; none if ca is nil) and roots verifying the nodes.
func clientTLS(t testing.TB, roots *testCA, ca *testCA, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(roots.cert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if ca != nil {
		certFile, keyFile := ca.issue(t, certSpec{cn: name, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// withTLS sets cfg's TLS to a node certificate of ca covering the
// node's listen hosts, with clientCA (if not nil) as the client CA.
func withTLS(t testing.TB, cfg *Config, ca, clientCA *testCA) {
	t.Helper()
	var hosts []string
	for _, a := range []string{cfg.GRPCAddr, cfg.RaftAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			hosts = append(hosts, h)
		}
	}
	cfg.TLS = ca.node(t, cfg.ID, hosts...)
	if clientCA != nil {
		cfg.TLS.ClientCAFile = clientCA.File
	}
}
