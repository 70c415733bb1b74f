package snapstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// Names inside a snapshot's directory and the temporary suffix.
const (
	metaFileName    = "meta.json"
	headFileName    = "head"
	pendingFileName = "pending.json"
	engineDirName   = "engine"
	tmpSuffix       = ".tmp"
)

// Store is a raft.SnapshotStore keeping each snapshot as a checkpoint
// directory (see doc.go). It implements fsm.CheckpointSource, so give it to
// fsm.Options.Checkpoints. Its methods are safe for concurrent use.
type Store struct {
	fs     vfs.FS
	dir    string
	retain int
	logf   func(format string, args ...any)

	mu struct {
		sync.Mutex
		// readers counts open readers per snapshot ID: a snapshot
		// being read is not reaped (it goes at a later reap).
		readers map[string]int
	}
	// sumMu serializes completing the checksums of a snapshot (Open).
	sumMu sync.Mutex
	// refreshMu serializes Refresh.
	refreshMu sync.Mutex
	// committed, if set, is called after each snapshot is committed.
	committed atomic.Pointer[func()]
}

var (
	_ raft.SnapshotStore   = (*Store)(nil)
	_ fsm.CheckpointSource = (*Store)(nil)
	_ fsm.CheckpointSink   = (*sink)(nil)
)

// Options configure a Store.
type Options struct {
	// FS is the file system; it must be the engine's (hard links).
	// Default vfs.Default.
	FS vfs.FS
	// Retain is how many snapshots to keep (at least 1). Default 2.
	Retain int
	// Logger receives notable events. Default: discard.
	Logger *log.Logger
}

// Open opens (creating it if needed) the store in dir, removing what a
// crash left half made.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Retain == 0 {
		o.Retain = 2
	}
	if o.Retain < 1 {
		return nil, fmt.Errorf("snapstore: Retain = %d, must be at least 1", o.Retain)
	}
	if o.Logger == nil {
		o.Logger = log.New(io.Discard, "", 0)
	}
	s := &Store{fs: o.FS, dir: dir, retain: o.Retain, logf: o.Logger.Printf}
	s.mu.readers = map[string]int{}
	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	if err := vfs.SyncDir(s.fs, filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	names, err := s.fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	reaped := false
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			s.logf("snapstore: removing %s, left by an interrupted snapshot", name)
			if err := s.fs.RemoveAll(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("snapstore: %w", err)
			}
			reaped = true
		}
	}
	if reaped {
		if err := vfs.SyncDir(s.fs, dir); err != nil {
			return nil, fmt.Errorf("snapstore: %w", err)
		}
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// meta is what meta.json holds: raft's metadata and the applied position
// of the state machine in the snapshot (from its manifest), so that a
// restart learns it without reading the snapshot.
type meta struct {
	raft.SnapshotMeta
	AppliedIndex uint64
	AppliedTerm  uint64
}

// Create starts a snapshot; see sink.
func (s *Store) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version < raft.SnapshotVersionMin || version > raft.SnapshotVersionMax {
		return nil, fmt.Errorf("snapstore: unsupported snapshot version %d", version)
	}
	id := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	tmp := filepath.Join(s.dir, id+tmpSuffix)
	if err := s.fs.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	if err := s.fs.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	return &sink{
		s:   s,
		tmp: tmp,
		meta: meta{SnapshotMeta: raft.SnapshotMeta{
			Version:            version,
			ID:                 id,
			Index:              index,
			Term:               term,
			Configuration:      configuration,
			ConfigurationIndex: configurationIndex,
		}},
	}, nil
}

// List returns the snapshots, newest first, reading only their meta.json.
func (s *Store) List() ([]*raft.SnapshotMeta, error) {
	ms, err := s.list()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, len(ms))
	for i, m := range ms {
		sm := m.SnapshotMeta
		out[i] = &sm
	}
	return out, nil
}

// list returns the committed snapshots' metadata, newest first.
func (s *Store) list() ([]*meta, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	var out []*meta
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			continue
		}
		m, err := s.readMeta(name)
		if err != nil {
			s.logf("snapstore: skipping %s: %v", name, err)
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *meta) int {
		switch {
		case a.Term != b.Term:
			return cmpDesc(a.Term, b.Term)
		case a.Index != b.Index:
			return cmpDesc(a.Index, b.Index)
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func (s *Store) readMeta(id string) (*meta, error) {
	b, err := readFile(s.fs, filepath.Join(s.dir, id, metaFileName))
	if err != nil {
		return nil, err
	}
	m := &meta{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("snapstore: %s: %w", metaFileName, err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("snapstore: %s names snapshot %q", metaFileName, m.ID)
	}
	return m, nil
}

// Manifest returns the manifest of snapshot id (its files and the applied
// index and term), reading only its head. A snapshot that has not been
// opened since it was taken may not have every checksum yet: Manifest then
// fails (Open completes them).
func (s *Store) Manifest(id string) (*fsmpb.SnapshotManifest, error) {
	if !validID(id) {
		return nil, fmt.Errorf("snapstore: bad snapshot ID %q", id)
	}
	b, err := readFile(s.fs, filepath.Join(s.dir, id, headFileName))
	if err != nil {
		return nil, err
	}
	return fsm.ReadSnapshotManifest(bytes.NewReader(b))
}

// knownFile is a manifest entry and whether its checksum is known.
type knownFile struct {
	*fsmpb.SnapshotFile
	known bool
}

// files returns the files of snapshot id, from its head or, if its
// checksums are not all known yet, from pending.json.
func (s *Store) files(id string) ([]knownFile, error) {
	if m, err := s.Manifest(id); err == nil {
		out := make([]knownFile, len(m.Files))
		for i, f := range m.Files {
			out[i] = knownFile{f, true}
		}
		return out, nil
	}
	m, known, err := readPending(s.fs, filepath.Join(s.dir, id))
	if err != nil {
		return nil, err
	}
	out := make([]knownFile, len(m.Files))
	for i, f := range m.Files {
		out[i] = knownFile{f, known[i]}
	}
	return out, nil
}

// complete makes sure snapshot id has a head (every checksum known): it
// sums the files whose checksums are unknown, writes head (synced, by
// rename), rewrites meta.json with the exact stream size, removes
// pending.json and syncs the directory. It returns the head and the meta.
func (s *Store) complete(id string) ([]byte, *meta, error) {
	s.sumMu.Lock()
	defer s.sumMu.Unlock()
	dir := filepath.Join(s.dir, id)
	m, err := s.readMeta(id)
	if err != nil {
		return nil, nil, err
	}
	if head, err := readFile(s.fs, filepath.Join(dir, headFileName)); err == nil {
		return head, m, nil
	}
	man, known, err := readPending(s.fs, dir)
	if err != nil {
		return nil, nil, err
	}
	for i, fi := range man.Files {
		if known[i] {
			continue
		}
		sum, n, err := fsm.FileCRC32C(s.fs, filepath.Join(dir, engineDirName, fi.Name))
		if err != nil {
			return nil, nil, err
		}
		if uint64(n) != fi.Size {
			return nil, nil, fmt.Errorf("snapstore: snapshot %s file %s is %d bytes, its manifest says %d", id, fi.Name, n, fi.Size)
		}
		fi.Crc32C = sum
	}
	head, err := fsm.EncodeSnapshotHead(man)
	if err != nil {
		return nil, nil, err
	}
	tmp := filepath.Join(dir, headFileName+tmpSuffix)
	if err := writeFileSynced(s.fs, tmp, head); err != nil {
		return nil, nil, err
	}
	if err := s.fs.Rename(tmp, filepath.Join(dir, headFileName)); err != nil {
		return nil, nil, fmt.Errorf("snapstore: %w", err)
	}
	m.Size = streamSize(head, man)
	if err := writeMeta(s.fs, dir, m); err != nil {
		return nil, nil, err
	}
	if err := s.fs.Remove(filepath.Join(dir, pendingFileName)); err != nil {
		return nil, nil, fmt.Errorf("snapstore: %w", err)
	}
	if err := syncDir(s, dir); err != nil {
		return nil, nil, err
	}
	return head, m, nil
}

// AppliedIndex returns the state machine's applied index in snapshot id,
// from its meta.json.
func (s *Store) AppliedIndex(id string) (uint64, error) {
	if !validID(id) {
		return 0, fmt.Errorf("snapstore: bad snapshot ID %q", id)
	}
	m, err := s.readMeta(id)
	if err != nil {
		return 0, err
	}
	return m.AppliedIndex, nil
}

// Open returns snapshot id's stream: its head, then its files. The first
// Open of a snapshot taken with AdoptCheckpoint sums the files whose
// checksums were not known (those written since the previous snapshot),
// so that taking a snapshot reads nothing; the meta it returns has the
// stream's exact size (raft's InstallSnapshot checks it).
func (s *Store) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if !validID(id) {
		return nil, nil, fmt.Errorf("snapstore: bad snapshot ID %q", id)
	}
	s.mu.Lock()
	s.mu.readers[id]++
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.mu.readers[id]--; s.mu.readers[id] == 0 {
			delete(s.mu.readers, id)
		}
	}
	head, m, err := s.complete(id)
	if err != nil {
		release()
		return nil, nil, err
	}
	man, err := fsm.ReadSnapshotManifest(bytes.NewReader(head))
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("snapstore: snapshot %s: %w", id, err)
	}
	sm := m.SnapshotMeta
	return &sm, &reader{
		fs: s.fs, dir: filepath.Join(s.dir, id, engineDirName),
		head: bytes.NewReader(head), files: man.Files, release: release,
	}, nil
}

// FindCheckpoint returns the engine directory of the newest snapshot whose
// manifest is m (fsm.CheckpointSource).
func (s *Store) FindCheckpoint(m *fsmpb.SnapshotManifest) (string, bool) {
	ms, err := s.list()
	if err != nil {
		return "", false
	}
	for _, sm := range ms {
		if sm.AppliedIndex != m.AppliedIndex || sm.AppliedTerm != m.AppliedTerm {
			continue
		}
		got, err := s.Manifest(sm.ID)
		if err == nil && proto.Equal(got, m) {
			return filepath.Join(s.dir, sm.ID, engineDirName), true
		}
	}
	return "", false
}

// commit makes the snapshot in tmp visible as id, then removes the one it
// replaces (Refresh) or, if none, reaps old ones.
// OnCommit makes the store call f after it has committed a snapshot
// (taken, received or refreshed), f's caller having waited for nothing:
// f must return at once. The node checks then what the snapshots pin
// (a snapshot taken while a compaction ran may hold its inputs).
func (s *Store) OnCommit(f func()) { s.committed.Store(&f) }

func (s *Store) commit(tmp, id, replaces string) error {
	if err := s.commitInner(tmp, id, replaces); err != nil {
		return err
	}
	if f := s.committed.Load(); f != nil {
		(*f)()
	}
	return nil
}

func (s *Store) commitInner(tmp, id, replaces string) error {
	if err := vfs.SyncDir(s.fs, tmp); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	if err := s.fs.Rename(tmp, filepath.Join(s.dir, id)); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	if err := vfs.SyncDir(s.fs, s.dir); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	if replaces != "" {
		if err := s.remove(replaces); err != nil {
			s.logf("snapstore: removing refreshed snapshot %s: %v", replaces, err)
		}
		return nil
	}
	if err := s.reap(id); err != nil {
		s.logf("snapstore: removing old snapshots: %v", err)
	}
	return nil
}

// reap removes the snapshots beyond Retain that no reader holds, never
// keep (the one just committed, even if older than those retained).
func (s *Store) reap(keep string) error {
	ms, err := s.list()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms[min(len(ms), s.retain):] {
		s.mu.Lock()
		busy := s.mu.readers[m.ID] > 0 || m.ID == keep
		s.mu.Unlock()
		if busy {
			continue
		}
		if err := s.remove(m.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// remove removes snapshot id unless a reader holds it.
func (s *Store) remove(id string) error {
	s.mu.Lock()
	busy := s.mu.readers[id] > 0
	s.mu.Unlock()
	if busy {
		return nil
	}
	// Rename first: a crash mid-removal must not leave a listed
	// snapshot with files missing.
	dead := filepath.Join(s.dir, id+".reap"+tmpSuffix)
	if err := s.fs.Rename(filepath.Join(s.dir, id), dead); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	var errs []error
	if err := vfs.SyncDir(s.fs, s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := s.fs.RemoveAll(dead); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// newestFiles returns the files of the newest snapshot by name, for
// reusing the checksums of files a new snapshot shares with it.
func (s *Store) newestFiles() (id string, files map[string]knownFile) {
	ms, err := s.list()
	if err != nil || len(ms) == 0 {
		return "", nil
	}
	fs, err := s.files(ms[0].ID)
	if err != nil {
		return "", nil
	}
	files = make(map[string]knownFile, len(fs))
	for _, f := range fs {
		files[f.Name] = f
	}
	return ms[0].ID, files
}

// validID reports whether id can name a snapshot directory.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && filepath.Base(id) == id &&
		!strings.HasSuffix(id, tmpSuffix) && !strings.ContainsAny(id, "/\\\x00")
}

func readFile(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("snapstore: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("snapstore: reading %s: %w", name, err)
	}
	return b, nil
}

// writeFileSynced writes b into the new file name and syncs it.
func writeFileSynced(fs vfs.FS, name string, b []byte) error {
	f, err := fs.Create(name)
	if err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapstore: writing %s: %w", name, err)
	}
	return nil
}

// sameFile reports whether a and b are the same file (hard links of one
// inode). False when the FS cannot tell.
func sameFile(fs vfs.FS, a, b string) bool {
	ai, err := fs.Stat(a)
	if err != nil {
		return false
	}
	bi, err := fs.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(ai, bi)
}

// streamSize is the length of a snapshot's stream: its head (if nil, that
// of m with zero checksums, an estimate) and its files.
func streamSize(head []byte, m *fsmpb.SnapshotManifest) int64 {
	if head == nil {
		head, _ = fsm.EncodeSnapshotHead(m)
	}
	n := int64(len(head))
	for _, f := range m.Files {
		n += int64(f.Size)
	}
	return n
}

// writeMeta writes dir/meta.json by rename (synced; the caller syncs dir).
func writeMeta(fs vfs.FS, dir string, m *meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	tmp := filepath.Join(dir, metaFileName+tmpSuffix)
	if err := writeFileSynced(fs, tmp, b); err != nil {
		return err
	}
	if err := fs.Rename(tmp, filepath.Join(dir, metaFileName)); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	return nil
}

// pending is pending.json: the manifest of a snapshot some of whose
// checksums are not known yet.
type pending struct {
	AppliedIndex, AppliedTerm uint64
	Files                     []pendingFile
}

type pendingFile struct {
	Name   string
	Size   uint64
	CRC32C uint32 `json:",omitempty"`
	Known  bool   `json:",omitempty"`
}

func writePending(fs vfs.FS, dir string, m *fsmpb.SnapshotManifest, known []bool) error {
	p := pending{AppliedIndex: m.AppliedIndex, AppliedTerm: m.AppliedTerm}
	for i, f := range m.Files {
		p.Files = append(p.Files, pendingFile{Name: f.Name, Size: f.Size, CRC32C: f.Crc32C, Known: known[i]})
	}
	b, err := json.Marshal(&p)
	if err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	return writeFileSynced(fs, filepath.Join(dir, pendingFileName), b)
}

func readPending(fs vfs.FS, dir string) (*fsmpb.SnapshotManifest, []bool, error) {
	b, err := readFile(fs, filepath.Join(dir, pendingFileName))
	if err != nil {
		return nil, nil, err
	}
	var p pending
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, nil, fmt.Errorf("snapstore: %s: %w", pendingFileName, err)
	}
	m := &fsmpb.SnapshotManifest{AppliedIndex: p.AppliedIndex, AppliedTerm: p.AppliedTerm}
	known := make([]bool, len(p.Files))
	for i, f := range p.Files {
		m.Files = append(m.Files, &fsmpb.SnapshotFile{Name: f.Name, Size: f.Size, Crc32C: f.CRC32C})
		known[i] = f.Known
	}
	return m, known, nil
}
