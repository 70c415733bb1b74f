// Package certs generates a development certificate authority and the node
// and client certificates of a cairn cluster with Go's crypto only (no
// openssl): `cairn-node certs` and the jepsen harness's --tls use it.
//
// Everything is ECDSA P-256. A directory holds
//
//	ca.pem, ca-key.pem              the cluster CA (peer CA and client CA of the dev setup)
//	<node>.pem, <node>-key.pem      a node: ExtKeyUsage ServerAuth and ClientAuth (it is the
//	                                server of its gRPC and raft ports and the client when it
//	                                dials a peer); CN and DNS SAN the node's name, SANs
//	                                localhost, 127.0.0.1, ::1 and the extra hosts
//	<client>.pem, <client>-key.pem  a client: ExtKeyUsage ClientAuth, CN the client's name
//
// Certificates are PEM "CERTIFICATE" blocks, keys PKCS#8 "PRIVATE KEY"
// blocks in files of mode 0600.
//
// Existing files are never overwritten unless Options.Force is set: a run
// that would overwrite one fails before writing anything. A CA already in
// the directory (both files) is reused, so certificates can be added to a
// cluster later (a new node, a new client); Options.SkipExisting leaves
// certificates that already exist alone, which makes a run idempotent.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// File names in the directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFile and KeyFile are the names of the certificate and key files of a
// node or client called name.
func CertFile(name string) string { return name + ".pem" }
func KeyFile(name string) string  { return name + "-key.pem" }

// DefaultValidity is how long certificates are valid unless told.
const DefaultValidity = 365 * 24 * time.Hour

// Organization is the subject organization of every certificate.
const Organization = "cairn"

// Options says what to generate.
type Options struct {
	Dir     string   // where the files go (created, mode 0700, if missing)
	Nodes   []string // node names
	Hosts   []string // extra host names or IP addresses in every node certificate
	Clients []string // client names (certificate CN)
	// Validity is how long new certificates are valid (default
	// DefaultValidity); a new CA is valid as long.
	Validity time.Duration
	// Force overwrites existing files (a new CA and every certificate
	// asked for), instead of failing.
	Force bool
	// SkipExisting keeps a node or client certificate whose two files
	// already exist (and chain to the CA) instead of failing.
	SkipExisting bool
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Result says what a run wrote.
type Result struct {
	Written  []string // paths written, in order
	Skipped  []string // names kept (SkipExisting)
	ReusedCA bool     // the CA in the directory signed the new certificates
}

// ErrExists is returned (wrapped) when a run would overwrite files.
var ErrExists = errors.New("certs: files exist (use --force to overwrite)")

// nameRE is a node or client name: it becomes a file name, a CN and
// (nodes) a DNS name, so it is kept plain.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// hostRE is a DNS name (labels of letters, digits and hyphens), allowing
// a leading wildcard label.
var hostRE = regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// validate checks the options; the error names the bad value.
func (o *Options) validate() error {
	if o.Dir == "" {
		return errors.New("certs: no directory")
	}
	if len(o.Nodes) == 0 && len(o.Clients) == 0 {
		return errors.New("certs: no nodes and no clients to make certificates for")
	}
	if o.Validity < 0 {
		return fmt.Errorf("certs: validity %v: must be positive", o.Validity)
	}
	if o.Force && o.SkipExisting {
		return errors.New("certs: force and skip-existing: give one of them")
	}
	seen := map[string]string{}
	check := func(kind string, names []string) error {
		for _, n := range names {
			switch {
			case !nameRE.MatchString(n) || strings.HasSuffix(n, "-key"):
				return fmt.Errorf("certs: %s name %q: want letters, digits, '.', '_' or '-' (at most 63, first a letter or digit, not ending in -key)", kind, n)
			case n == "ca":
				return fmt.Errorf("certs: %s name %q is the CA's file name", kind, n)
			case seen[n] != "":
				return fmt.Errorf("certs: %s name %q is also a %s name", kind, n, seen[n])
			}
			seen[n] = kind
		}
		return nil
	}
	if err := check("node", o.Nodes); err != nil {
		return err
	}
	if err := check("client", o.Clients); err != nil {
		return err
	}
	for _, h := range o.Hosts {
		if net.ParseIP(h) == nil && (len(h) > 253 || !hostRE.MatchString(h)) {
			return fmt.Errorf("certs: host %q is neither an IP address nor a DNS name", h)
		}
	}
	return nil
}

// leaf is one certificate to make.
type leaf struct {
	name string
	node bool
}

// Generate writes the CA and the certificates of opts.Nodes and
// opts.Clients into opts.Dir. On an error nothing is written, except when
// the disk fails midway (then the error says which files were written).
func Generate(opts Options) (*Result, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	t := now()
	res := &Result{}

	// What exists decides what is made: first every check, then the keys
	// and certificates in memory, then the files.
	exists := func(name string) (bool, error) {
		_, err := os.Lstat(filepath.Join(opts.Dir, name))
		if err == nil {
			return true, nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("certs: %w", err)
	}
	var clash []string
	caCert, caKey, newCA := (*x509.Certificate)(nil), crypto.Signer(nil), false
	caPem, err := exists(CAFile)
	if err != nil {
		return nil, err
	}
	caKeyThere, err := exists(CAKeyFile)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Force || (!caPem && !caKeyThere):
		newCA = true
	case caPem && caKeyThere:
		if caCert, caKey, err = LoadCA(opts.Dir); err != nil {
			return nil, err
		}
		res.ReusedCA = true
	default:
		have, miss := CAFile, CAKeyFile
		if caKeyThere {
			have, miss = CAKeyFile, CAFile
		}
		return nil, fmt.Errorf("certs: %s exists without %s (remove it, or use --force to make a new CA)",
			filepath.Join(opts.Dir, have), filepath.Join(opts.Dir, miss))
	}

	var todo []leaf
	for _, l := range append(leaves(opts.Nodes, true), leaves(opts.Clients, false)...) {
		c, err := exists(CertFile(l.name))
		if err != nil {
			return nil, err
		}
		k, err := exists(KeyFile(l.name))
		if err != nil {
			return nil, err
		}
		switch {
		case opts.Force || (!c && !k):
			todo = append(todo, l)
		case opts.SkipExisting && c && k && !newCA:
			if err := verifyExisting(opts.Dir, l, caCert); err != nil {
				return nil, err
			}
			res.Skipped = append(res.Skipped, l.name)
		default:
			if c {
				clash = append(clash, filepath.Join(opts.Dir, CertFile(l.name)))
			}
			if k {
				clash = append(clash, filepath.Join(opts.Dir, KeyFile(l.name)))
			}
		}
	}
	if len(clash) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrExists, strings.Join(clash, ", "))
	}

	type file struct {
		name string
		data []byte
		mode os.FileMode
	}
	var files []file
	if newCA {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
		caKey = k
		tmpl := &x509.Certificate{
			Subject:               pkix.Name{Organization: []string{Organization}, CommonName: "cairn cluster CA"},
			NotBefore:             t.Add(-5 * time.Minute), // clocks disagree a little
			NotAfter:              t.Add(opts.Validity),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLenZero:        true,
		}
		der, err := sign(tmpl, caKey.Public(), nil, caKey)
		if err != nil {
			return nil, err
		}
		if caCert, err = x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
		kb, err := keyPEM(k)
		if err != nil {
			return nil, err
		}
		files = append(files, file{CAFile, certPEM(der), 0o644}, file{CAKeyFile, kb, 0o600})
	}
	for _, l := range todo {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
		tmpl := &x509.Certificate{
			Subject:   pkix.Name{Organization: []string{Organization}, CommonName: l.name},
			NotBefore: t.Add(-5 * time.Minute),
			NotAfter:  t.Add(opts.Validity),
			KeyUsage:  x509.KeyUsageDigitalSignature,
		}
		if caCert.NotAfter.Before(tmpl.NotAfter) {
			tmpl.NotAfter = caCert.NotAfter
		}
		if l.node {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			addHost(tmpl, l.name)
			addHost(tmpl, "localhost")
			addHost(tmpl, "127.0.0.1")
			addHost(tmpl, "::1")
			for _, h := range opts.Hosts {
				addHost(tmpl, h)
			}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := sign(tmpl, key.Public(), caCert, caKey)
		if err != nil {
			return nil, err
		}
		kb, err := keyPEM(key)
		if err != nil {
			return nil, err
		}
		files = append(files, file{CertFile(l.name), certPEM(der), 0o644}, file{KeyFile(l.name), kb, 0o600})
	}

	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	for _, f := range files {
		p := filepath.Join(opts.Dir, f.name)
		if err := writeFile(p, f.data, f.mode); err != nil {
			if len(res.Written) > 0 {
				return res, fmt.Errorf("certs: %w (already written: %s)", err, strings.Join(res.Written, ", "))
			}
			return res, fmt.Errorf("certs: %w", err)
		}
		res.Written = append(res.Written, p)
	}
	return res, nil
}

func leaves(names []string, node bool) []leaf {
	var ls []leaf
	for _, n := range names {
		ls = append(ls, leaf{n, node})
	}
	return ls
}

// addHost adds h to the certificate's SANs, as an IP address or a DNS
// name, once.
func addHost(c *x509.Certificate, h string) {
	if ip := net.ParseIP(h); ip != nil {
		for _, have := range c.IPAddresses {
			if have.Equal(ip) {
				return
			}
		}
		c.IPAddresses = append(c.IPAddresses, ip)
		return
	}
	for _, have := range c.DNSNames {
		if strings.EqualFold(have, h) {
			return
		}
	}
	c.DNSNames = append(c.DNSNames, h)
}

// sign makes the certificate tmpl for pub, signed by parent's key (parent
// nil: self-signed).
func sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, key crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	tmpl.SerialNumber = serial
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	id := sha1.Sum(pkix)
	tmpl.SubjectKeyId = id[:]
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return der, nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFile writes data to a new temporary file next to name and renames
// it over name, so a reader never sees half a file and a key file never
// exists with a wider mode than mode.
func writeFile(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	ok = true
	return nil
}

// LoadCA reads the CA certificate and key in dir and checks that they
// belong together and make a CA.
func LoadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	cert, err := readCert(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, err
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("certs: %s is not a CA certificate", filepath.Join(dir, CAFile))
	}
	key, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, nil, fmt.Errorf("certs: %s is not the key of %s", filepath.Join(dir, CAKeyFile), filepath.Join(dir, CAFile))
	}
	return cert, key, nil
}

// verifyExisting checks that an existing certificate of l chains to ca
// and matches its key, so skipping it leaves a usable pair.
func verifyExisting(dir string, l leaf, ca *x509.Certificate) error {
	p := filepath.Join(dir, CertFile(l.name))
	cert, err := readCert(p)
	if err != nil {
		return err
	}
	key, err := readKey(filepath.Join(dir, KeyFile(l.name)))
	if err != nil {
		return err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return fmt.Errorf("certs: %s is not the key of %s", filepath.Join(dir, KeyFile(l.name)), p)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("certs: existing %s does not verify against the CA (remove it or use --force): %w", p, err)
	}
	return nil
}

func readCert(name string) (*x509.Certificate, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s: no PEM CERTIFICATE block", name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", name, err)
	}
	return c, nil
}

func readKey(name string) (crypto.Signer, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || !strings.HasSuffix(blk.Type, "PRIVATE KEY") {
		return nil, fmt.Errorf("certs: %s: no PEM PRIVATE KEY block", name)
	}
	var k any
	switch blk.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", name, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("certs: %s: unsupported key type %T", name, k)
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ab, err1 := x509.MarshalPKIXPublicKey(a)
	bb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}
