// Package client is the Go client of a cairn cluster.
//
//	c, err := client.New(client.Config{Endpoints: []string{"10.0.0.1:7379", "10.0.0.2:7379"}})
//	if err != nil { ... }
//	defer c.Close()
//	_, err = c.Put(ctx, []byte("user/1"), []byte("ada"))
//	kv, err := c.Get(ctx, []byte("user/1"))         // client.ErrNotFound if absent
//	it := c.Scan(ctx, nil, nil, client.WithPrefix([]byte("user/")))
//	err = c.CompareAndSwap(ctx, []byte("user/1"), []byte("ada"), []byte("grace"))
//
// A Client is safe for concurrent use; every call takes a context, whose
// deadline bounds the call and its retries (Config.RequestTimeout when it
// has none).
//
// # Routing
//
// The client connects to every endpoint (lazily, unless
// Config.DialTimeout is set) and learns the leader's address from the
// nodes' Status and from the NotLeader detail of errors; a leader address
// that is not an endpoint is dialed too. Writes, linearizable reads and
// membership changes go to the leader (to the endpoints in turn while it is
// unknown: any node forwards to the leader). Serializable reads go to the
// nodes in turn. When a response shows the request was forwarded, the
// client looks the leader up again.
//
// # Retries
//
// A call is retried, on another node or after a pause, while the error is
// Unavailable (the node is unreachable or shutting down, knows no leader,
// has no quorum, or is not the leader: the NotLeader detail names the one to
// try, at once) or DeadlineExceeded from the node itself, until the
// context's deadline. The pauses grow exponentially from 20ms, with
// jitter, up to Config.MaxRetryBackoff. Nothing else is retried:
// InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted (a write
// stalled in the storage engine, or a message too large) are returned at
// once. Neither is a TLS handshake that a retry would repeat (a node
// certificate that does not verify against Config.TLS, a client
// certificate the node refuses, a node that does not speak TLS): gRPC
// reports it as Unavailable, but the call fails at once with
// ErrTLSHandshake, naming the cause, when the node it is pinned to
// (WithEndpoint) or every node failed so; a node that is down or
// restarting is retried as before. When the deadline ends the retries, the error satisfies both
// errors.Is(err, context.DeadlineExceeded) and the sentinel of the last
// attempt's failure (usually ErrUnavailable).
//
// # At-most-once writes
//
// Every write (Put, Delete, DeleteRange, Txn) carries a client_id and a
// sequence number, assigned once per call: all attempts of a call send the
// same pair, and the cluster's state machine applies a pair once and
// answers a repeat with the first answer. So a retry never applies a write
// twice, and never changes its meaning, even after an ambiguous failure: a
// connection that broke after the request was sent, a DeadlineExceeded from
// the leader, a leader that lost its leadership while committing.
//
// The cluster remembers only the last sequence number per client_id, so a
// Client keeps a pool of IDs ("<ClientID>/1", "<ClientID>/2", ...) and
// never has two writes in flight under one; the pool grows to the largest
// number of concurrent writes. The cluster's memory is bounded (by default
// 10,000 client IDs, each forgotten after 10 minutes without writes), so
// retries must end well within minutes; they do, unless a context's
// deadline is longer than that.
//
// A write that failed with ErrInvalidArgument, ErrFailedPrecondition or
// ErrNotFound was not applied. After any other error (a context error,
// ErrUnavailable, ResourceExhausted for a write stalled in the storage
// engine past the deadline, Internal) it may or may not have been applied,
// at most once; a read can tell. ErrResultUnavailable means a retry found
// the write applied but its result too large to have been kept.
//
// # Reads
//
// Get and Scan are Linearizable by default: they reflect every write
// acknowledged before they began (the leader confirms its leadership with a
// quorum and reads once it has applied everything committed).
// WithConsistency(Serializable) reads any node's local state, possibly
// stale, without a round trip to the leader. A Scan fetches pages as it is
// iterated; each page is a consistent read of its own, and a request of
// its own: WithPageTimeout bounds each page rather than the whole scan.
//
// # Errors
//
// Every error of a request is an *Error, carrying the gRPC status:
// status.Code(err) works, and errors.Is(err, ErrNotFound),
// ErrInvalidArgument, ErrUnavailable, ErrCompareFailed,
// ErrFailedPrecondition, ErrResultUnavailable, ErrUnauthenticated,
// ErrPermissionDenied, ErrTLSHandshake, ErrClosed, context.DeadlineExceeded and
// context.Canceled test for the usual cases.
// Arguments the client can check itself (an empty key, a key over
// cairnpb.MaxKeySize, an option given to a call it does not apply to) fail
// with ErrInvalidArgument without a request.
//
// # Backup and restore
//
// Backup streams a consistent checkpoint of a node's state machine (the
// leader's by default) into an io.Writer. The file it writes is a raft
// snapshot stream of cairn's state machine, byte for byte what a node's own
// snapshots hold (see the format in backup.go and package fsm), so every
// tool that reads one reads the other:
//
//   - VerifyBackup checks a backup file (checksums of the manifest and of
//     every file) and describes it.
//   - fsm.New(dir) followed by FSM.Restore(file) installs it as the state
//     machine in dir: dir/engine is then an engine directory (lsm.Open
//     accepts it) holding the data at the backup's applied index. The
//     `cairn snapshot restore FILE` command does this in a temporary
//     directory and writes every key into a running cluster (a logical
//     restore: keys get new versions and indexes); with --extract DIR it
//     only leaves the restored state machine in DIR.
package client
