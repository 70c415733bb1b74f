package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// AuthorizationKey is the gRPC metadata key of a bearer token
// ("authorization: Bearer <token>").
const AuthorizationKey = "authorization"

// Authorizer decides whether the caller of a gRPC method may call it. It
// is safe for concurrent use.
type Authorizer struct {
	policy  *Policy
	peerCAs *x509.CertPool
}

// New returns an Authorizer of policy. peerCAs is the cluster CA: a
// verified client certificate issued by it for a node (see isPeer) is a
// peer. nil recognises no peer by certificate (plaintext clusters; a
// peer token still works).
func New(policy *Policy, peerCAs *x509.CertPool) *Authorizer {
	if policy == nil {
		policy = &Policy{}
	}
	return &Authorizer{policy: policy, peerCAs: peerCAs}
}

// Identity is who a caller is.
type Identity struct {
	// Kind says how it was learned: "peer certificate", "certificate" or
	// "bearer token".
	Kind string
	// Name is the certificate name that matched ("" for a token: tokens
	// are never shown).
	Name string
	// Role is what it may do; Open for a verified certificate the policy
	// does not name.
	Role Role
}

func (id Identity) String() string {
	if id.Name == "" {
		return id.Kind
	}
	return fmt.Sprintf("%s %q", id.Kind, id.Name)
}

// Identify returns the identity of the caller in ctx (a gRPC server
// context): a verified client certificate that is a peer's; else a
// verified client certificate whose CN, DNS SAN or URI SAN the policy
// names; else the bearer token in the metadata, if the policy knows it;
// else a verified certificate with no role. ok is false when the caller
// presented nothing; err (Unauthenticated) when it presented a malformed
// or unknown token.
func (a *Authorizer) Identify(ctx context.Context) (id Identity, ok bool, err error) {
	var cert *Identity
	if p, found := peer.FromContext(ctx); found {
		if ti, isTLS := p.AuthInfo.(credentials.TLSInfo); isTLS && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			chains := ti.State.VerifiedChains
			leaf := chains[0][0]
			if a.isPeer(leaf, chains) {
				return Identity{Kind: "peer certificate", Name: leaf.Subject.CommonName, Role: Peer}, true, nil
			}
			names := certNames(leaf)
			if r, name, known := a.policy.CertRole(names); known {
				return Identity{Kind: "certificate", Name: name, Role: r}, true, nil
			}
			cert = &Identity{Kind: "certificate", Name: leaf.Subject.CommonName}
			if cert.Name == "" && len(names) > 0 {
				cert.Name = names[0]
			}
		}
	}
	token, present, err := bearerToken(ctx)
	switch {
	case err != nil:
		return Identity{}, false, err
	case present:
		r, known := a.policy.TokenRole(token)
		if !known {
			return Identity{}, false, status.Error(codes.Unauthenticated, "auth: unknown bearer token")
		}
		return Identity{Kind: "bearer token", Role: r}, true, nil
	case cert != nil:
		return *cert, true, nil
	}
	return Identity{}, false, nil
}

// isPeer reports whether leaf, verified by the TLS handshake along
// chains, is a node of this cluster: one chain ends at a root in the peer
// CA pool, and leaf is a node certificate, for both server and client
// authentication. The second condition matters when the client CA is the
// peer CA (the dev setup of `cairn-node certs`): a client certificate
// (client authentication only) from the same CA is not a peer.
func (a *Authorizer) isPeer(leaf *x509.Certificate, chains [][]*x509.Certificate) bool {
	if a.peerCAs == nil {
		return false
	}
	if !hasUsage(leaf, x509.ExtKeyUsageServerAuth) || !hasUsage(leaf, x509.ExtKeyUsageClientAuth) {
		return false
	}
	for _, chain := range chains {
		if len(chain) == 0 {
			continue
		}
		root := chain[len(chain)-1]
		// A root in the pool verifies at once, without a signature check.
		if _, err := root.Verify(x509.VerifyOptions{
			Roots: a.peerCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		}); err == nil {
			return true
		}
	}
	return false
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// certNames returns a certificate's CN, DNS SANs and URI SANs.
func certNames(c *x509.Certificate) []string {
	var names []string
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	names = append(names, c.DNSNames...)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	return names
}

// bearerToken returns the token of the "authorization: Bearer <token>"
// metadata, whether there was one, and an Unauthenticated error if it is
// malformed or repeated. The token never appears in an error.
func bearerToken(ctx context.Context) (token string, present bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(AuthorizationKey)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, status.Errorf(codes.Unauthenticated, "auth: %d authorization headers; send one", len(vs))
	}
	scheme, tok, found := strings.Cut(vs[0], " ")
	tok = strings.TrimSpace(tok)
	if !found || !strings.EqualFold(scheme, "bearer") || tok == "" {
		return "", false, status.Error(codes.Unauthenticated, `auth: malformed authorization header: want "Bearer <token>"`)
	}
	return tok, true, nil
}

// Authorize returns nil if the caller in ctx may call fullMethod; else
// codes.Unauthenticated when it has no identity (or an unknown token),
// codes.PermissionDenied when its role is below the method's (the message
// names the role needed) or the method is not in the table.
func (a *Authorizer) Authorize(ctx context.Context, fullMethod string) error {
	need, known := Required(fullMethod)
	if need == Open && known {
		return nil
	}
	id, ok, err := a.Identify(ctx)
	if err != nil {
		return err
	}
	if !ok {
		if !known {
			return status.Errorf(codes.Unauthenticated, "auth: %s needs credentials: no client certificate or bearer token", fullMethod)
		}
		return status.Errorf(codes.Unauthenticated, "auth: %s needs role %s: no client certificate or bearer token", fullMethod, need)
	}
	switch {
	case !known && id.Role == Peer:
		// A method the table misses (a bug: tests check the table) is
		// still open to the nodes, so that a cluster keeps working.
		return nil
	case !known:
		return status.Errorf(codes.PermissionDenied, "auth: %s has no authorization rule: only peers may call it", fullMethod)
	case id.Role == Open:
		return status.Errorf(codes.PermissionDenied, "auth: %s needs role %s; %s has no role in the policy", fullMethod, need, id)
	case id.Role < need:
		return status.Errorf(codes.PermissionDenied, "auth: %s needs role %s; %s has role %s", fullMethod, need, id, id.Role)
	}
	return nil
}

// UnaryInterceptor authorizes unary calls.
func (a *Authorizer) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.Authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor authorizes streaming calls.
func (a *Authorizer) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.Authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// ServerOptions are the gRPC server options that install a's
// interceptors. Put them before interceptors that do work for a call.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor),
		grpc.ChainStreamInterceptor(a.StreamInterceptor),
	}
}

// TokenCredentials sends a bearer token with every call of a connection
// (grpc.WithPerRPCCredentials). It does not require transport security:
// over plaintext, anyone on the path can read the token.
type TokenCredentials string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthorizationKey: "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (TokenCredentials) RequireTransportSecurity() bool { return false }

// String hides the token from logs and %v.
func (TokenCredentials) String() string { return "TokenCredentials(redacted)" }
