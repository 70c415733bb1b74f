package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// AuthorizationKey is the gRPC metadata key of a bearer token
// ("authorization: Bearer <token>").
const AuthorizationKey = "authorization"

// Authorizer decides whether the caller of a gRPC method may call it. It
// is safe for concurrent use.
type Authorizer struct {
	policy  *Policy
	peerCAs *x509.CertPool
	// peerAllowed is SetPeerAllowed's function (nil: every node
	// certificate of the peer CA is a peer).
	peerAllowed atomic.Pointer[func(nodeID string) bool]
	// peerChains caches isPeer's chain verifications (two signature
	// checks per chain link) by the certificates presented.
	peerChains verifyCache
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

// SetPeerAllowed restricts the role peer to the nodes f allows. With f
// set, a node certificate of the peer CA (see isPeer) is a peer only if f
// returns true for one of its NodeNames, tried in order, and that name is
// the peer's Identity.Name; a node certificate none of whose names f
// allows is an ordinary client certificate: the policy's "certs" may give
// one of its names a role, else it has none. nil (the default) makes
// every node certificate of the peer CA a peer, named by its CN.
//
// It may be called at any time, also while serving (the function is
// stored atomically). f is called on every call a caller with a node
// certificate makes, from the gRPC interceptors (never from TapHandle):
// it must be fast and must not block (read a configuration the node keeps
// up to date, rather than ask raft for it).
func (a *Authorizer) SetPeerAllowed(f func(nodeID string) bool) {
	if f == nil {
		a.peerAllowed.Store(nil)
		return
	}
	a.peerAllowed.Store(&f)
}

// NodeNames returns the node IDs a node certificate c can name: its
// subject CN alone (nil without one). Not its DNS SANs: every node
// certificate `cairn-node certs` makes carries localhost and the operator's
// extra host names as DNS SANs, so a node named like one of them could be
// claimed by any node certificate. It does not check that c is a node
// certificate.
func NodeNames(c *x509.Certificate) []string {
	if c.Subject.CommonName == "" {
		return nil
	}
	return []string{c.Subject.CommonName}
}

// peerName returns the name of the peer whose node certificate is leaf,
// and false if SetPeerAllowed's function allows none of its names.
func (a *Authorizer) peerName(leaf *x509.Certificate) (string, bool) {
	f := a.peerAllowed.Load()
	if f == nil {
		return leaf.Subject.CommonName, true
	}
	for _, n := range NodeNames(leaf) {
		if (*f)(n) {
			return n, true
		}
	}
	return "", false
}

// Identity is who a caller is.
type Identity struct {
	// Kind says how it was learned: "peer certificate", "certificate",
	// "non-peer node certificate" (a node certificate of the peer CA
	// whose names SetPeerAllowed's function refuses, without a role in
	// the policy) or "bearer token".
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
// context): a verified client certificate that is a peer's (a node
// certificate of the peer CA that SetPeerAllowed's function, if any,
// allows); else a verified client certificate whose CN, DNS SAN or URI
// SAN the policy names; else the bearer token in the metadata, if the
// policy knows it; else a verified certificate with no role. ok is false
// when the caller presented nothing; err (Unauthenticated) when it
// presented a malformed or unknown token.
func (a *Authorizer) Identify(ctx context.Context) (id Identity, ok bool, err error) {
	var cert *Identity
	if ti, verified := verifiedTLS(ctx); verified {
		chains := ti.State.VerifiedChains
		leaf := chains[0][0]
		nodeCert := a.isPeer(leaf, ti.State.PeerCertificates)
		if nodeCert {
			if name, allowed := a.peerName(leaf); allowed {
				return Identity{Kind: "peer certificate", Name: name, Role: Peer}, true, nil
			}
		}
		names := certNames(leaf)
		if r, name, known := a.policy.CertRole(names); known {
			return Identity{Kind: "certificate", Name: name, Role: r}, true, nil
		}
		cert = &Identity{Kind: "certificate", Name: leaf.Subject.CommonName}
		if nodeCert {
			cert.Kind = "non-peer node certificate"
		}
		if cert.Name == "" && len(names) > 0 {
			cert.Name = names[0]
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	token, present, err := bearerToken(md)
	switch {
	case err != nil:
		return Identity{}, false, err
	case present:
		r, known := ctx.Value(tokenRoleKey{}).(Role)
		if !known {
			r, known = a.policy.TokenRole(token)
		}
		if !known {
			return Identity{}, false, status.Error(codes.Unauthenticated, "auth: unknown bearer token")
		}
		return Identity{Kind: "bearer token", Role: r}, true, nil
	case cert != nil:
		return *cert, true, nil
	}
	return Identity{}, false, nil
}

// verifiedTLS returns the TLS state of the caller in ctx (a gRPC server
// context), if it presented a client certificate the handshake verified.
func verifiedTLS(ctx context.Context) (credentials.TLSInfo, bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return credentials.TLSInfo{}, false
	}
	ti, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return credentials.TLSInfo{}, false
	}
	return ti, true
}

// isPeer reports whether leaf, verified by the TLS handshake (presented is
// the chain the caller sent, leaf first), is a node certificate of this
// cluster: it verifies against the peer CA pool, with the presented
// intermediates, for server authentication and, separately, for client
// authentication, as node certificates do (cluster/tls.go's
// verifyNodeCert checks the same on node-to-node connections). x509 checks
// the usages along the whole chain: a node certificate under an
// intermediate CA restricted to client authentication is not a peer. The
// separate checks matter because x509 accepts a chain valid for any of
// the usages it is given. The usages keep a client certificate (client
// authentication only: what `cairn-node certs` makes for clients) of the
// peer CA from being a peer when the client CA is the peer CA (the dev
// setup).
//
// Results are cached for a minute by the presented certificates (each
// check verifies a signature per chain link, and isPeer runs on every
// call).
func (a *Authorizer) isPeer(leaf *x509.Certificate, presented []*x509.Certificate) bool {
	if a.peerCAs == nil {
		return false
	}
	// The leaf must name both usages (or any); an empty list, which x509
	// takes as any usage, is no node certificate either.
	if !hasUsage(leaf, x509.ExtKeyUsageServerAuth) || !hasUsage(leaf, x509.ExtKeyUsageClientAuth) {
		return false
	}
	var inter []*x509.Certificate
	if len(presented) > 1 && presented[0].Equal(leaf) {
		inter = presented[1:]
	}
	key := chainKey(leaf, inter)
	now := time.Now()
	if ok, cached := a.peerChains.get(key, now); cached {
		return ok
	}
	ok := verifyPeerChain(leaf, inter, a.peerCAs)
	a.peerChains.put(key, ok, now)
	return ok
}

// verifyPeerChain verifies leaf against roots with the intermediates
// inter, once for each usage of a node certificate.
func verifyPeerChain(leaf *x509.Certificate, inter []*x509.Certificate, roots *x509.CertPool) bool {
	pool := x509.NewCertPool()
	for _, c := range inter {
		pool.AddCert(c)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return false
		}
	}
	return true
}

// chainKey identifies a presented chain: the SHA-256 of its certificates.
func chainKey(leaf *x509.Certificate, inter []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range append([]*x509.Certificate{leaf}, inter...) {
		var n [8]byte
		for i := range n {
			n[i] = byte(len(c.Raw) >> (8 * i))
		}
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// verifyCache remembers chain verifications for verifyCacheTTL; at
// verifyCacheMax entries it starts over.
type verifyCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]verifyResult
}

type verifyResult struct {
	ok bool
	at time.Time
}

const (
	verifyCacheTTL = time.Minute
	verifyCacheMax = 1024
)

func (c *verifyCache) get(k [sha256.Size]byte, now time.Time) (ok, found bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, found := c.m[k]
	if !found || now.Sub(r.at) >= verifyCacheTTL || now.Before(r.at) {
		return false, false
	}
	return r.ok, true
}

func (c *verifyCache) put(k [sha256.Size]byte, ok bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= verifyCacheMax {
		c.m = make(map[[sha256.Size]byte]verifyResult)
	}
	c.m[k] = verifyResult{ok: ok, at: now}
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
// metadata md, whether there was one, and an Unauthenticated error if it
// is malformed or repeated. The token never appears in an error.
func bearerToken(md metadata.MD) (token string, present bool, err error) {
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
		return noCredentials(fullMethod)
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

// noCredentials is the error of a call to fullMethod (a method that is
// not open) without a client certificate or a bearer token.
func noCredentials(fullMethod string) error {
	need, known := Required(fullMethod)
	if !known {
		return status.Errorf(codes.Unauthenticated, "auth: %s needs credentials: no client certificate or bearer token", fullMethod)
	}
	return status.Errorf(codes.Unauthenticated, "auth: %s needs role %s: no client certificate or bearer token", fullMethod, need)
}

// TapHandle refuses, with codes.Unauthenticated, a call that will be
// refused anyway for want of an identity, as soon as its stream opens:
// before gRPC reads its request. It is a tap.ServerInHandle
// (grpc.InTapHandle, in ServerOptions). A call to an open method passes;
// so does any call whose caller presented a client certificate the TLS
// handshake verified (the interceptors decide what it may do: whether it
// is a peer may depend on SetPeerAllowed's function, which TapHandle does
// not call). Otherwise the caller must send a bearer token the policy
// knows: no token, a malformed one, several, or an unknown one is refused
// with the error Authorize would return. The role of a known token is
// left to the interceptors too.
//
// Without it, the server reads and decodes a request (up to the maximum
// message size, on every stream of a connection) before the interceptors
// can refuse it. gRPC runs it on the connection's reading goroutine
// (grpc-go v1.85 puts the connection's peer, with its TLS state, in ctx
// for it, as for the interceptors), so it does no more than a map lookup
// of the token's hash.
func (a *Authorizer) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if need, known := Required(info.FullMethodName); known && need == Open {
		return ctx, nil
	}
	if _, verified := verifiedTLS(ctx); verified {
		return ctx, nil
	}
	token, present, err := bearerToken(info.Header)
	switch {
	case err != nil:
		return ctx, err
	case !present:
		return ctx, noCredentials(info.FullMethodName)
	}
	r, known := a.policy.TokenRole(token)
	if !known {
		return ctx, status.Error(codes.Unauthenticated, "auth: unknown bearer token")
	}
	// The interceptors' Identify takes the role from here rather than
	// hash the token again.
	return context.WithValue(ctx, tokenRoleKey{}, r), nil
}

// tokenRoleKey is the context key under which TapHandle leaves the role of
// the stream's bearer token.
type tokenRoleKey struct{}

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

// ServerOptions are the gRPC server options that install a's tap handle
// (TapHandle: a server has only one, grpc.InTapHandle panics on a second)
// and interceptors. Put them before interceptors that do work for a call.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(a.TapHandle),
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
