package cluster

// (authz branch: only the type, so that authorization can read PeerCAFile;
// the tlsnode branch owns this file and the TLS behind it.)
//
// TLSConfig names the PEM files of a node's TLS setup (README.md,
// "Security"). The zero value means no TLS: every port is plaintext.
//
// With CertFile set, every TCP port but gossip's speaks TLS 1.3 only:
//   - the gRPC port serves CertFile's certificate; its clients may present
//     a certificate chaining to PeerCAFile or ClientCAFile, and must when
//     ClientCAFile is set;
//   - the raft port serves it too, and requires the dialer's certificate
//     to chain to PeerCAFile;
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
