package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/snapstore"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
)

// seedMarkerFileName marks a data directory that SeedFromBackup has not
// finished: Start refuses it, and SeedFromBackup starts over.
const seedMarkerFileName = "seed-incomplete"

// raftCurrentTermKey is the stable store key of raft's current term
// (hashicorp/raft's keyCurrentTerm).
var raftCurrentTermKey = []byte("CurrentTerm")

// SeedServer is a voter of the configuration a seeded node starts with.
type SeedServer struct {
	ID       string
	RaftAddr string // the address its raft transport advertises
}

// SeedConfig describes a data directory to seed from a backup.
type SeedConfig struct {
	// DataDir is the node's data directory. It must not hold a node's
	// state (a raft log, snapshots or a state machine).
	DataDir string
	// ID is the node's ID (recorded in DataDir/node-id).
	ID string
	// Servers is the configuration the new cluster starts with; it must
	// include ID. Every server in it is seeded from the same backup.
	Servers []SeedServer
	// RaftLogStore is the log store the node will use (LogStoreWAL or
	// LogStoreBoltDB). Empty means what a node picks for a new data
	// directory: LogStoreWAL.
	RaftLogStore string
	// Backup is the backup stream (client.Backup, `cairn snapshot save`).
	Backup io.Reader
}

// SeedResult describes a seeded data directory.
type SeedResult struct {
	// AppliedIndex and AppliedTerm are the backup's raft position, at
	// which the node's raft starts (its snapshot and current term).
	AppliedIndex, AppliedTerm uint64
	// Files and Bytes count the engine files laid down.
	Files int
	Bytes uint64
}

// SeedFromBackup lays down a backup as the state of a node of a new
// cluster, as etcdutl snapshot restore does: the backup's checkpoint is
// the node's engine and its only snapshot (one copy, hard-linked), at the
// backup's applied index and term, with the configuration Servers; raft's
// current term is the backup's term and its log is empty. A node started
// on it resumes from that snapshot: its state machine skips nothing new
// (raft continues after the backup's index, which a fresh log at index 1
// would not), and it elects a leader among Servers.
//
// The directory is marked incomplete (seed-incomplete) until the end:
// Start refuses a marked directory, and SeedFromBackup on it starts over.
func SeedFromBackup(sc SeedConfig) (*SeedResult, error) {
	if sc.DataDir == "" || sc.ID == "" || sc.Backup == nil {
		return nil, fmt.Errorf("%w: seeding needs a data directory, a node ID and a backup", ErrInvalidConfig)
	}
	var self *SeedServer
	conf := raft.Configuration{}
	seen := map[string]bool{}
	for i, s := range sc.Servers {
		if s.ID == "" || s.RaftAddr == "" || seen[s.ID] {
			return nil, fmt.Errorf("%w: seed server %q at %q: empty or repeated", ErrInvalidConfig, s.ID, s.RaftAddr)
		}
		seen[s.ID] = true
		if s.ID == sc.ID {
			self = &sc.Servers[i]
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.RaftAddr)})
	}
	if self == nil {
		return nil, fmt.Errorf("%w: the seed configuration does not include node %q", ErrInvalidConfig, sc.ID)
	}
	if err := os.MkdirAll(sc.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	lock, err := lockDataDir(sc.DataDir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := prepareSeedDir(sc.DataDir); err != nil {
		return nil, err
	}
	if err := checkNodeID(sc.DataDir, sc.ID); err != nil {
		return nil, err
	}
	marker := filepath.Join(sc.DataDir, seedMarkerFileName)
	if err := os.WriteFile(marker, []byte("cairn-node restore did not finish: run it again\n"), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := syncDir(sc.DataDir); err != nil {
		return nil, err
	}

	// The snapshot: the backup stream, verified as it is received.
	ss, err := snapstore.Open(filepath.Join(sc.DataDir, snapStoreDirName), &snapstore.Options{Retain: 1})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	br := bufio.NewReaderSize(sc.Backup, 256<<10)
	m, err := fsm.ReadSnapshotManifest(br)
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the backup: %w", err)
	}
	if m.AppliedIndex == 0 || m.AppliedTerm == 0 {
		return nil, fmt.Errorf("cluster: the backup is of a state machine that applied nothing (index %d, term %d)", m.AppliedIndex, m.AppliedTerm)
	}
	head, err := fsm.EncodeSnapshotHead(m)
	if err != nil {
		return nil, err
	}
	sink, err := ss.Create(raft.SnapshotVersionMax, m.AppliedIndex, m.AppliedTerm, conf, m.AppliedIndex, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if _, err := sink.Write(head); err == nil {
		_, err = io.Copy(sink, br)
	}
	if err != nil {
		sink.Cancel()
		return nil, fmt.Errorf("cluster: reading the backup: %w", err)
	}
	if err := sink.Close(); err != nil {
		return nil, fmt.Errorf("cluster: the backup is not valid: %w", err)
	}

	// Raft's term; its log stays empty.
	raftDir := filepath.Join(sc.DataDir, raftDirName)
	if err := os.MkdirAll(raftDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	logs, stable, closer, err := openLogStore(sc.RaftLogStore, raftDir)
	if err != nil {
		return nil, err
	}
	last, err := logs.LastIndex()
	if err == nil && last != 0 {
		err = fmt.Errorf("raft log not empty (last index %d)", last)
	}
	if err == nil {
		err = stable.SetUint64(raftCurrentTermKey, m.AppliedTerm)
	}
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: raft state: %w", err)
	}

	// The engine: hard links to the snapshot's files, staged under a
	// name fsm.New removes if a crash leaves it.
	fsmDir := filepath.Join(sc.DataDir, fsmDirName)
	staging := filepath.Join(fsmDir, "restore-seed")
	if err := os.MkdirAll(fsmDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	metas, err := ss.List()
	if err != nil || len(metas) != 1 {
		return nil, fmt.Errorf("cluster: the seeded snapshot is not listed (%v)", err)
	}
	if err := fsm.LinkCheckpoint(vfs.Default, filepath.Join(ss.Dir(), metas[0].ID, "engine"), staging, m); err != nil {
		return nil, fmt.Errorf("cluster: laying down the engine: %w", err)
	}
	if err := os.Rename(staging, filepath.Join(fsmDir, "engine")); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := syncDir(fsmDir); err != nil {
		return nil, err
	}
	f, err := fsm.New(fsmDir, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the restored state machine: %w", err)
	}
	applied := f.AppliedIndex()
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if applied != m.AppliedIndex {
		return nil, fmt.Errorf("cluster: the restored state machine is at index %d, its manifest says %d", applied, m.AppliedIndex)
	}

	if err := os.Remove(marker); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := syncDir(sc.DataDir); err != nil {
		return nil, err
	}
	res := &SeedResult{AppliedIndex: m.AppliedIndex, AppliedTerm: m.AppliedTerm, Files: len(m.Files)}
	for _, fi := range m.Files {
		res.Bytes += fi.Size
	}
	return res, nil
}

// prepareSeedDir refuses a data directory that holds a node's state, or
// clears what an interrupted seeding left.
func prepareSeedDir(dataDir string) error {
	parts := []string{raftDirName, snapStoreDirName, fsmDirName}
	if _, err := os.Stat(filepath.Join(dataDir, seedMarkerFileName)); err == nil {
		for _, p := range parts {
			if err := os.RemoveAll(filepath.Join(dataDir, p)); err != nil {
				return fmt.Errorf("cluster: clearing an interrupted restore: %w", err)
			}
		}
		return syncDir(dataDir)
	}
	for _, p := range parts {
		ents, err := os.ReadDir(filepath.Join(dataDir, p))
		if err == nil && len(ents) > 0 {
			return fmt.Errorf("cluster: data directory %s already holds a node's state (%s): restore into a new directory", dataDir, p)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	return nil
}

// checkSeedComplete refuses a data directory that SeedFromBackup did not
// finish.
func checkSeedComplete(dataDir string) error {
	if _, err := os.Stat(filepath.Join(dataDir, seedMarkerFileName)); err == nil {
		return fmt.Errorf("cluster: data directory %s: a `cairn-node restore` into it did not finish; run it again", dataDir)
	}
	return nil
}
