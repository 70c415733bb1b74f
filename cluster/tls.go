package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnkv/cairn/cluster/auth"
	"github.com/hashicorp/raft"
)

// TLSConfig names the PEM files of a node's TLS setup (README.md,
// "Security"). The zero value means no TLS: every port is plaintext.
//
// With CertFile set, every TCP port but gossip's speaks TLS 1.3 only:
//   - the gRPC port serves CertFile's certificate; its clients may present
//     a certificate chaining to PeerCAFile or ClientCAFile, and must when
//     ClientCAFile is set;
//   - the raft port serves it too, and requires the dialer's certificate
//     to chain to PeerCAFile (unless Deps supplies the raft transport,
//     which is then used as given);
//   - the node presents it as its client certificate whenever it dials a
//     peer (raft, forwarding to the leader, read confirmation, status
//     polls, gossip keyring calls), and requires the peer's certificate to
//     chain to PeerCAFile.
//
// A peer is identified by its chain to the cluster CA (PeerCAFile) and the
// extended key usages of a node certificate (server and client
// authentication both), not by its host name: nodes dial each other at the
// addresses they advertise, which are IP addresses (raft resolves them) that
// change with containers and DHCP and are rarely in a certificate. So the
// cluster CA must sign only node certificates, or client certificates
// without the server authentication usage (as `cairn-node certs` makes
// them); anyone holding a certificate it signed for both usages is a peer.
type TLSConfig struct {
	// CertFile and KeyFile are the node's certificate (chain, leaf first)
	// and private key. The certificate must chain to PeerCAFile and carry
	// both the server and the client authentication extended key usage.
	CertFile, KeyFile string
	// PeerCAFile holds the cluster CA certificate(s). Required with
	// CertFile.
	PeerCAFile string
	// ClientCAFile, if set, holds the CA certificate(s) of clients: a gRPC
	// client must then present a certificate chaining to it (or to
	// PeerCAFile: peers call each other's gRPC port). Without it, clients
	// need no certificate.
	ClientCAFile string
}

// Enabled reports whether c turns TLS on.
func (c TLSConfig) Enabled() bool { return c != TLSConfig{} }

// check reports a combination of files that makes no sense.
func (c TLSConfig) check() error {
	switch {
	case !c.Enabled():
		return nil
	case c.CertFile == "" && c.KeyFile != "":
		return errors.New("TLS key file without a certificate file")
	case c.CertFile != "" && c.KeyFile == "":
		return errors.New("TLS certificate file without a key file")
	case c.CertFile == "":
		return errors.New("TLS CA file without a certificate and key: a node needs its own certificate to serve TLS")
	case c.PeerCAFile == "":
		return errors.New("TLS certificate without a peer CA file: the cluster CA verifies the other nodes")
	}
	return nil
}

// tlsState is a node's loaded TLS material.
type tlsState struct {
	cert      tls.Certificate
	peerCAs   *x509.CertPool // the cluster CA
	clientCAs *x509.CertPool // peer ∪ client CAs: who may call the gRPC port
	// requireClientCert: a client CA is set, so gRPC clients must present
	// a certificate.
	requireClientCert bool
	log               *slog.Logger
	// refused counts the connections this node refused because of the
	// peer's certificate, by kind: raft-in, raft-out (raft port, accepted
	// and dialed) and grpc-out (peer gRPC dialed; the gRPC server's own
	// verification is gRPC's).
	refused kindCounter
	// raftPeerAllowed, if set, must allow one of the names of a raft-in
	// connection's certificate (auth.NodeNames): the node it names must
	// be a server of the configuration (Node.peerIDAllowed), so that a
	// removed node's certificate no longer reaches raft.
	raftPeerAllowed func(id string) bool
}

// load reads and checks the files. Its errors name the file and what is
// wrong with it; they never include a key's bytes.
func (c TLSConfig) load(log *slog.Logger) (*tlsState, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	peerCerts, err := loadCAFile(c.PeerCAFile, "peer CA")
	if err != nil {
		return nil, err
	}
	s := &tlsState{peerCAs: x509.NewCertPool(), clientCAs: x509.NewCertPool(), log: log}
	for _, ca := range peerCerts {
		s.peerCAs.AddCert(ca)
		s.clientCAs.AddCert(ca)
	}
	if c.ClientCAFile != "" {
		clientCerts, err := loadCAFile(c.ClientCAFile, "client CA")
		if err != nil {
			return nil, err
		}
		for _, ca := range clientCerts {
			s.clientCAs.AddCert(ca)
		}
		s.requireClientCert = true
	}
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	chain, err := parseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate file %s: %w", c.CertFile, err)
	}
	WarnIfReadableByOthers(log, c.KeyFile, "TLS key")
	keyPEM, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key: %w", err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
		return nil, fmt.Errorf("TLS key file %s: no PEM private key in it", c.KeyFile)
	}
	s.cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("TLS key file %s does not match the certificate in %s", c.KeyFile, c.CertFile)
		}
		// X509KeyPair's errors do not quote the key.
		return nil, fmt.Errorf("TLS key file %s with certificate %s: %w", c.KeyFile, c.CertFile, err)
	}
	// The node's own certificate must pass the checks its peers make, or
	// every peer would refuse it: say so now rather than in their logs.
	if err := verifyNodeCert(chain, s.peerCAs); err != nil {
		return nil, fmt.Errorf("TLS certificate file %s is not a valid node certificate of the cluster CA in %s: %w", c.CertFile, c.PeerCAFile, err)
	}
	return s, nil
}

// loadCAFile reads the CA certificates in name.
func loadCAFile(name, what string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("TLS %s: %w", what, err)
	}
	certs, err := parseCerts(b)
	if err != nil {
		return nil, fmt.Errorf("TLS %s file %s: %w", what, name, err)
	}
	return certs, nil
}

// parseCerts parses the CERTIFICATE blocks of a PEM file; other blocks are
// an error (a key in a certificate file is a mistake worth reporting).
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %q where a CERTIFICATE was expected", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return certs, nil
}

// nodeKeyUsages are the extended key usages a node certificate carries:
// nodes serve and dial each other.
var nodeKeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// verifyNodeCert checks that chain (leaf first, as presented) is a node
// certificate of the cluster CA: it chains to roots and is valid for
// both server and client authentication.
func verifyNodeCert(chain []*x509.Certificate, roots *x509.CertPool) error {
	if len(chain) == 0 {
		return errors.New("no certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// x509 accepts a chain valid for ANY of KeyUsages: check each.
	for _, u := range nodeKeyUsages {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return err
		}
	}
	return nil
}

// verifyPeer is the VerifyConnection of every node-to-node connection
// (both ends): the other end must present a node certificate of the
// cluster CA.
func (s *tlsState) verifyPeer(kind string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if err := verifyNodeCert(cs.PeerCertificates, s.peerCAs); err != nil {
			s.refused.add(kind)
			subject := ""
			if len(cs.PeerCertificates) > 0 {
				subject = cs.PeerCertificates[0].Subject.String()
			}
			s.log.Warn("cluster: refused a peer connection: its certificate is not a node certificate of the cluster CA",
				"connection", kind, "server_name", cs.ServerName, "subject", subject, "err", err)
			return fmt.Errorf("cluster: peer certificate refused: %w", err)
		}
		if kind == "raft-in" && s.raftPeerAllowed != nil {
			names := auth.NodeNames(cs.PeerCertificates[0])
			if !slices.ContainsFunc(names, s.raftPeerAllowed) {
				s.refused.add(kind)
				s.log.Warn("cluster: refused a raft connection: its certificate names no server of the configuration",
					"names", names)
				return fmt.Errorf("cluster: peer certificate refused: it names no server of the configuration (%q)", names)
			}
		}
		return nil
	}
}

// grpcServerConfig is the TLS configuration of the gRPC port.
func (s *tlsState) grpcServerConfig() *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if s.requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{s.cert},
		ClientCAs:    s.clientCAs,
		ClientAuth:   auth,
	}
}

// peerClientConfig is the TLS configuration of the connections this node
// dials to peers (kind: raft-out or grpc-out).
func (s *tlsState) peerClientConfig(kind string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{s.cert},
		// Not insecure: VerifyConnection verifies the chain against the
		// cluster CA. The host name is not checked (see TLSConfig).
		InsecureSkipVerify: true,
		VerifyConnection:   s.verifyPeer(kind),
	}
}

// raftServerConfig is the TLS configuration of the raft port.
func (s *tlsState) raftServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{s.cert},
		// Any certificate is asked for; VerifyConnection requires a node
		// certificate of the cluster CA.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: s.verifyPeer("raft-in"),
	}
}

// PeerCAs returns the cluster CA pool of the node's TLS configuration, nil
// without TLS: a verified chain to it identifies a peer node.
func (n *Node) PeerCAs() *x509.CertPool {
	if n.tls == nil {
		return nil
	}
	return n.tls.peerCAs
}

// tlsStreamLayer is raft's network layer over mutually verified TLS.
type tlsStreamLayer struct {
	net.Listener // the TCP listener; Accept wraps its connections
	advertise    net.Addr
	server       *tls.Config
	client       *tls.Config
	// handshakeTimeout bounds a handshake (raft's I/O timeout).
	handshakeTimeout time.Duration
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// newTLSStreamLayer listens on bind. advertise, if not nil, is the address
// Addr reports; it (or the listen address) must be a TCP address with a
// specific IP, as for raft's TCP transport.
func newTLSStreamLayer(bind string, advertise net.Addr, s *tlsState, timeout time.Duration) (*tlsStreamLayer, error) {
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	sl := &tlsStreamLayer{Listener: l, advertise: advertise, server: s.raftServerConfig(), client: s.peerClientConfig("raft-out"), handshakeTimeout: timeout}
	addr, ok := sl.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		l.Close()
		return nil, fmt.Errorf("raft address %v is not advertisable", sl.Addr())
	}
	return sl, nil
}

// Addr returns the advertised address.
func (l *tlsStreamLayer) Addr() net.Addr {
	if l.advertise != nil {
		return l.advertise
	}
	return l.Listener.Addr()
}

// Accept returns the next connection; its handshake runs on its first
// Read or Write (in raft's handler goroutine, not in its accept loop), so
// a peer that never completes one holds up nobody but itself.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyHandshakeConn{Conn: tls.Server(c, l.server), timeout: l.handshakeTimeout}, nil
}

// Dial connects to a peer's raft port and completes the handshake (the
// peer's certificate verified) within timeout.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", address, err)
	}
	return tc, nil
}

// lazyHandshakeConn is a server-side TLS connection whose handshake, run
// once on first use, is bounded by timeout.
type lazyHandshakeConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *lazyHandshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("raft TLS handshake with %s: %w", c.RemoteAddr(), err)
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *lazyHandshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *lazyHandshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
