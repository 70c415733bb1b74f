// Package cluster wires one cairn node: raft (hashicorp/raft) over the
// state machine of package fsm, memberlist discovery and the reconcile loop
// of package membership, and the gRPC server of the KV and Cluster services
// (package api/cairnpb), with leader forwarding and the read paths.
//
//	client ──gRPC──▶ kvService/clusterService ──▶ route ──leader──▶ raft.Apply ──▶ fsm.FSM ──▶ lsm.DB
//	                                                 └─follower─▶ forward over gRPC to the leader
//
// # Lifecycle
//
// New checks a Config; Start opens everything in this order, so that a
// port in use or a locked data directory fails before any state is opened:
// the data directory's LOCK (flock) and node-id file, the gRPC listener,
// the raft transport, gossip (memberlist, gossiping Meta{ID, RaftAddr,
// GRPCAddr}), the raft log and stable store, the snapshot store, the FSM,
// raft itself; then the gRPC server, the background loops, and the
// bootstrap. Shutdown is graceful: the health service turns NOT_SERVING,
// the node announces its leave in gossip (the leader's reconcile loop then
// removes it from the configuration), a leader hands leadership to another
// voter, the gRPC server drains, and raft, gossip, the stores and the
// engine close, the lock last. Those closing steps share one deadline,
// Config.StopTimeout: a step still running then (raft's shutdown waits for
// its FSM goroutine, for one) is abandoned and logged, its resources left
// open, and the lock is released anyway (ErrStopIncomplete). No goroutine
// of the node waits on a raft future without also watching the node's
// context (Node.waitRaft): raft never completes a future still queued when
// it shuts down, and a new leader's barrier queued as all three nodes of a
// cluster stopped at once hung Shutdown that way.
//
// # Raft
//
// hashicorp/raft v1.8.0 with the log and stable store in hashicorp/raft-wal
// v0.4.0 (the default for a new data directory; built from
// third_party/raft-wal, which backports upstream's fix for a tail
// truncation that left a node unable to restart) or in raft-boltdb/v2's
// file format (raft/raft.db), which cairn reads and writes with its own
// cluster/boltlog (bbolt opened with NoFreelistSync and the map freelist;
// otherwise the freelist is rewritten on every commit and writes slow down
// as the file ages). A data directory that already holds raft/raft.db
// keeps that log unless Config.RaftLogStore says otherwise, and then Start
// refuses it: the formats are not converted. A raft.db written by
// raft-boltdb opens with boltlog unchanged and the reverse holds, so
// upgrading to (or back from) this version needs nothing. Either store is
// wrapped in raft.NewLogCache(512) so replication does not read back
// entries just written.
//
// Log compaction after a snapshot must not stall appends: raft-boltdb's
// DeleteRange is one bbolt write transaction over the whole compacted
// range, and bbolt has one writer; even cut into short transactions each
// is a commit (two fsyncs) an append waits for. boltlog records the
// compacted prefix as pending and deletes a bounded slice of it inside
// every append's own transaction (an idle node drains it in the
// background), so no append waits for a commit of log compaction. raft-wal
// commits a prefix truncation as one small metadata transaction and
// removes whole segment files, which cairn moves off its write lock (they
// took a second for 1 GiB of log). raft-wal recovers a torn tail by
// dropping the last unfinished batch (its commit frame's CRC fails), which was never acknowledged to raft; its
// DeleteRange supports only a prefix or a suffix of the log, which is all
// raft asks for. Its Close leaves its metadata database open, so cairn
// opens and closes that itself (otherwise an in-process restart waits
// forever on the file lock). raft-wal still serves entries below its first
// index while they sit in its open segment, so a follower that fell behind
// a compaction may catch up from the log instead of a snapshot: correct,
// as committed entries never change. MaxAppendEntries = 1024 and BatchApplyCh turn
// concurrent writes into group commits, and the FSM is a BatchingFSM, so a
// batch of entries is one engine write. Snapshots go to cairn's own store,
// fsm/snapstore (DataDir/snapshots): a snapshot is the FSM's checkpoint
// kept as hard links plus a manifest, not a stream copied into a
// FileSnapshotStore's state.bin; the FSM restores one it holds by hard
// links too. Deps.SnapshotStore replaces it (raft's FileSnapshotStore or
// in-memory store work: the FSM then streams, as before). A data
// directory of an older version, with snapshots in raft/snapshots, has
// its newest one imported at Start and the old ones removed.
//
// raft counts log retention in entries only; retention.go bounds it in
// bytes too (Config.TrailingLogBytes, SnapshotThresholdBytes): it counts
// the bytes of the entries stored and takes a snapshot, and lowers
// TrailingLogs through ReloadConfig, when they pass the bounds.
//
// NoSnapshotRestoreOnStart is set: the FSM's engine records its applied
// index with every batch and resumes from it (fsm/doc.go), so a restart
// replays only the log tail and never re-ingests a snapshot. Start turns
// restoring back on only when the FSM is behind the latest snapshot's
// manifest (a crash during the install of a snapshot received from the
// leader, or a lost engine directory); it learns the snapshot's applied
// index from the store's meta.json, so nothing at start reads data in
// proportion to the data set.
//
// Start refuses a data directory whose state machine has applied entries
// but which has no raft state (no term, log or snapshot: an engine copied
// or extracted there), and one that `cairn-node restore`
// (SeedFromBackup) did not finish. SeedFromBackup seeds a new cluster's
// node from a backup: the backup becomes its only snapshot (at the
// backup's applied index and term, with the new configuration) and its
// engine (hard links), raft's current term is the backup's, its log empty.
//
// # Bootstrap and membership
//
// BootstrapExpect = 1 bootstraps a single-node configuration (cmd/node's
// default without --join). BootstrapExpect = N > 1 waits until N servers
// are alive in gossip; the one with the lowest ID asks every other one for
// its Status and, if none has raft state (a term, a log or a leader),
// bootstraps a configuration of all of them (Consul's approach); the
// others receive it from the first leader. BootstrapExpect = 0 waits to be
// added. A node with raft state never bootstraps.
//
// The leader runs membership.Reconcile after every gossip change and every
// ReconcileInterval, with Config.Now as its clock. Follower progress is
// the leader's own view of its raft replication (replprogress.go: a
// wrapper of the raft transport notes every AppendEntries and
// InstallSnapshot answer: the index acknowledged and when), never what a
// member says of itself: a follower is healthy if it answered in this
// term within two heartbeat timeouts. With TLS or a peer token, a member
// is added only once verified as a peer (verify.go), and members of
// another cluster are refused by gossip (clusterid.go). The actions are
// applied as compare-and-set configuration changes (membership.Applier).
//
// Every node records the gossip addresses of its alive peers in
// DataDir/gossip-peers and adds them to its Join seeds on the next start,
// so a restarted node finds its cluster without --join.
//
// # Departed servers
//
// A leader removes a server whose member left gracefully. A new leader whose
// gossip has not yet heard of that leave (gossip is eventually consistent;
// the leave may have reached only the old leader) still sees the server's
// last run alive and, before departure records, added it back as a
// non-voter until the leave reached it. So the removal's reason must
// outlive the leader that saw it, and the one channel every later leader
// is guaranteed to share with the old one is the raft log: a later leader
// holds every committed entry.
//
// Each run of a node gossips an incarnation (membership.Meta.Incarnation:
// its start time in milliseconds, above the previous run's, kept in
// DataDir/incarnation). Before it removes a server for leaving, the leader
// commits a departure record (server ID, incarnation it left with) as a
// raft LogCommand entry with empty Data and the record in Extensions (the
// format is in departed.go), and only then applies the removal; a leader
// that has the removal therefore has the record. Reconcile (Input.Departed)
// does not add a server with a record back until gossip shows it with a
// newer incarnation, that is until it restarted and rejoined.
//
// The record is applied by this package's FSM wrapper, not the engine's
// FSM: the wrapper keeps the records in DataDir/departed (one "ID
// incarnation" line per server, at most 1024, the oldest run dropped
// first) and hands the engine a LogNoop in the entry's place, so the
// engine's applied index moves over it and its state is unchanged. A node
// of an older version hands the entry to its engine, which answers an
// empty command with an invalid-argument result and changes nothing. Why
// not a command of package fsm: the record is cluster bookkeeping the
// engine has no use for, and a new command type would need a new log and
// snapshot format there. The cost: the engine's snapshots do not carry the
// records, so a node that receives a snapshot (a new node, or one far
// behind) lacks the records compacted into it. That matters only if such a
// node becomes leader while its gossip view of an old leave is still stale,
// an unlikely case whose effect is the old, transient re-add.
//
// # Writes
//
// A write is validated (fsm.Validate: empty key, key over 64 KiB, value
// over MaxValueSize → InvalidArgument), then on the leader proposed with
// raft.Apply and answered with the FSM's result; a follower forwards it to
// the leader over a cached gRPC connection, adding one to the
// cairnpb.ForwardHopsKey metadata; at cairnpb.MaxForwardHops the request
// fails with a NotLeader detail instead. A node that does not know the
// leader waits for one up to LeaderWaitTimeout. Writes carrying client_id
// and seq are applied at most once by the FSM, whichever node a retry
// reaches.
//
// # Reads
//
// SERIALIZABLE reads are served from the local engine by any node.
// LINEARIZABLE reads (the default) go to the leader (forwarded like writes)
// and use the read-index protocol; see Node.readIndex. A new leader serves
// them only after a barrier of its own term has been applied, so its commit
// index covers everything earlier leaders committed. Because raft never
// hands LogNoop and LogBarrier entries to the FSM, the wait for the read
// index is for the last command or configuration entry at or below it
// (found through the log cache).
//
// Leadership is confirmed by committing a barrier entry appended after the
// read arrived (one per batch of concurrent reads), not by raft's
// VerifyLeader: VerifyLeader counts any heartbeat response that arrives
// after the call, even one to a heartbeat sent before it, so a leader paused
// for longer than an election (SIGSTOP, a VM stall) could confirm a read
// with a stale response waiting in its socket.
//
// # Errors
//
// Requests fail with gRPC statuses: InvalidArgument (bad request);
// Unavailable with a cairnpb.NotLeader detail (no leader known, leadership
// lost during the request, the hop limit, a halted or closed state
// machine); Unavailable without a detail for a leadership transfer that did
// not happen (raft's transfer timed out, or another was in progress:
// leadership stayed where it was, and a retry may succeed); DeadlineExceeded (the request's deadline, raft's enqueue
// timeout); ResourceExhausted (a message over the size limit; a write whose
// deadline passed while committed entries waited for a stalled engine);
// AlreadyExists (a duplicate of an applied write whose result the session
// no longer holds); FailedPrecondition (a conditional membership change
// whose configuration moved on); DataLoss (corruption); Internal otherwise.
// A write that fails with Unavailable or DeadlineExceeded may or may not
// have been applied: retry it with the same client_id and seq.
//
// Every unary call runs under a deadline: RequestTimeout if the client set
// none, and none later than MaxRequestTimeout from its arrival (Snapshot
// and the streams excepted); a connection has at most
// MaxConcurrentStreams calls open (limits.go). The per-request limits
// (keys, values, Txn size, Scan page) are api/cairnpb/limits.go's.
//
// # Logs and peer connections
//
// Raft's log lines go to the node's slog.Logger (logging.go). A warning or
// error about one peer (a "peer" or "server-id" argument, such as raft's
// "failed to heartbeat to", repeated every few hundred milliseconds while a
// follower is down) is logged at most once per 30s, with the count of the
// repeats held back. The leader's gRPC connections to its peers (forwarding,
// status polls) back off as gRPC does while a peer is down; when gossip
// reports the peer alive again the backoff is cut short, so the peer reads
// as healthy as soon as it is back.
//
// # Authorization
//
// With Config.AuthFile, the gRPC server's interceptors (auth.go, package
// cluster/auth) refuse every call but health checks whose caller lacks the
// method's role. They run after the deadline limit and the metrics
// interceptors, so refused calls are counted. A client is authorized by
// the node it called; a follower forwards to the leader as itself, a
// peer, recognised by its node certificate (TLS; its CN must name a server
// of the configuration: Node.peerIDAllowed) or by the peer token
// (Config.AuthPeerToken), which a node sends only to addresses it has
// verified as peers (verify.go). New refuses a policy under which the
// nodes could not recognise each other, and one without TLS unless
// Config.InsecureAuthWithoutTLS. The authorizer's tap handle refuses a
// call without credentials before its body is read; the listener caps
// connections per IP (connlimit.go).
//
// # Ports
//
// Defaults: gRPC 127.0.0.1:7379, raft 127.0.0.1:7380, gossip (TCP and
// UDP) 127.0.0.1:7381. Port 0 picks a free port (tests); the advertised
// addresses default to the listen addresses, with a private IP of the host
// for an all-interfaces bind. With Config.TLS the gRPC and raft ports speak
// TLS 1.3 only, raft through a TLS raft.StreamLayer, and every connection a
// node dials to a peer is mutual TLS verified against the peer CA (tls.go,
// TLSConfig); gossip stays UDP/TCP, encrypted by the gossip key.
//
// # Data directory
//
//	DataDir/
//	  LOCK               flock held while the node runs
//	  node-id            the node's ID, checked on every start
//	  gossip-peers       gossip addresses of the last known alive peers
//	  incarnation        this run's gossip incarnation (Departed servers)
//	  departed           departure records (Departed servers)
//	  cluster-id         the ID of the cluster the directory belongs to (clusterid.go)
//	  gossip.keyring     the gossip keys, mode 0600, if gossip is encrypted (gossipkeys.go)
//	  seed-incomplete    present while `cairn-node restore` runs (Start refuses)
//	  raft/wal/          raft-wal log and stable store (segments, wal-meta.db)
//	  raft/raft.db       or: raft-boltdb log and stable store
//	  raft/snapshots/    raft's FileSnapshotStore of older versions (imported, then removed)
//	  snapshots/         the snapshot store: <id>/{meta.json, head, engine/} (fsm/snapstore)
//	  fsm/               the state machine: engine/, checkpoints (fsm/doc.go)
//
// snapshots/ and fsm/ must be on one file system: snapshots are hard links
// to engine files.
package cluster
