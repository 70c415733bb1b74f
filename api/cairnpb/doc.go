// Package cairnpb holds cairn's client API: the protobuf messages and gRPC
// services of package cairn.v1 (kv.proto, cluster.proto, errors.proto), the
// limits every node enforces, and the gRPC metadata keys nodes use among
// themselves.
//
// The .pb.go files are generated and committed; regenerate them with
// api/generate.sh (`make generate`) after editing a .proto file. Fields are
// only ever added: old clients must keep working.
//
// # Services
//
//   - KV: Put, Get, Delete, DeleteRange, Scan (paged), Txn (etcd-style
//     compare, then success or failure operations, atomically).
//   - Cluster: Status, Members, AddMember, RemoveMember, TransferLeader,
//     Snapshot, Backup (a streamed, consistent engine checkpoint).
//
// Every KV response carries a ResponseHeader naming the serving node, its
// raft term, and the raft index the response reflects. Every KeyValue
// carries the key's version (writes since creation, 1 on create) and the
// raft indexes of its creation and last modification, which Txn compares
// can test for compare-and-swap.
//
// # Errors
//
// Errors are gRPC statuses:
//
//   - InvalidArgument: an empty key, a key longer than MaxKeySize, a value
//     longer than the node's maximum (DefaultMaxValueSize unless
//     configured), a malformed request.
//   - FailedPrecondition or Unavailable with a NotLeader detail: the request
//     needs the leader and could not be forwarded to it; the detail names
//     the leader when known.
//   - ResourceExhausted: a message too large, or a write stalled beyond the
//     request's deadline.
//   - DeadlineExceeded, Unavailable (no quorum).
//
// # Forwarding
//
// A follower forwards a write to the leader over gRPC, adding one to the
// ForwardHopsKey metadata value; a node receiving a request whose hop count
// has reached MaxForwardHops fails it (with a NotLeader detail) instead of
// forwarding again, so a request cannot loop while leadership moves.
//
// # At-most-once writes
//
// Write requests carry client_id and seq. A client numbers its writes 1, 2,
// 3, ... under one client_id and retries a write with the same seq; the
// state machine returns the first result to a retry instead of applying it
// again (see package fsm for the bounds of that memory).
package cairnpb
