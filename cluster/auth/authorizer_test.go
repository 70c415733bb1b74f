package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized authorization tests (0: from the clock)")

// The methods each role may call, written out (not derived from the
// table's order of roles): the model the authorizer is checked against.
var (
	openMethods = []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List",
		"/cairn.v1.ReadIndex/ProvePeer"}
	readMethods = []string{"/cairn.v1.KV/Get", "/cairn.v1.KV/Scan", "/cairn.v1.Cluster/Status", "/cairn.v1.Cluster/Members",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}
	writeMethods = []string{"/cairn.v1.KV/Put", "/cairn.v1.KV/Delete", "/cairn.v1.KV/DeleteRange", "/cairn.v1.KV/Txn"}
	adminMethods = []string{"/cairn.v1.Cluster/AddMember", "/cairn.v1.Cluster/RemoveMember", "/cairn.v1.Cluster/TransferLeader",
		"/cairn.v1.Cluster/Snapshot", "/cairn.v1.Cluster/Backup", "/cairn.v1.Cluster/Trace", "/cairn.v1.Cluster/GossipKeyring"}
	peerMethods = []string{"/cairn.v1.ReadIndex/Confirm"}
	// A method missing from the table: only peers may call it.
	unknownMethod = "/cairn.v1.KV/Compact"
)

// modelAllowed reports whether role may call m, and the role m needs.
func modelAllowed(role string, m string) (bool, string) {
	levels := []struct {
		name    string
		methods []string
	}{{"read-only", readMethods}, {"read-write", writeMethods}, {"admin", adminMethods}, {"peer", peerMethods}}
	var allowed []string
	need := "peer"
	for _, l := range levels {
		if slices.Contains(l.methods, m) {
			need = l.name
		}
	}
	for _, l := range levels {
		allowed = append(allowed, l.methods...)
		if l.name == role {
			return slices.Contains(allowed, m) || role == "peer", need
		}
	}
	return false, need
}

// caller is a randomly made client of the decision-table test.
type caller struct {
	desc string
	ctx  context.Context
	// role is the role the model expects ("" none); unauth: no identity
	// or a bad token.
	role   string
	unauth bool
	token  string // to check it never shows
}

func TestAuthorizeDecisionTable(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed)", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	peerCA, clientCA, foreignCA := newCA(t, "peer CA"), newCA(t, "client CA"), newCA(t, "foreign CA")
	roles := []string{"read-only", "read-write", "admin", "peer"}
	tokens := map[string]string{}
	policyJSON := `{"certs": {`
	for i, r := range roles {
		tok := fmt.Sprintf("tok-%s-%x", r, rng.Uint64())
		tokens[r] = tok
		sep := ","
		if i == 0 {
			sep = ""
		}
		policyJSON += fmt.Sprintf(`%s"cn-%s": %q, "dns-%s.example": %q, "spiffe://cairn/%s": %q`, sep, r, r, r, r, r, r)
	}
	policyJSON += `}, "tokens": {`
	for i, r := range roles {
		if i > 0 {
			policyJSON += ","
		}
		policyJSON += fmt.Sprintf("%q: %q", HashToken(tokens[r]), r)
	}
	policyJSON += "}}"
	policy, err := Parse([]byte(policyJSON))
	if err != nil {
		t.Fatal(err)
	}
	withPeers := New(policy, peerCA.pool())
	noPeers := New(policy, nil)
	// restricted allows only n2 as a peer (SetPeerAllowed): the node n3
	// was removed from the cluster.
	restricted := New(policy, peerCA.pool())
	restricted.SetPeerAllowed(func(id string) bool { return id == "n2" })

	issued := map[string]*x509.Certificate{} // by CA and spec: key generation is slow
	tlsCtx := func(ctx context.Context, ca *testCA, s certSpec) context.Context {
		k := fmt.Sprintf("%p %+v", ca, s)
		leaf := issued[k]
		if leaf == nil {
			_, leaf = ca.issue(t, s)
			issued[k] = leaf
		}
		chain := []*x509.Certificate{leaf, ca.cert}
		return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{chain},
		}}})
	}
	withToken := func(ctx context.Context, header string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs(AuthorizationKey, header))
	}
	newCaller := func(a *Authorizer) caller {
		ctx := context.Background()
		var c caller
		// A certificate, perhaps.
		switch rng.IntN(7) {
		case 0, 1: // none
		case 2: // a mapped client certificate, by CN, DNS or URI SAN
			r := roles[rng.IntN(len(roles))]
			ca := []*testCA{peerCA, clientCA}[rng.IntN(2)]
			s := certSpec{cn: "unmapped"}
			switch rng.IntN(3) {
			case 0:
				s.cn = "cn-" + r
			case 1:
				s.dns = []string{"other.example", "dns-" + r + ".example"}
			case 2:
				s.uris = []string{"spiffe://cairn/" + r}
			}
			ctx, c.role, c.desc = tlsCtx(ctx, ca, s), r, fmt.Sprintf("cert %+v", s)
		case 3: // an unmapped client certificate (of the peer CA too: client usage only is no peer)
			ca := []*testCA{peerCA, clientCA}[rng.IntN(2)]
			ctx, c.desc = tlsCtx(ctx, ca, certSpec{cn: "stranger"}), "unmapped cert"
			c.role = "none"
		case 4: // a node certificate, of a node allowed or not
			ca := []*testCA{peerCA, clientCA, foreignCA}[rng.IntN(3)]
			s := []certSpec{{cn: "n2", node: true}, {cn: "n3", node: true}, {cn: "n3", dns: []string{"n2"}, node: true}}[rng.IntN(3)]
			ctx, c.desc = tlsCtx(ctx, ca, s), fmt.Sprintf("node cert %+v of %s", s, ca.cert.Subject.CommonName)
			c.role = "none"
			if ca == peerCA && a.peerCAs != nil && (a != restricted || s.cn == "n2") {
				c.role = "peer"
			}
		case 5: // a mapped node certificate of a CA that is not the peer CA
			ctx, c.desc = tlsCtx(ctx, clientCA, certSpec{cn: "cn-read-only", node: true}), "mapped node cert of the client CA"
			c.role = "read-only"
		case 6: // a node certificate of the peer CA that the policy also maps
			s := []certSpec{{cn: "n3", dns: []string{"dns-admin.example"}, node: true}, {cn: "n2", dns: []string{"dns-read-write.example"}, node: true}}[rng.IntN(2)]
			ctx, c.desc = tlsCtx(ctx, peerCA, s), fmt.Sprintf("mapped node cert %+v", s)
			switch {
			case a.peerCAs != nil && (a != restricted || s.cn == "n2"):
				c.role = "peer"
			case s.cn == "n3":
				c.role = "admin"
			default:
				c.role = "read-write"
			}
		}
		// A token, perhaps.
		switch rng.IntN(5) {
		case 0, 1:
		case 2, 3:
			r := roles[rng.IntN(len(roles))]
			c.token = tokens[r]
			scheme := []string{"Bearer ", "bearer ", "BEARER  "}[rng.IntN(3)]
			ctx = withToken(ctx, scheme+c.token)
			c.desc += " token " + r
			if c.role == "" || c.role == "none" {
				c.role = r
			}
		case 4:
			c.token = fmt.Sprintf("bad-%x", rng.Uint64())
			hdr := []string{"Bearer " + c.token, "Basic " + c.token, c.token, "Bearer " + HashToken(tokens["admin"])}[rng.IntN(4)]
			ctx = withToken(ctx, hdr)
			c.desc += " bad token header " + hdr
			if c.role == "" || c.role == "none" {
				c.role, c.unauth = "", true
			}
		}
		if c.role == "" {
			c.unauth = true
		}
		c.ctx = ctx
		return c
	}

	all := slices.Concat(openMethods, readMethods, writeMethods, adminMethods, peerMethods, []string{unknownMethod})
	for i := range 3000 {
		a := withPeers
		switch rng.IntN(4) {
		case 0:
			a = noPeers
		case 1:
			a = restricted
		}
		c := newCaller(a)
		m := all[rng.IntN(len(all))]
		err := a.Authorize(c.ctx, m)
		code := status.Code(err)
		var want codes.Code
		var need string
		switch {
		case slices.Contains(openMethods, m):
			want = codes.OK
		case c.unauth:
			want = codes.Unauthenticated
		default:
			var ok bool
			ok, need = modelAllowed(c.role, m)
			want = codes.OK
			if !ok {
				want = codes.PermissionDenied
			}
		}
		if code != want {
			t.Fatalf("case %d (seed %d): %s calls %s: %v, want %v", i, seed, c.desc, m, err, want)
		}
		if err != nil {
			msg := status.Convert(err).Message()
			if c.token != "" && strings.Contains(msg, c.token) {
				t.Fatalf("case %d: the token shows in the error: %v", i, err)
			}
			if want == codes.PermissionDenied && m != unknownMethod && !strings.Contains(msg, "needs role "+need) {
				t.Fatalf("case %d: %s calls %s: %q does not name the role needed (%s)", i, c.desc, m, msg, need)
			}
		}
	}
}

// TestAuthorizeEdgeCases: what the randomized test does not reach.
func TestAuthorizeEdgeCases(t *testing.T) {
	policy, err := Parse([]byte(`{"tokens": {"` + HashToken("rw") + `": "read-write"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := New(policy, nil)
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	for _, c := range []struct {
		ctx  context.Context
		want codes.Code
	}{
		{md("authorization", "Bearer rw"), codes.OK},
		{md("authorization", "Bearer rw", "authorization", "Bearer rw"), codes.Unauthenticated},
		{md("authorization", "Bearer "), codes.Unauthenticated},
		{md("authorization", ""), codes.Unauthenticated},
		{md("x-token", "rw"), codes.Unauthenticated},
		// A TLS connection without a verified chain (no client
		// certificate) is no identity.
		{peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}), codes.Unauthenticated},
	} {
		if got := status.Code(a.Authorize(c.ctx, "/cairn.v1.KV/Put")); got != c.want {
			t.Errorf("%v: %v, want %v", c.ctx, got, c.want)
		}
	}
	// An unverified certificate (PeerCertificates without VerifiedChains,
	// as tls.RequestClientCert leaves them) names nobody, even with a
	// policy that maps its CN.
	ca := newCA(t, "ca")
	_, leaf := ca.issue(t, certSpec{cn: "admin", node: true})
	p2, _ := Parse([]byte(`{"certs": {"admin": "admin"}}`))
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}}})
	if got := status.Code(New(p2, ca.pool()).Authorize(ctx, "/cairn.v1.KV/Get")); got != codes.Unauthenticated {
		t.Errorf("unverified certificate: %v", got)
	}
	if s := fmt.Sprint(TokenCredentials("secret")); strings.Contains(s, "secret") {
		t.Errorf("TokenCredentials prints as %q", s)
	}
}
