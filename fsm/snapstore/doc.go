// Package snapstore is cairn's raft.SnapshotStore: a snapshot is a
// directory of hard links to the engine's checkpoint files plus their
// manifest, not a copy of the data.
//
// raft's FileSnapshotStore writes every snapshot's bytes into a state.bin,
// so each snapshot rewrites the whole data set, every retained snapshot is a
// full copy, and opening one (which a restart used to do, only to read its
// head) reads and checksums all of it. Here:
//
//   - Taking a snapshot (raft calls Create, then the FSM's Persist): the
//     FSM recognises the sink as an fsm.CheckpointSink and hands it its
//     checkpoint; the sink hard-links the files and writes the manifest.
//     It reads no file: the CRC-32C of a file already in the newest
//     snapshot (the same inode: SST and blob files are immutable) is taken
//     from that snapshot's manifest, and the others stay unknown
//     (pending.json) until the snapshot is first opened. Bytes written and
//     read: O(manifest).
//   - Sending a snapshot to a follower (Open): the first Open of a
//     snapshot sums its files of unknown checksum (those written since the
//     previous summed snapshot), writes its head and the exact stream size
//     into meta.json (raft's InstallSnapshot checks the size); then the
//     stream (fsm/doc.go, "Snapshots") is the head followed by the files,
//     read lazily.
//   - Receiving one from the leader (Create, then raft writes the stream
//     into the sink): the sink parses the stream as it arrives
//     (fsm.ReceiveSnapshot) into the snapshot's directory, checking every
//     size and checksum. The FSM's Restore then reads only the head of
//     Open's stream, finds the snapshot with FindCheckpoint (an
//     fsm.CheckpointSource) and hard-links its files into its staging
//     directory: the data is written once, by the receive.
//   - Retained snapshots share unchanged files through hard links, so
//     they cost what compaction replaced since they were taken; Refresh
//     (refresh.go) replaces a snapshot by one of the same raft position
//     over a later checkpoint, which pins nothing (the cluster layer does
//     it when the snapshots pin too much: cluster/snaprefresh.go).
//   - List and AppliedIndex read only meta.json: nothing at startup reads
//     data proportional to the data set. (List's Size is an estimate until
//     the snapshot is first opened.)
//
// # Directory
//
//	<dir>/
//	  <term>-<index>-<unix ms>/      a snapshot (its ID)
//	    meta.json                    raft.SnapshotMeta + the applied index/term
//	    head                         the stream head: magic, version, manifest, crc
//	    pending.json                 instead of head until every checksum is known
//	    engine/                      the checkpoint's files (hard links)
//	  <id>.tmp/                      a snapshot being made
//
// A snapshot is made in <id>.tmp (files linked or received and synced,
// head and meta.json written and synced, the directory synced), then
// renamed to <id> and <dir> synced: a crash leaves either no snapshot or a
// whole one. Completing the checksums writes head and meta.json by rename
// (synced) before it removes pending.json, so a crash leaves the old
// description or the new one. Open removes every *.tmp (a crash interrupted it); List never
// shows one. After a new snapshot is committed the oldest beyond Retain are
// removed (first renamed to <id>.tmp, so a crash during the removal leaves
// garbage for the next Open, never a listed half-removed snapshot).
//
// # Upgrade
//
// ImportFileSnapshots moves a data directory from raft's FileSnapshotStore:
// if it holds snapshots newer than this store's newest, the newest one is
// imported once (streamed through a sink, i.e. verified and laid down as a
// checkpoint directory: the one full copy, at the first start after the
// upgrade), and then the old snapshots are removed.
package snapstore
