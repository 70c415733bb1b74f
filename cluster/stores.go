package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cairnkv/cairn/cluster/boltlog"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/fsm/snapstore"
	"github.com/cairnkv/cairn/lsm/vfs"
	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// Names inside Config.DataDir (see doc.go, "Data directory").
const (
	nodeIDFileName   = "node-id"
	peersFileName    = "gossip-peers"
	raftDirName      = "raft"
	boltFileName     = "raft.db"
	walDirName       = "wal"
	snapshotsDirName = "snapshots" // raft's FileSnapshotStore adds "snapshots" under its base
	snapStoreDirName = "snapshots" // cairn's snapshot store (fsm/snapstore), in DataDir
	fsmDirName       = "fsm"
)

// logCacheSize is how many recent entries the raft log cache holds, so that
// replication does not read back what was just written (Consul uses 512).
const logCacheSize = 512

// checkNodeID records id in dir on first use and refuses another ID later:
// the raft state in dir belongs to one server ID.
func checkNodeID(dir, id string) error {
	name := filepath.Join(dir, nodeIDFileName)
	b, err := os.ReadFile(name)
	switch {
	case err == nil:
		if got := string(bytes.TrimSpace(b)); got != id {
			return fmt.Errorf("cluster: data directory %s belongs to node %q, not %q", dir, got, id)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cluster: %w", err)
	}
	if err := writeFileDurably(name, []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("cluster: recording node ID in %s: %w", dir, err)
	}
	return nil
}

// writeFileDurably replaces the file name with data: it writes a
// temporary file beside it, syncs it, renames it over name and syncs the
// directory, so that a crash leaves the old file or the new one, whole.
func writeFileDurably(name string, data []byte, perm os.FileMode) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(name))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: syncing %s: %w", dir, err)
	}
	return nil
}

// resolveLogStore returns the log store to open in the raft directory dir
// for the configured kind, and why: "" (the default) keeps using
// raft-boltdb for a directory that already has raft/raft.db (a node created
// before raft-wal became the default) and picks raft-wal otherwise. An
// explicit kind that contradicts the log already in dir is an error:
// opening the other store would start the node with an empty raft log,
// term and vote, which a member of a cluster must never do.
func resolveLogStore(kind, dir string) (string, string, error) {
	hasBolt, err := exists(filepath.Join(dir, boltFileName))
	if err != nil {
		return "", "", err
	}
	hasWAL, err := exists(filepath.Join(dir, walDirName, metadb.FileName))
	if err != nil {
		return "", "", err
	}
	switch {
	case hasBolt && hasWAL:
		return "", "", fmt.Errorf("cluster: %s holds both a raft-boltdb log (%s) and a raft-wal log (%s/): remove the one not in use",
			dir, boltFileName, walDirName)
	case kind == "" && hasBolt:
		return LogStoreBoltDB, "default: the data directory has a raft-boltdb log (" + boltFileName + ")", nil
	case kind == "" && hasWAL:
		return LogStoreWAL, "default: the data directory has a raft-wal log (" + walDirName + "/)", nil
	case kind == "":
		return LogStoreWAL, "default for a new data directory", nil
	case kind == LogStoreWAL && hasBolt:
		return "", "", fmt.Errorf("cluster: %s holds a raft-boltdb log (%s): open it with raft log store %q (or leave the store unset)",
			dir, boltFileName, LogStoreBoltDB)
	case kind == LogStoreBoltDB && hasWAL:
		return "", "", fmt.Errorf("cluster: %s holds a raft-wal log (%s/): open it with raft log store %q (or leave the store unset)",
			dir, walDirName, LogStoreWAL)
	case hasBolt || hasWAL:
		return kind, "configured; the data directory has its log", nil
	}
	return kind, "configured; new log", nil
}

func exists(name string) (bool, error) {
	_, err := os.Stat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("cluster: %w", err)
}

// openLogStore opens the raft log and stable store of the configured kind
// in dir, as resolveLogStore decides. The returned closer closes it.
//
// A raft-boltdb log (raft/raft.db) is opened with cairn's boltlog, which
// reads and writes raft-boltdb/v2's format and deletes compacted entries
// inside the appends' own transactions (cluster/boltlog/doc.go); raft-wal
// removes the segment files that compaction frees outside its write lock
// (asyncDeleteFiler), and its GetLog is fenced at FirstIndex
// (firstIndexStore). See logstore.go.
func openLogStore(kind, dir string) (raft.LogStore, raft.StableStore, io.Closer, error) {
	return OpenRaftLogStore(kind, dir, nil)
}

// openNodeLogStore opens the log store as openLogStore does, with c's
// raft-wal segment size.
func openNodeLogStore(c *Config, kind, dir string) (raft.LogStore, raft.StableStore, io.Closer, error) {
	return openRaftLogStore(kind, dir, nil, int(c.RaftWALSegmentSize))
}

// OpenRaftLogStore opens the raft log and stable store of the given kind
// (Config.RaftLogStore) in the raft directory dir as a node does, for
// tools and benchmarks that pass it back as Deps.LogStore and
// Deps.StableStore. wrap, if not nil, wraps the bare log store
// (*boltlog.Store or raft-wal) under cairn's own wrappers, so that it sees
// every call they make; it must keep raft.MonotonicLogStore. raft-wal's
// segments are DefaultRaftWALSegmentSize bytes. The closer closes the
// stores.
func OpenRaftLogStore(kind, dir string, wrap func(raft.LogStore) raft.LogStore) (raft.LogStore, raft.StableStore, io.Closer, error) {
	return openRaftLogStore(kind, dir, wrap, DefaultRaftWALSegmentSize)
}

// openRaftLogStore is OpenRaftLogStore with raft-wal segments of
// walSegmentSize bytes (Config.RaftWALSegmentSize). The size applies to
// segments created from now on: raft-wal records each segment's size in
// its metadata, so a directory written with another size opens unchanged.
func openRaftLogStore(kind, dir string, wrap func(raft.LogStore) raft.LogStore, walSegmentSize int) (raft.LogStore, raft.StableStore, io.Closer, error) {
	if wrap == nil {
		wrap = func(s raft.LogStore) raft.LogStore { return s }
	}
	kind, _, err := resolveLogStore(kind, dir)
	if err != nil {
		return nil, nil, nil, err
	}
	switch kind {
	case LogStoreWAL:
		walDir := filepath.Join(dir, walDirName)
		if err := os.MkdirAll(walDir, 0o755); err != nil {
			return nil, nil, nil, fmt.Errorf("cluster: raft WAL: %w", err)
		}
		// raft-wal's Close does not close its metadata database, whose
		// flock would then make the next Open in this process wait
		// forever (a node restarted in-process); so cairn owns it.
		meta := &metadb.BoltMetaDB{}
		sf := newAsyncDeleteFiler(walDir)
		w, err := raftwal.Open(walDir, raftwal.WithMetaStore(meta), raftwal.WithSegmentFiler(sf),
			raftwal.WithSegmentSize(walSegmentSize))
		if err != nil {
			sf.Close()
			meta.Close()
			return nil, nil, nil, fmt.Errorf("cluster: opening raft WAL: %w", err)
		}
		// GetLog below FirstIndex fails, as raft expects (logstore.go).
		return firstIndexStore{wrap(w)}, w, walCloser{w, meta, sf}, nil
	case LogStoreBoltDB:
		path := filepath.Join(dir, boltFileName)
		s, err := boltlog.Open(path, boltlog.Options{Bolt: &bbolt.Options{
			// A second process on the same data directory fails instead
			// of waiting for the file lock forever.
			Timeout: time.Second,
			// Without these bbolt rewrites its whole freelist on every
			// commit, and writes slow down as the file ages.
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		}})
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, nil, nil, fmt.Errorf("cluster: %s is locked: another process uses data directory", path)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cluster: opening raft log %s: %w", path, err)
		}
		return wrap(s), s, s, nil
	}
	return nil, nil, nil, fmt.Errorf("%w: raft log store %q", ErrInvalidConfig, kind)
}

// walCloser closes a raft-wal log, waits for its queued segment removals,
// and closes its metadata database.
type walCloser struct {
	w    *raftwal.WAL
	meta *metadb.BoltMetaDB
	sf   *asyncDeleteFiler
}

func (c walCloser) Close() error {
	err := c.w.Close()
	c.sf.Close()
	if merr := c.meta.Close(); err == nil {
		err = merr
	}
	return err
}

// openSnapshotStore opens cairn's snapshot store (fsm/snapstore) in
// DataDir/snapshots, on the engine's file system (its snapshots are hard
// links to engine files), and imports the newest snapshot of raft's
// FileSnapshotStore that a data directory of an older version keeps in
// raft/snapshots, removing those (once; see snapstore.ImportFileSnapshots).
func openSnapshotStore(c *Config, raftDir string, logger *log.Logger) (*snapstore.Store, error) {
	var fs vfs.FS
	if c.Engine != nil {
		fs = c.Engine.FS
	}
	ss, err := snapstore.Open(filepath.Join(c.DataDir, snapStoreDirName), &snapstore.Options{
		FS: fs, Retain: c.SnapshotRetain, Logger: logger,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	if _, err := ss.ImportFileSnapshots(raftDir); err != nil {
		return nil, fmt.Errorf("cluster: upgrading raft's snapshots: %w", err)
	}
	return ss, nil
}

// snapshotAppliedIndexer is a snapshot store that knows the state
// machine's applied index in a snapshot without reading it
// (fsm/snapstore).
type snapshotAppliedIndexer interface {
	AppliedIndex(id string) (uint64, error)
}

// restoreOnStart reports whether raft must restore its latest snapshot
// into the FSM at startup: only when the FSM's durable applied index is
// behind the snapshot (a crash interrupted the restore of a snapshot
// received from the leader, or the engine directory was lost). Otherwise
// the FSM already holds everything the snapshot holds, and raft replays
// only the log entries after it (see fsm/doc.go).
//
// With cairn's snapshot store the applied index comes from the snapshot's
// meta.json, so a restart reads nothing proportional to the data. Another
// store (tests, Deps.SnapshotStore) is opened to read the stream's head,
// which raft's FileSnapshotStore does by reading and checksumming the
// whole snapshot.
func restoreOnStart(snaps raft.SnapshotStore, f *fsm.FSM) (bool, string, error) {
	metas, err := snaps.List()
	if err != nil {
		return false, "", fmt.Errorf("cluster: listing snapshots: %w", err)
	}
	if len(metas) == 0 {
		return false, "no snapshot", nil
	}
	latest := metas[0]
	applied := f.AppliedIndex()
	var snapApplied uint64
	if ai, ok := snaps.(snapshotAppliedIndexer); ok {
		snapApplied, err = ai.AppliedIndex(latest.ID)
	} else {
		var rc io.ReadCloser
		if _, rc, err = snaps.Open(latest.ID); err != nil {
			return false, "", fmt.Errorf("cluster: opening snapshot %s: %w", latest.ID, err)
		}
		var m *fsmpb.SnapshotManifest
		m, err = fsm.ReadSnapshotManifest(rc)
		rc.Close()
		if err == nil {
			snapApplied = m.AppliedIndex
		}
	}
	if err != nil {
		// Let raft try it (and older ones) if the FSM may be behind.
		return applied < latest.Index, fmt.Sprintf("snapshot %s unreadable (%v)", latest.ID, err), nil
	}
	if applied < snapApplied {
		return true, fmt.Sprintf("engine at index %d, snapshot %s at %d", applied, latest.ID, snapApplied), nil
	}
	return false, fmt.Sprintf("engine at index %d holds snapshot %s (at %d)", applied, latest.ID, snapApplied), nil
}

// checkRaftState refuses a data directory whose state machine has applied
// entries while raft has no state (no term, log or snapshot): an engine
// extracted or copied there without its raft state. Such a node would
// serve its reads, but raft would start from index 0 and the FSM would
// skip every new entry at or below its applied index, failing every write.
// `cairn-node restore` seeds a node from a backup with the raft state it
// needs.
func checkRaftState(hasState bool, f *fsm.FSM, dataDir string) error {
	if hasState || f.AppliedIndex() == 0 {
		return nil
	}
	return fmt.Errorf("cluster: data directory %s holds a state machine at raft index %d but no raft state "+
		"(log, term or snapshot): it was not written by a node; to seed a node from a backup use "+
		"`cairn-node restore --from BACKUP --data-dir DIR`, or remove %s to start empty",
		dataDir, f.AppliedIndex(), filepath.Join(dataDir, fsmDirName))
}

// advertiseAddr returns the address to advertise for a listener bound at
// bound (the actual address, port resolved), or adv if set.
func advertiseAddr(adv string, bound net.Addr) (string, error) {
	if adv != "" {
		return adv, nil
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		priv, err := sockaddr.GetPrivateIP()
		if err != nil || priv == "" {
			return "", fmt.Errorf("listening on all interfaces and no private IP found: set an advertise address")
		}
		host = priv
	}
	return net.JoinHostPort(host, port), nil
}

// resolveTCP resolves a host:port into the *net.TCPAddr raft's TCP
// transport advertises.
func resolveTCP(addr string) (*net.TCPAddr, error) {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("%s is not an address peers can dial", addr)
	}
	return a, nil
}

// splitHostPort splits addr into host and a numeric port.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}
