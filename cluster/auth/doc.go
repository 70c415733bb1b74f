// Package auth is the authorization of a cairn node's gRPC calls: who may
// call which method (README.md, "Security", "Authorization").
//
// # Roles
//
// An identity has one of four roles, each allowing everything the ones
// before it allow:
//
//	read-only   Get, Scan, Cluster.Status, Cluster.Members, gRPC reflection
//	read-write  Put, Delete, DeleteRange, Txn
//	admin       AddMember, RemoveMember, TransferLeader, Snapshot, Backup,
//	            Trace, GossipKeyring
//	peer        another node: ReadIndex.Confirm (the leader's read
//	            confirmation), and everything else
//
// Health checks (grpc.health.v1) need no identity. The table in methods.go
// holds the role of every method a node serves; a test fails when a proto
// file gains a method without an entry. A method missing from the table
// anyway is refused to all but peers.
//
// # Identities
//
// The interceptors (Authorizer.UnaryInterceptor, StreamInterceptor) learn
// the caller's identity in this order:
//
//  1. A client certificate verified by the TLS handshake that chains to
//     the peer CA (the cluster CA, New's peerCAs) and is valid, along the
//     whole chain, for both server and client authentication, as node
//     certificates are, is a peer. A certificate of the peer CA with client
//     authentication only (what `cairn-node certs` makes for clients) is
//     not: with the dev setup's single CA, every client certificate would
//     otherwise be a peer. Nor is one under an intermediate CA restricted
//     to one of the usages. With Authorizer.SetPeerAllowed, a node
//     certificate is a peer only if its NodeNames (its CN) is
//     a node the function allows (the node: one in the raft
//     configuration), so that removing a node from the cluster takes its
//     certificate's peer role; a node certificate it refuses goes on to
//     rule 2 like any client certificate.
//  2. Else a verified client certificate whose CN, or any DNS or URI SAN,
//     the policy's "certs" names has that role (the highest, if several
//     names match). Names match exactly.
//  3. Else the metadata "authorization: Bearer <token>": the token's
//     SHA-256 is looked up in the policy's "tokens" (a map lookup on the
//     hash: the policy never holds a token, and a lookup on a hash leaks
//     nothing useful about the token through timing).
//  4. Else a verified certificate the policy does not name is an identity
//     without a role.
//
// No identity, or an unknown or malformed token, fails the call with
// codes.Unauthenticated (for a caller without a verified certificate, as
// soon as its stream opens, before its request is read:
// Authorizer.TapHandle); an identity whose role is below the method's
// with codes.PermissionDenied, whose message names the role needed and
// how the caller was identified (a certificate's name, never a token).
//
// # Policy file
//
//	{
//	  "certs":  {"admin": "admin", "reader": "read-only", "spiffe://cairn/app": "read-write"},
//	  "tokens": {"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "read-write"}
//	}
//
// Both fields are optional. A token is stored as "sha256:" and the hex
// SHA-256 of its bytes (`printf %s "$TOKEN" | sha256sum`; HashToken). Parse
// refuses, naming the entry, unknown fields, unknown roles, a token that
// is not in that form, an empty name, the same identity twice and trailing
// data; the node then refuses to start.
//
// # Forwarding and node-to-node calls
//
// A client's call is authorized on the node it called. A follower that
// forwards a write or a linearizable read to the leader does so as itself,
// a peer: the leader does not see the client's identity and need not,
// since the follower already checked it (the client's metadata is not
// passed on). Nodes also call each other on their own: the leader's read
// confirmation rounds (ReadIndex.Confirm), its status polls of followers,
// the fan-out of a gossip keyring change. All of these need the callers
// to be recognised as peers, in one of two ways:
//
//   - with TLS (cluster.Config.TLS), by the node certificate each node
//     presents on its connections to peers (rule 1 above);
//   - without TLS, by a peer token (cluster.Config.AuthPeerToken,
//     cairn-node --auth-peer-token-file) that every node sends as a bearer
//     token on its calls to peers and that the policy gives the role
//     peer. Over plaintext, anyone who can see the traffic between nodes
//     can read it and act as a node: use it on trusted networks, tests
//     and dev clusters only.
//
// A node with a policy but neither refuses to start: its peers' calls
// would all be refused, and linearizable reads with them.
//
// Client tokens travel over plaintext too when the client does not use
// TLS (client.Config.Token does not require it), with the same risk.
package auth
