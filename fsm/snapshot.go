package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot returns a snapshot of the applied state. Raft calls it on the
// goroutine that applies entries, so it only captures the state (see
// capture: microseconds, no I/O); Persist, which raft runs concurrently
// with applies, writes the checkpoint (see Checkpoint) and then streams it
// or hands it to a CheckpointSink. Release drops the capture and removes
// the checkpoint.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	cp, err := f.capture()
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{cp: cp}, nil
}

type fsmSnapshot struct {
	mu sync.Mutex
	cp *capture    // nil once written or released
	c  *Checkpoint // the written checkpoint; nil until Persist writes it
}

// CheckpointSink is a raft.SnapshotSink that keeps a snapshot as a
// checkpoint directory (package fsm/snapstore implements it). Persist hands
// it the checkpoint instead of streaming the checkpoint's bytes into it, so
// taking a snapshot writes a manifest, not a copy of the data.
type CheckpointSink interface {
	raft.SnapshotSink
	// AdoptCheckpoint makes c the snapshot's contents: it hard-links
	// c's files (c.Dir, c.FileSizes) and records their manifest. The
	// caller still owns c and releases it afterwards; the sink must
	// not depend on c's directory once AdoptCheckpoint returns.
	AdoptCheckpoint(c *Checkpoint) error
}

// Persist writes the captured state as a checkpoint (which leaves the
// engine durable up to the snapshot's index before raft records the
// snapshot: see doc.go, "Restart"), then hands it to a CheckpointSink, or
// writes the snapshot stream (see WriteTo) to any other sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	c, err := s.checkpoint()
	if err != nil {
		sink.Cancel()
		return err
	}
	if cs, ok := sink.(CheckpointSink); ok {
		if err := cs.AdoptCheckpoint(c); err != nil {
			sink.Cancel()
			return err
		}
		return sink.Close()
	}
	if _, err := c.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// checkpoint writes the captured state on the first call.
func (s *fsmSnapshot) checkpoint() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return s.c, nil
	}
	if s.cp == nil {
		return nil, ErrClosed
	}
	c, err := s.cp.materialize()
	s.cp = nil
	if err != nil {
		return nil, err
	}
	s.c = c
	return c, nil
}

func (s *fsmSnapshot) Release() {
	s.mu.Lock()
	cp, c := s.cp, s.c
	s.cp, s.c = nil, nil
	s.mu.Unlock()
	if cp != nil {
		// Never persisted (raft failed before Persist, or the caller
		// only released it). Flush anyway: a snapshot, persisted or
		// not, leaves the engine durable up to its index once done
		// with, as when Snapshot itself flushed. Not on the apply path.
		if err := cp.flush(); err != nil {
			cp.f.opts.Logger.Printf("fsm: releasing a snapshot not persisted: %v", err)
		}
		cp.release()
	}
	if c != nil {
		if err := c.Release(); err != nil {
			c.logf("fsm: releasing checkpoint %s: %v", c.dir, err)
		}
	}
}

// Checkpoint is a consistent copy of the engine at a known applied index,
// in a directory of its own (hard links to the engine's immutable files;
// and, when entries applied meanwhile were flushed with those before it, a
// table of its own of what the engine's memtables held at that index). It
// serves raft snapshots (WriteTo) and backups (Files, Open). Release it
// when done. Its methods are safe for concurrent use.
type Checkpoint struct {
	fs   vfs.FS
	dir  string
	logf func(format string, args ...any)
	// AppliedIndex and AppliedTerm are the raft position the checkpoint
	// reflects.
	AppliedIndex, AppliedTerm uint64

	mu       sync.Mutex
	files    []*fsmpb.SnapshotFile // sorted by name; checksums set once summed
	summed   bool
	released bool
}

// Checkpoint makes a checkpoint of the current applied state: it captures
// the state under applyMu (see capture), then writes it while entries go
// on being applied. The engine is durable up to the checkpoint's index
// when it returns.
func (f *FSM) Checkpoint() (*Checkpoint, error) {
	cp, err := f.capture()
	if err != nil {
		return nil, err
	}
	return cp.materialize()
}

// capture is the state of the engine at an applied index, captured for a
// checkpoint.
//
// Locks. Applies wait for applyMu, so a checkpoint holds it only to name
// its consistent point: the applied index and term, and the engine's state
// at that index (lsm.DB.PrepareCheckpoint: the visible sequence number and
// references to the current version and memtables, under the engine's
// mutex, after switching out the mutable memtable when that costs no I/O;
// no flush, no wait). That takes microseconds. The slow part, the flush of
// the captured memtables and writing the checkpoint directory (hard links
// to the engine's tables and a manifest; plus a table of the memtables'
// entries as of the capture if their flush also took later entries), runs
// after applyMu is released (materialize), under mu (read) only, which keeps a
// Restore or Close from closing the engine meanwhile; applies take mu
// (read) too, so they go on. Entries applied meanwhile are not in the
// checkpoint (the engine skips writes at or after the captured sequence
// number): it holds exactly the state at AppliedIndex.
//
// Holding applyMu across lsm.DB.Checkpoint (a flush, then links), as this
// used to, made every apply wait for the flush of the memtables: 1.3 s for
// a 1.8 GB engine under load (issue [ops2]; bench/RESULTS.md, "Snapshots
// without an apply stall"). And raft calls Snapshot on its apply
// goroutine, so even without the lock a raft snapshot that does the slow
// part in Snapshot stalls applies: it is done in Persist.
type capture struct {
	f           *FSM
	db          *lsm.DB
	p           *lsm.PreparedCheckpoint
	index, term uint64
}

// capture captures the applied state. Release the result, or materialize
// it (which releases it).
func (f *FSM) capture() (*capture, error) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usableLocked(); err != nil {
		return nil, err
	}
	p, err := f.mu.db.PrepareCheckpoint()
	if err != nil {
		return nil, fmt.Errorf("fsm: checkpoint: %w", err)
	}
	return &capture{f: f, db: f.mu.db, p: p, index: f.state.index, term: f.state.term}, nil
}

func (cp *capture) release() { cp.p.Release() }

// flush flushes the engine of the capture, unless it was closed or
// replaced since.
func (cp *capture) flush() error {
	cp.f.mu.RLock()
	defer cp.f.mu.RUnlock()
	if cp.f.mu.db != cp.db {
		return nil
	}
	return cp.db.Flush()
}

// materialize writes the captured state into <dir>/checkpoints/<index>-<n>;
// the engine is durable up to the checkpoint's index when it returns (see
// doc.go, "Restart"). It releases the capture. It holds mu (read), not
// applyMu.
func (cp *capture) materialize() (*Checkpoint, error) {
	defer cp.release()
	f := cp.f
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.db != cp.db {
		// A Restore replaced the engine, or Close closed it, since the
		// capture (raft may restore between Snapshot and Persist).
		return nil, fmt.Errorf("fsm: checkpoint: the engine was closed or replaced since the state was captured: %w", ErrClosed)
	}
	dir := filepath.Join(f.dir, checkpointsDirName, fmt.Sprintf("%d-%d", cp.index, f.seq.Add(1)))
	if err := f.fs.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("fsm: checkpoint: %w", err)
	}
	// Write leaves the engine's tables holding the captured state (it
	// waits for the flush of the memtables the capture froze, or
	// flushes), so the engine is durable up to the checkpoint's index.
	if err := cp.p.Write(dir); err != nil {
		return nil, fmt.Errorf("fsm: checkpoint: %w", err)
	}
	c := &Checkpoint{
		fs: f.fs, dir: dir, logf: f.opts.Logger.Printf,
		AppliedIndex: cp.index, AppliedTerm: cp.term,
	}
	names, err := f.fs.List(dir)
	if err != nil {
		c.Release()
		return nil, fmt.Errorf("fsm: checkpoint: %w", err)
	}
	slices.Sort(names)
	for _, name := range names {
		fi, err := f.fs.Stat(filepath.Join(dir, name))
		if err == nil && fi.IsDir() {
			err = fmt.Errorf("unexpected directory %s", name)
		}
		if err != nil {
			c.Release()
			return nil, fmt.Errorf("fsm: checkpoint: %w", err)
		}
		c.files = append(c.files, &fsmpb.SnapshotFile{Name: name, Size: uint64(fi.Size())})
	}
	return c, nil
}

// Dir returns the checkpoint's directory, which lsm.Open accepts.
func (c *Checkpoint) Dir() string { return c.dir }

// FileSizes describes the checkpoint's files, sorted by name, with their
// sizes but without checksums (Files computes those), without reading
// them.
func (c *Checkpoint) FileSizes() []*fsmpb.SnapshotFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*fsmpb.SnapshotFile, len(c.files))
	for i, fi := range c.files {
		out[i] = &fsmpb.SnapshotFile{Name: fi.Name, Size: fi.Size}
	}
	return out
}

// Files describes the checkpoint's files, sorted by name, with their
// CRC-32C checksums (computed by reading every file on the first call).
func (c *Checkpoint) Files() ([]*fsmpb.SnapshotFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil, ErrClosed
	}
	if !c.summed {
		for _, fi := range c.files {
			sum, err := c.sum(fi)
			if err != nil {
				return nil, err
			}
			fi.Crc32C = sum
		}
		c.summed = true
	}
	out := make([]*fsmpb.SnapshotFile, len(c.files))
	for i, fi := range c.files {
		out[i] = proto.Clone(fi).(*fsmpb.SnapshotFile)
	}
	return out, nil
}

func (c *Checkpoint) sum(fi *fsmpb.SnapshotFile) (uint32, error) {
	r, err := c.Open(fi.Name)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, fmt.Errorf("fsm: checkpoint file %s: %w", fi.Name, err)
	}
	if uint64(n) != fi.Size {
		return 0, fmt.Errorf("fsm: checkpoint file %s is %d bytes, was %d", fi.Name, n, fi.Size)
	}
	return h.Sum32(), nil
}

// Open opens one of the checkpoint's files for reading.
func (c *Checkpoint) Open(name string) (io.ReadCloser, error) {
	if filepath.Base(name) != name {
		return nil, fmt.Errorf("%w: checkpoint file name %q", ErrInvalidArgument, name)
	}
	f, err := c.fs.Open(filepath.Join(c.dir, name))
	if err != nil {
		return nil, fmt.Errorf("fsm: checkpoint: %w", err)
	}
	return f, nil
}

// Release removes the checkpoint's directory. Later calls do nothing.
func (c *Checkpoint) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil
	}
	c.released = true
	return c.fs.RemoveAll(c.dir)
}

// The snapshot stream (what Persist writes and Restore reads):
//
//	+-----------------+----------------+-----------------+----------+------------------+
//	| magic "CAIRNSNP"| version (4B LE)| manifest len    | manifest | crc32c(manifest) |
//	|       8B        |      = 1       |   (4B LE)       | (proto)  |     (4B LE)      |
//	+-----------------+----------------+-----------------+----------+------------------+
//	| file 0 bytes | file 1 bytes | ... | (end of stream)
//	+--------------+--------------+-----+
//
// The manifest is an fsmpb.SnapshotManifest: the applied index and term,
// and per file (in stream order) its name, size and CRC-32C. The stream
// ends exactly after the last file.
const (
	snapshotMagic       = "CAIRNSNP"
	snapshotVersion     = 1
	snapshotHeaderLen   = len(snapshotMagic) + 4 + 4
	maxManifestBytes    = 16 << 20
	maxSnapshotFileName = 255
)

// WriteTo writes the checkpoint as a snapshot stream to w. It reads every
// file twice: once for the manifest's checksums, once to stream it (and
// checks the second read against the first).
func (c *Checkpoint) WriteTo(w io.Writer) (int64, error) {
	files, err := c.Files()
	if err != nil {
		return 0, err
	}
	head, err := EncodeSnapshotHead(&fsmpb.SnapshotManifest{
		Files: files, AppliedIndex: c.AppliedIndex, AppliedTerm: c.AppliedTerm,
	})
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := &countingWriter{w: bw}
	cw.Write(head)
	if cw.err != nil {
		return cw.n, cw.err
	}
	for _, fi := range files {
		if err := c.copyFile(cw, fi); err != nil {
			return cw.n, err
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

func (c *Checkpoint) copyFile(w io.Writer, fi *fsmpb.SnapshotFile) error {
	r, err := c.Open(fi.Name)
	if err != nil {
		return err
	}
	defer r.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, int64(fi.Size)))
	if err != nil {
		return fmt.Errorf("fsm: streaming checkpoint file %s: %w", fi.Name, err)
	}
	if uint64(n) != fi.Size || h.Sum32() != fi.Crc32C {
		return corruptionf("checkpoint file %s changed while streamed (%d bytes, crc %08x; manifest: %d, %08x)",
			fi.Name, n, h.Sum32(), fi.Size, fi.Crc32C)
	}
	return nil
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	cw.err = err
	return n, err
}

// EncodeSnapshotHead returns the head of a snapshot stream (everything
// before the first file's bytes) for manifest m.
func EncodeSnapshotHead(m *fsmpb.SnapshotManifest) ([]byte, error) {
	manifest, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fsm: encoding snapshot manifest: %w", err)
	}
	if len(manifest) > maxManifestBytes {
		return nil, fmt.Errorf("fsm: snapshot manifest of %d bytes", len(manifest))
	}
	hdr := make([]byte, 0, snapshotHeaderLen+len(manifest)+4)
	hdr = append(hdr, snapshotMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, snapshotVersion)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(manifest)))
	hdr = append(hdr, manifest...)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(manifest, castagnoli))
	return hdr, nil
}

// FileCRC32C returns the CRC-32C and the size of a file.
func FileCRC32C(fs vfs.FS, name string) (uint32, int64, error) {
	f, err := fs.Open(name)
	if err != nil {
		return 0, 0, fmt.Errorf("fsm: %w", err)
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, n, fmt.Errorf("fsm: reading %s: %w", name, err)
	}
	return h.Sum32(), n, nil
}

// ReadSnapshotManifest reads the head of a snapshot stream. The cluster
// layer uses it at startup to learn the applied index of raft's latest
// snapshot without restoring it (see doc.go, "Restart").
func ReadSnapshotManifest(r io.Reader) (*fsmpb.SnapshotManifest, error) {
	hdr := make([]byte, snapshotHeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, streamErr("header", err)
	}
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return nil, corruptionf("snapshot stream: bad magic %q", hdr[:len(snapshotMagic)])
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != snapshotVersion {
		return nil, corruptionf("snapshot stream: unknown version %d", v)
	}
	n := binary.LittleEndian.Uint32(hdr[12:])
	if n > maxManifestBytes {
		return nil, corruptionf("snapshot stream: manifest of %d bytes", n)
	}
	buf := make([]byte, n+4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, streamErr("manifest", err)
	}
	body := buf[:n]
	if want, got := binary.LittleEndian.Uint32(buf[n:]), crc32.Checksum(body, castagnoli); want != got {
		return nil, corruptionf("snapshot stream: manifest checksum %08x, computed %08x", want, got)
	}
	m := &fsmpb.SnapshotManifest{}
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, corruptionf("snapshot stream: manifest: %v", err)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, fi := range m.Files {
		name := fi.GetName()
		if name == "" || name == "." || name == ".." || len(name) > maxSnapshotFileName ||
			filepath.Base(name) != name || strings.ContainsAny(name, "/\\\x00") || seen[name] {
			return nil, corruptionf("snapshot stream: bad or repeated file name %q", name)
		}
		seen[name] = true
	}
	return m, nil
}

// streamErr turns a short read into a corruption error (the stream ended
// inside the snapshot); other read errors are returned as they are.
func streamErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptionf("snapshot stream truncated in its %s", what)
	}
	return fmt.Errorf("fsm: reading snapshot %s: %w", what, err)
}
