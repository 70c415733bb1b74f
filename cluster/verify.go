package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/auth"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Peer verification (README.md, "Security"). Gossip is open to anyone who
// holds the gossip key, and a member's gossip metadata (its ID, its gRPC
// and raft addresses) is only what it says about itself. Before a node
// sends a credential to a member's address, and before a leader makes a
// member a raft server, it verifies the member over a connection it opened
// itself to the member's advertised gRPC address:
//
//   - with TLS, the server at that address must present a node
//     certificate of the cluster CA (checked by the handshake,
//     tls.go) whose CN is the member's ID (auth.NodeNames);
//   - without TLS but with a peer token, the server must answer a fresh
//     challenge with an HMAC keyed with the token over the challenge, its
//     own nonce, the member's ID and the address dialed (ProvePeer). The
//     token itself never travels to an unverified address, and an answer
//     cannot be relayed from a real node: that node signs its own ID and
//     address, not the impostor's;
//   - with neither there is nothing to verify against: verification is
//     off (verifyNone) and the cluster is open to whoever reaches gossip,
//     as the README's table says.
//
// A verification is kept for peerVerifyTTL and then redone, so that a
// process that later binds a verified address (the node died, its port was
// reused) is not trusted for long; the leader's reconcile loop redoes it
// for every alive member before it expires.

// peerVerifyTTL is how long a verification is trusted.
const peerVerifyTTL = time.Minute

// peerVerifyRetry is how long a failed verification of an address is
// remembered before it is tried again (an impostor's address is not
// re-dialed on every reconcile round).
const peerVerifyRetry = 2 * time.Second

// peerVerifyTimeout bounds one ProvePeer call.
const peerVerifyTimeout = 2 * time.Second

// verifyMode is how a node verifies its peers.
type verifyMode int

const (
	verifyNone  verifyMode = iota // no TLS, no peer token: nothing to verify against
	verifyToken                   // a peer token: HMAC challenge-response
	verifyTLS                     // TLS: the certificate must name the node ID
)

func (m verifyMode) String() string {
	switch m {
	case verifyToken:
		return "peer-token proof"
	case verifyTLS:
		return "node certificate"
	default:
		return "none"
	}
}

// errNotVerified is returned for a call that would send a credential or a
// secret to a member that is not verified as a peer.
var errNotVerified = errors.New("cluster: not verified as a peer")

// verifiedPeer is one address's verification.
type verifiedPeer struct {
	id string
	at time.Time
	// failedAt is set instead of at by a failed verification.
	failedAt time.Time
	err      error
}

// peerVerifier keeps the verified peer addresses of a node.
type peerVerifier struct {
	mode  verifyMode
	token []byte // the peer token (verifyToken)
	now   func() time.Time

	mu     sync.Mutex
	byAddr map[string]verifiedPeer // REQUIRES: mu
	// flight deduplicates concurrent verifications of one address.
	flight map[string]chan struct{} // REQUIRES: mu
}

func newPeerVerifier(mode verifyMode, token string) *peerVerifier {
	return &peerVerifier{
		mode: mode, token: []byte(token), now: time.Now,
		byAddr: make(map[string]verifiedPeer), flight: make(map[string]chan struct{}),
	}
}

// verifiedAs returns the node ID addr is verified as ("" if none, or if the
// verification expired).
func (v *peerVerifier) verifiedAs(addr string) string {
	if v == nil {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.byAddr[addr]
	if e.id == "" || v.now().Sub(e.at) >= peerVerifyTTL {
		return ""
	}
	return e.id
}

// isVerified reports whether addr is verified as node id.
func (v *peerVerifier) isVerified(id, addr string) bool {
	return id != "" && v.verifiedAs(addr) == id
}

// due reports whether node id at addr needs a verification: it is not
// verified as id less than half the TTL ago, none is running, and its last
// one did not fail less than peerVerifyRetry ago.
func (v *peerVerifier) due(id, addr string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, busy := v.flight[addr]; busy {
		return false
	}
	answered, _ := v.cachedLocked(id, addr, true)
	return !answered
}

// cachedLocked reports whether what is known of addr answers a
// verification of node id without a new one: it was verified as id less
// than peerVerifyTTL ago (half of it with refresh), err nil; or its last
// verification failed less than peerVerifyRetry ago, err that failure.
// REQUIRES: v.mu held.
func (v *peerVerifier) cachedLocked(id, addr string, refresh bool) (answered bool, err error) {
	e, now := v.byAddr[addr], v.now()
	ttl := peerVerifyTTL
	if refresh {
		ttl /= 2
	}
	switch {
	case e.id == id && now.Sub(e.at) < ttl:
		return true, nil
	case e.err != nil && now.Sub(e.failedAt) < peerVerifyRetry:
		return true, e.err
	}
	return false, nil
}

// verifyPeer verifies that the server at grpcAddr is node id (see the
// package comment above), unless it was verified less than
// peerVerifyTTL ago. refresh also redoes a verification older than half
// the TTL, so that the reconcile loop renews them before they expire. It
// returns nil with verification off (verifyNone).
func (n *Node) verifyPeer(ctx context.Context, id, grpcAddr string, refresh bool) error {
	v := n.verifier
	if v == nil || v.mode == verifyNone {
		return nil
	}
	if id == "" || grpcAddr == "" {
		return fmt.Errorf("%w: no node ID or gRPC address", errNotVerified)
	}
	for {
		v.mu.Lock()
		if answered, err := v.cachedLocked(id, grpcAddr, refresh); answered {
			v.mu.Unlock()
			return err
		}
		ch, busy := v.flight[grpcAddr]
		if !busy {
			ch = make(chan struct{})
			v.flight[grpcAddr] = ch
			v.mu.Unlock()
			break
		}
		v.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := n.provePeer(ctx, id, grpcAddr)
	v.mu.Lock()
	if err == nil {
		v.byAddr[grpcAddr] = verifiedPeer{id: id, at: v.now()}
	} else if ctx.Err() == nil {
		err = fmt.Errorf("%w: %s at %s: %v", errNotVerified, id, grpcAddr, err)
		// A renewal that fails (a timeout on a loaded machine) leaves a
		// verification that has not expired in force: only the retry is
		// paced.
		e := v.byAddr[grpcAddr]
		if e.id != id {
			e = verifiedPeer{}
		}
		e.failedAt, e.err = v.now(), err
		v.byAddr[grpcAddr] = e
	}
	close(v.flight[grpcAddr])
	delete(v.flight, grpcAddr)
	v.mu.Unlock()
	if err == nil {
		n.log.Debug("cluster: verified a peer", "id", id, "addr", grpcAddr, "by", v.mode.String())
	} else if ctx.Err() == nil {
		n.log.Warn("cluster: a member failed peer verification; it gets no credentials and is not made a raft server",
			"id", id, "addr", grpcAddr, "by", v.mode.String(), "err", err)
	}
	return err
}

// provePeer runs one verification of node id at grpcAddr.
func (n *Node) provePeer(ctx context.Context, id, grpcAddr string) error {
	cc, err := n.fwd.conn(grpcAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, peerVerifyTimeout)
	defer cancel()
	challenge := make([]byte, 32)
	rand.Read(challenge)
	var p peer.Peer
	resp, err := cairnpb.NewReadIndexClient(cc).ProvePeer(ctx, &cairnpb.ProvePeerRequest{Challenge: challenge}, grpc.Peer(&p))
	if err != nil {
		return err
	}
	if resp.GetNodeId() != id {
		return fmt.Errorf("it answers as node %q", resp.GetNodeId())
	}
	switch n.verifier.mode {
	case verifyTLS:
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(ti.State.PeerCertificates) == 0 {
			return errors.New("no TLS certificate on the connection")
		}
		// The handshake verified the chain (tlsState.verifyPeer); the
		// certificate must also be this node's.
		if names := auth.NodeNames(ti.State.PeerCertificates[0]); !slices.Contains(names, id) {
			return fmt.Errorf("its certificate names %q, not %q", names, id)
		}
	case verifyToken:
		want := peerProof(n.verifier.token, challenge, resp.GetNonce(), id, grpcAddr)
		if len(resp.GetNonce()) != 32 || !hmac.Equal(resp.GetProof(), want) {
			return errors.New("its proof of the peer token is wrong")
		}
	}
	return nil
}

// peerProof is the HMAC-SHA256, keyed with the peer token, of a
// domain-separated, length-prefixed encoding of the challenge, the
// answering node's nonce, its ID and the gRPC address it was dialed at.
func peerProof(token, challenge, nonce []byte, id, grpcAddr string) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("cairn peer proof v1\x00"))
	for _, f := range [][]byte{challenge, nonce, []byte(id), []byte(grpcAddr)} {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(f)))
		m.Write(l[:])
		m.Write(f)
	}
	return m.Sum(nil)
}

// ProvePeer answers a peer's verification of this node. Open to everyone:
// the proof reveals nothing of the token (HMAC), and binds this node's own
// ID and advertised address, so that it cannot vouch for anyone else.
func (s *readIndexService) ProvePeer(ctx context.Context, req *cairnpb.ProvePeerRequest) (*cairnpb.ProvePeerResponse, error) {
	n := s.n
	if len(req.GetChallenge()) != 32 {
		return nil, status.Errorf(codes.InvalidArgument, "cluster: a peer challenge is 32 bytes, not %d", len(req.GetChallenge()))
	}
	resp := &cairnpb.ProvePeerResponse{NodeId: n.cfg.ID, GrpcAddr: n.grpcAddr, Nonce: make([]byte, 32)}
	rand.Read(resp.Nonce)
	if t := n.cfg.AuthPeerToken; t != "" {
		resp.Proof = peerProof([]byte(t), req.GetChallenge(), resp.GetNonce(), n.cfg.ID, n.grpcAddr)
	}
	return resp, nil
}

// peerConn returns the connection to node id at grpcAddr for a call that
// carries credentials, after verifying it (verifyPeer).
func (n *Node) peerConn(ctx context.Context, id, grpcAddr string) (*grpc.ClientConn, error) {
	if err := n.verifyPeer(ctx, id, grpcAddr, false); err != nil {
		return nil, err
	}
	return n.fwd.conn(grpcAddr)
}

// gatedToken sends the peer token on the calls of a connection to addr
// only while addr is verified as a peer: a call to an address that is not
// (ProvePeer itself, or a call a code path makes without verifying first)
// carries no token and is refused by a real peer, but the token never
// reaches an impostor.
type gatedToken struct {
	token string
	addr  string
	v     *peerVerifier
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (g gatedToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if g.v.mode != verifyNone && g.v.verifiedAs(g.addr) == "" {
		return nil, nil
	}
	return auth.TokenCredentials(g.token).GetRequestMetadata(context.Background())
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (gatedToken) RequireTransportSecurity() bool { return false }

// String hides the token.
func (gatedToken) String() string { return "gatedToken(redacted)" }

// peerIDs is the cached set of server IDs of the raft configuration, by
// the configuration index it was read at.
type peerIDs struct {
	index uint64
	at    time.Time
	ids   map[string]bool
}

// peerIDAllowed reports whether a node certificate naming id may act as a
// peer here (auth.Authorizer.SetPeerAllowed, and the raft port's
// handshake): id must be a server of the latest raft configuration, so
// that removing a node from the cluster revokes its certificate's peer
// role on every node that applies the removal. A node without raft state
// yet, or with an empty configuration (forming a cluster, or about to be
// added) allows any node certificate of the cluster CA: the leader that adds it must reach it,
// and it holds nothing yet.
//
// It answers from a cached set, re-read from raft (which waits for raft's
// main loop) only when a configuration entry was applied since, so that a
// removal is in force on a node as soon as the node applied it. A miss
// also re-reads it, at most every 500ms and in the background (a server
// just added by a configuration appended but not applied here yet).
func (n *Node) peerIDAllowed(id string) bool {
	r := n.raftStarted.Load()
	if r == nil {
		// The raft transport takes connections before raft runs (a
		// restart): its handshake waits for raft to know the
		// configuration.
		select {
		case <-n.raftUp:
			r = n.raftStarted.Load()
		case <-n.ctx.Done():
			return false
		case <-time.After(raftNetTimeout):
			return false
		}
	}
	if r.LastIndex() == 0 && r.CurrentTerm() == 0 {
		return true
	}
	c := n.peerIDs.Load()
	switch {
	case c == nil || c.index != n.fsm.configIndex.Load():
		// A configuration applied since: a removal must take effect
		// at once.
		if c = n.loadPeerIDs(r); c == nil {
			return false
		}
	case !c.ids[id] && time.Since(c.at) > 500*time.Millisecond:
		if n.peerIDsLoading.CompareAndSwap(false, true) {
			go func() {
				defer n.peerIDsLoading.Store(false)
				n.loadPeerIDs(r)
			}()
		}
	}
	if len(c.ids) == 0 {
		// No configuration yet (a vote can give a node a term before
		// the log that holds its configuration reaches it): as without
		// raft state. Re-read it on the next call.
		n.peerIDs.Store(nil)
		return true
	}
	return c.ids[id]
}

// loadPeerIDs reads the configuration's server IDs into the cache and
// returns them (nil if raft cannot answer).
func (n *Node) loadPeerIDs(r *raft.Raft) *peerIDs {
	idx := n.fsm.configIndex.Load()
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	ids := make(map[string]bool)
	for _, s := range f.Configuration().Servers {
		ids[string(s.ID)] = true
	}
	c := &peerIDs{index: idx, at: time.Now(), ids: ids}
	n.peerIDs.Store(c)
	return c
}
