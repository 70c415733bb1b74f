package cluster

import (
	"crypto/x509"
	"fmt"

	"github.com/cairnkv/cairn/cluster/auth"
	"google.golang.org/grpc"
)

// newAuthorizer loads Config.AuthFile's policy (nil, nil without one) and
// checks that the nodes of the cluster can recognise each other under it:
// by certificate (the cluster CA of the node's TLS state, peerCAs; nil
// without TLS) or by AuthPeerToken, which the policy must give the role
// peer. Without either, every call a node makes to a
// peer (forwarding, read confirmation, status polls) would be refused, so
// the node refuses to start instead.
func newAuthorizer(c *Config, peerCAs *x509.CertPool) (*auth.Authorizer, error) {
	if c.AuthFile == "" {
		if c.AuthPeerToken != "" {
			return nil, fmt.Errorf("%w: a peer token without an authorization file", ErrInvalidConfig)
		}
		return nil, nil
	}
	for i := 0; i < len(c.AuthPeerToken); i++ {
		if b := c.AuthPeerToken[i]; b < 0x21 || b > 0x7e {
			return nil, fmt.Errorf("%w: the peer token may hold only printable ASCII without spaces (it travels in a gRPC header)", ErrInvalidConfig)
		}
	}
	policy, err := auth.Load(c.AuthFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	switch {
	case c.AuthPeerToken != "" && !policy.HasPeerToken(c.AuthPeerToken):
		return nil, fmt.Errorf("%w: authorization file %s does not give this node's peer token the role peer (add its %s... hash with \"peer\")",
			ErrInvalidConfig, c.AuthFile, auth.TokenHashPrefix)
	case peerCAs == nil && c.AuthPeerToken == "":
		return nil, fmt.Errorf("%w: with an authorization file, nodes must recognise each other: "+
			"give them TLS certificates of a peer CA (--tls-peer-ca) or a peer token (--auth-peer-token-file)", ErrInvalidConfig)
	}
	certs, tokens := policy.Counts()
	c.Logger.Info("cluster: authorization on", "file", c.AuthFile, "cert_identities", certs, "tokens", tokens,
		"peers_by_certificate", peerCAs != nil, "peer_token", c.AuthPeerToken != "")
	return auth.New(policy, peerCAs), nil
}

// authOptions returns the gRPC server options of authorization (none
// without Config.AuthFile), and makes the node's own calls to peers carry
// its peer token (Config.AuthPeerToken), if it has one, to the addresses
// verified as peers (verify.go). A follower
// forwards a client's request as itself: the client was authorized here,
// and the leader sees a peer.
func (n *Node) authOptions() []grpc.ServerOption {
	if n.auth == nil {
		return nil
	}
	// A node certificate is a peer only while its node is in the
	// configuration (verify.go).
	n.auth.SetPeerAllowed(n.peerIDAllowed)
	if t := n.cfg.AuthPeerToken; t != "" {
		n.fwd.setTokenFunc(func(addr string) grpc.DialOption {
			return grpc.WithPerRPCCredentials(gatedToken{token: t, addr: addr, v: n.verifier})
		})
	}
	return n.auth.ServerOptions()
}

// setTokenFunc makes every connection f makes from now carry the
// per-call credentials tok returns for its address.
func (f *forwarder) setTokenFunc(tok func(addr string) grpc.DialOption) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.token = tok
}
