// Package fsm is cairn's raft state machine: it applies committed commands
// to an lsm.DB, remembers client sessions for at-most-once writes, serves
// local reads, and snapshots and restores the engine as SST checkpoints.
// Nothing in it knows about gRPC or the network; the cluster package wires
// it to raft and serves the API.
//
// # Commands
//
// The payload of every raft LogCommand entry is a protobuf fsmpb.Command
// (fsm/fsmpb/fsm.proto): one of the API's write requests (Put, Delete,
// DeleteRange, Txn) with the client_id and seq of at-most-once execution.
// Build one with FSM.NewCommand(req) (or NewCommand) and Encode it;
// FSM.Validate checks it as the FSM will, so the leader can refuse a bad
// write before proposing it. The result of applying it (in the
// ApplyFuture's Response) is the API response (*cairnpb.PutResponse, ...)
// with header.applied_index and header.raft_term set, or an error (see
// ApplyBatch).
//
// A Txn command carries the bound on the keys and values its response may
// hold (max_txn_response_bytes, cairnpb.MaxResponseKVBytes of the
// proposing node's largest value), so that every replica decides alike
// whatever its own options. Applying the Txn counts each value against the
// bound before copying it; the read that would pass it fails the Txn with
// an InvalidArgument error naming the bound, and none of the Txn's writes
// (staged until its last operation) is applied. A command without the
// field (logged by an older version) is unbounded, as it was then. Values
// read from the engine for responses are copied once per batch, however
// many responses of the batch carry them; compares and Deletes without
// prev_kv read values in place.
//
// # Engine layout
//
// User keys live under the prefix 0x01 and the FSM's own records under
// 0x00, so no user key can collide with them:
//
//	engine key                     value
//	-----------------------------  ------------------------------------------
//	0x00 "format"                  layout version (4B LE) = 1
//	0x00 "applied"                 0x01 | index (8B LE) | term (8B LE) | clock (8B LE)
//	0x00 "session/" client_id      session record (below)
//	0x01 user_key                  value record (below)
//
// A value record carries the key's metadata, so version and mod_index are
// exact and the same on every replica:
//
//	+------+-----------------+----------------------+-------------------+-------+
//	| 0x01 | uvarint version | uvarint create_index | uvarint mod_index | value |
//	+------+-----------------+----------------------+-------------------+-------+
//
// version counts the Puts since the key was created (1 on create;
// deleting the key forgets it); create_index and mod_index are the raft
// indexes of the creating and the latest Put. Since a user key is stored
// with a one-byte prefix, the largest user key is lsm.MaxKeySize-1, which
// is cairnpb.MaxKeySize (keys.go checks it at compile time).
//
// # Apply
//
// ApplyBatch turns a whole batch of raft entries into ONE engine write
// batch, which also rewrites 0x00"applied" with the index and term of the
// batch's last entry: the effects of a batch and the index they reach are
// durable together or not at all. (A batch whose effects pass 64 MiB is
// written as several engine batches, each carrying the index of its own
// last entry, which keeps the same property.) Entries other than commands
// (configuration changes) only advance the index. Within a batch, each
// command reads the effects of the earlier ones (an overlay of the batch's
// pending writes sits above the engine), so a Txn's compares see them.
//
// Everything a command does is a function of the log: validation errors
// are results (the same on every replica), and the only clock is the one
// in the log (below). An engine error while applying is not: it halts the
// state machine (ErrHalted) rather than let this replica diverge. The node
// must restart; it then replays the log from its durable applied index.
//
// # At-most-once writes
//
// A write with a client_id is recorded in that client's session: the last
// seq applied, the raft index and time of that write, and its encoded
// result (an fsmpb.Result, unless larger than MaxSessionResultBytes). A
// later command from the same client with seq <= the recorded one is not
// applied again: seq == recorded returns the recorded result (the very
// response, or the same InvalidArgument error), an older seq returns
// ErrResultUnavailable, as does a recorded result that was too large to
// keep. Sessions are persisted in the engine (in the same batch as the
// write), so they survive restarts, travel in snapshots, and are part of the
// replicated state.
//
//	session record:
//	+------+-----------+-------------+-------------------+-------------------+--------+
//	| 0x01 | flags(1B) | uvarint seq | uvarint lastIndex | varint lastActive | result |
//	+------+-----------+-------------+-------------------+-------------------+--------+
//	flags bit 0: result retained.
//
// The table is bounded:
//   - at most MaxSessions (default 10,000) sessions: a new client evicts the
//     least recently active one (smallest lastIndex);
//   - a session idle for more than SessionTTL (default 10 minutes) expires.
//
// Time is the FSM clock: the largest raft.Log.AppendedAt (the leader's
// clock when it appended the entry, replicated with it) among the commands
// applied so far, persisted in 0x00"applied". Never the local clock: expiry
// must happen at the same entry on every replica and on every replay.
// Before each command, the least recently active sessions idle for more than
// the TTL are removed (in lastIndex order, stopping at the first that is
// not idle: with skewed leader clocks a session may outlive its TTL, never
// expire early). Decisions are per command, never per batch, because
// batching differs between replicas and replays.
//
// The limit of at-most-once: a retry that arrives after its session was
// evicted or expired is applied again. Clients must bound their retries to
// well under SessionTTL, and MaxSessions must exceed the number of clients
// active within a TTL.
//
// # Restart without re-ingesting a snapshot
//
// New opens the engine and reads its applied index; ApplyBatch skips every
// entry at or below it. The cluster layer sets raft's
// NoSnapshotRestoreOnStart, so a restart costs opening the engine (reading
// its manifest and replaying its WAL tail), whatever the amount of data:
// re-ingesting the latest snapshot would instead copy the whole data set,
// making restart time grow with the data.
//
// Why this is safe. Raft restarts with lastApplied = its latest snapshot's
// index S and replays the log entries after S that are committed. The
// engine is durable up to some applied index A it recorded atomically with
// the effects of every entry up to A (engine batches are atomic and its
// WAL recovers a prefix of them, synced or not). And A >= S, up to LogNoop
// and LogBarrier entries (which change nothing and which raft never passes
// to the FSM): a snapshot is an engine checkpoint, which flushes the engine
// to synced tables first, so the engine was durable up to the snapshot's
// index before raft recorded the snapshot (and before it could compact the
// log below it). So the entries after A that matter are all in raft's log,
// and replay
// re-applies exactly them: those at or below A are skipped (their effects
// are already in the engine; applying them again would double-count
// versions and sessions), the rest are applied once.
//
// The one case the engine is behind the snapshot is a crash during Restore
// (raft stored the leader's snapshot, the swap did not finish, and New put
// the old engine back). So at startup the cluster layer must compare the
// latest snapshot's manifest.AppliedIndex with AppliedIndex() and restore
// it (leave NoSnapshotRestoreOnStart false) if it is ahead. The snapshot
// store of package fsm/snapstore keeps the applied index in each
// snapshot's meta.json, so this reads no data; with another store, open
// the snapshot and ReadSnapshotManifest its head (raft's FileSnapshotStore
// reads and checksums the whole file to open it). (Comparing with the raft
// snapshot's own index instead is safe but may restore needlessly: raft's
// index counts LogNoop and LogBarrier entries, which the FSM never sees.)
//
// Engine writes are not synced by default (Options.SyncWrites): the raft
// log is the durable copy of every entry, and the argument above holds for
// an engine that loses its unsynced tail.
//
// # No engine WAL behind the raft log
//
// For the same reason the engine runs without its own WAL by default
// (lsm.Options.DisableWAL; Options.EngineWAL or SyncWrites keep it). Every
// put was written to disk twice before a flush on every node: once in the
// raft log (fsynced) and once in the engine's WAL (not synced, so it never
// protected anything raft did not). Without it a crash loses the
// memtables, and the engine reopens at its last flush: an applied index A
// recorded in the same flushed tables as the effects of every entry up to
// A (the applied index is written in every engine batch, memtables hold
// whole batches and are flushed in order, so the flushed state is a
// prefix of the batches). The argument above needs only A >= S, the index
// of raft's latest snapshot, and that still holds: a snapshot is an engine
// checkpoint, which flushes first. Raft restarts at S, replays the
// committed entries after it, the FSM skips those at or below A and
// applies the rest: the entries lost with the memtables are all after A,
// all in raft's log (raft trims it only below S - TrailingLogs), and
// applied exactly once. What a crash costs is the replay of the entries
// since the last flush, at most about the snapshot threshold (8192 by
// default, as each snapshot flushes) plus a memtable's worth. A clean
// Close flushes the memtables, so a restart replays nothing. An engine
// directory written with a WAL is recovered from it on the first open
// (its WAL files are replayed as usual), so upgrading needs no step.
//
// Saved per put (3 nodes, 256-byte values): the WAL record, about the
// size of the engine batch (the value, the key, the session record), on
// each node; see bench/RESULTS.md, "cluster benchmark".
//
// Tested by the determinism test's power-loss variant (an in-memory crash
// of the engine at random points, then raft's replay from the last
// snapshot) and by cluster/snapcrash's kill -9 of real node processes.
//
// # Reads
//
// Get and Scan read the engine's latest state; the cluster layer decides
// when a read may run. AppliedIndex (an atomic) and WaitApplied (woken by a
// notifier each time a batch is applied; no polling) serve the read-index
// protocol: note the commit index, confirm leadership, wait until it is
// applied, read. Raft does not pass LogNoop and LogBarrier entries to the
// FSM (a new leader's first entry is a noop), so the FSM's applied index
// never equals such an entry's index: wait instead for the last LogCommand
// or LogConfiguration entry at or below the commit index (walk the log
// store back from the commit index past noops and barriers; it is at most
// a few entries and in raft's log cache).
//
// Reads and Restore share the engine through an RWMutex: a read during a
// restore waits for the new engine, and no read ever uses a closed one.
//
// # Snapshots
//
// A checkpoint is made in two steps, so that no apply waits for it.
// Under applyMu (microseconds) lsm.DB.PrepareCheckpoint captures the
// engine's state at the applied index: its visible sequence number, its
// current version and memtables (switching out the memtable when that
// costs no I/O). The rest, PreparedCheckpoint.Write, runs while applies
// go on: it waits for (or makes) the flush of the captured memtables, then
// hard-links the tables into <dir>/checkpoints/<index>-<n>, or, when the
// flush also took later writes, links the captured version and writes a
// table of its own of the captured entries below the sequence number.
// Snapshot, which raft calls on its apply goroutine, only captures;
// Persist, on raft's snapshot goroutine, writes. FSM.Checkpoint (backups,
// snapshot refresh) does both. Persist then streams the checkpoint as:
//
//	+-----------------+----------------+---------------+----------+------------------+
//	| magic "CAIRNSNP"| version (4B LE)| manifest len  | manifest | crc32c(manifest) |
//	|       8B        |      = 1       |   (4B LE)     | (proto)  |     (4B LE)      |
//	+-----------------+----------------+---------------+----------+------------------+
//	| file 0 bytes | file 1 bytes | ... | end of stream
//
// The manifest (fsmpb.SnapshotManifest) lists the applied index and term
// and, per file in stream order, its name, size and CRC-32C. Release
// removes the checkpoint. The same Checkpoint serves the Backup RPC
// (Files, Open).
//
// A sink that is a CheckpointSink (fsm/snapstore's) is not streamed into:
// Persist hands it the checkpoint, which it keeps as hard links plus a
// manifest, so a snapshot writes O(manifest) bytes and every retained
// snapshot shares the engine's unchanged files. The store streams the
// files only when raft sends the snapshot to a follower.
//
// Restore receives a stream into <dir>/restore-<n>, verifying every size
// and checksum, that the stream ends after the last file, and that the
// received engine opens at the manifest's applied index; any failure leaves
// the current engine untouched. If Options.Checkpoints (a
// CheckpointSource, fsm/snapstore's store) holds a snapshot with the
// stream's manifest (it verified the files when it stored them: a received
// stream is parsed and checked as it arrives, a local snapshot is the
// engine's own files), Restore reads only the stream's head and hard-links
// the tables and blob files from there (copying the few small files an
// engine appends to: MANIFEST, CURRENT), so the data is not copied a second
// time. raft wraps the reader it passes to Restore, so the stream is
// recognised by its manifest, not by its type. Then, with reads held off, it closes the
// engine, renames <dir>/engine to <dir>/engine.old and the staging directory
// to <dir>/engine, syncs <dir>, reopens, and removes engine.old. If a crash
// interrupts this, New finds engine.old without engine and puts it back
// (raft still holds the snapshot; see Restart above), or removes a stale
// engine.old.
//
// # Directory
//
//	<dir>/engine         the engine
//	<dir>/engine.old     the previous engine, during a Restore
//	<dir>/checkpoints/   live checkpoints (snapshots being persisted, backups)
//	<dir>/restore-<n>/   a snapshot being received
//
// New removes leftover checkpoints and staging directories.
package fsm
