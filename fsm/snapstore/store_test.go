package snapstore

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
)

// testFSM is an FSM on the OS file system and the raft index it is at.
type testFSM struct {
	*fsm.FSM
	dir   string
	index uint64
}

func fsmOptions(src fsm.CheckpointSource) *fsm.Options {
	return &fsm.Options{
		Engine:      &lsm.Options{MemTableSizeBytes: 256 << 10, CacheSizeBytes: 1 << 20},
		Checkpoints: src,
	}
}

func openFSM(t testing.TB, dir string, src fsm.CheckpointSource) *testFSM {
	t.Helper()
	f, err := fsm.New(dir, fsmOptions(src))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &testFSM{FSM: f, dir: dir, index: f.AppliedIndex()}
}

// put applies n Puts of key prefix-i in one batch.
func (f *testFSM) put(t testing.TB, prefix string, n, valueSize int) {
	t.Helper()
	var logs []*raft.Log
	for i := 0; i < n; i++ {
		cmd, err := fsm.NewCommand(&cairnpb.PutRequest{
			Key:   []byte(fmt.Sprintf("%s-%06d", prefix, i)),
			Value: bytes.Repeat([]byte{byte(i)}, valueSize),
		})
		if err != nil {
			t.Fatal(err)
		}
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		f.index++
		logs = append(logs, &raft.Log{Index: f.index, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(1_700_000_000, 0)})
	}
	for i, r := range f.ApplyBatch(logs) {
		if err, ok := r.(error); ok {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
}

func checksum(t testing.TB, f *fsm.FSM) [32]byte {
	t.Helper()
	sum, _, err := f.Checksum()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// snapshot takes a snapshot of f into s as raft does, and returns its ID.
func snapshot(t testing.TB, s raft.SnapshotStore, f *testFSM) string {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink, err := s.Create(raft.SnapshotVersionMax, f.index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil { // raft closes it again
		t.Fatal(err)
	}
	return sink.ID()
}

// transfer copies snapshot id from one store to another as a follower
// receives it from the leader: Create, then the stream written into the sink.
func transfer(t testing.TB, from, to raft.SnapshotStore, id string) string {
	t.Helper()
	meta, rc, err := from.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sink, err := to.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		sink.Cancel()
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

// countingReader hides the store's reader type, as raft's wrapper does.
type countingReader struct {
	io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// restore restores f from snapshot id as raft does, returning the bytes
// of the stream the FSM read.
func restore(t testing.TB, s raft.SnapshotStore, f *testFSM, id string) int64 {
	t.Helper()
	_, rc, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{ReadCloser: rc}
	if err := f.Restore(cr); err != nil {
		t.Fatal(err)
	}
	f.index = f.AppliedIndex()
	return cr.n
}

// verifySnapshot opens snapshot id of s and receives its stream into dir,
// which checks every size and checksum; it returns the receive's error.
func verifySnapshot(t testing.TB, s raft.SnapshotStore, id, dir string) error {
	t.Helper()
	_, rc, err := s.Open(id)
	if err != nil {
		t.Fatalf("opening snapshot %s: %v", id, err)
	}
	defer rc.Close()
	_, err = fsm.ReceiveSnapshot(vfs.Default, rc, dir)
	return err
}

func openStore(t testing.TB, dir string, retain int) *Store {
	t.Helper()
	s, err := Open(dir, &Options{Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameInode(t testing.TB, a, b string) bool {
	t.Helper()
	ai, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(ai, bi)
}

func tables(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSnapshotIsTheCheckpoint: a local snapshot's tables are the engine's
// own files (hard links), its stream is a valid snapshot stream, and it
// records the applied index without reading any data.
func TestSnapshotIsTheCheckpoint(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	f.put(t, "a", 2000, 200)
	s := openStore(t, filepath.Join(base, "snaps"), 2)
	id := snapshot(t, s, f)

	metas, err := s.List()
	if err != nil || len(metas) != 1 || metas[0].ID != id || metas[0].Index != f.index {
		t.Fatalf("List = %v, %v; want one snapshot %s at %d", metas, err, id, f.index)
	}
	if got, err := s.AppliedIndex(id); err != nil || got != f.index {
		t.Fatalf("AppliedIndex = %d, %v; want %d", got, err, f.index)
	}
	snapTables := tables(t, filepath.Join(s.Dir(), id, engineDirName))
	if len(snapTables) == 0 {
		t.Fatal("snapshot has no tables")
	}
	for _, p := range snapTables {
		if !sameInode(t, p, filepath.Join(f.dir, "engine", filepath.Base(p))) {
			t.Errorf("%s is not a hard link to the engine's table", p)
		}
	}
	// The stream is what the FSM's streaming path writes.
	meta, rc, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != meta.Size {
		t.Fatalf("stream is %d bytes, Open's meta says %d", len(got), meta.Size)
	}
	if metas, _ := s.List(); metas[0].Size != meta.Size {
		t.Fatalf("after Open, List's size is %d, Open's %d", metas[0].Size, meta.Size)
	}
	// It verifies as a stream, and its tables' checksums are those
	// Checkpoint.Files computes by reading them.
	m, err := fsm.ReceiveSnapshot(vfs.Default, bytes.NewReader(got), filepath.Join(base, "verify"))
	if err != nil {
		t.Fatalf("the stream does not verify: %v", err)
	}
	cp, err := f.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Release()
	files, err := cp.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{}
	for _, fi := range files {
		want[fi.Name] = fi.Crc32C
	}
	for _, fi := range m.Files {
		if fsm.Immutable(fi.Name) && want[fi.Name] != fi.Crc32C {
			t.Errorf("%s: crc %08x, want %08x", fi.Name, fi.Crc32C, want[fi.Name])
		}
	}
}

// TestTransferAndRestoreByLinks: a snapshot sent to a follower lands as a
// checkpoint directory; the FSM restores it by hard links, reading only
// the stream's head; the state is the leader's.
func TestTransferAndRestoreByLinks(t *testing.T) {
	base := t.TempDir()
	leader := openFSM(t, filepath.Join(base, "leader"), nil)
	leader.put(t, "a", 3000, 300)
	ls := openStore(t, filepath.Join(base, "leader-snaps"), 2)
	id := snapshot(t, ls, leader)

	fs := openStore(t, filepath.Join(base, "follower-snaps"), 2)
	follower := openFSM(t, filepath.Join(base, "follower"), fs)
	follower.put(t, "old", 10, 10)
	fid := transfer(t, ls, fs, id)
	read := restore(t, fs, follower, fid)

	if checksum(t, follower.FSM) != checksum(t, leader.FSM) || follower.AppliedIndex() != leader.index {
		t.Fatal("follower state differs from the leader's after restore")
	}
	metas, _ := fs.List()
	if read >= metas[0].Size/2 {
		t.Errorf("restore read %d bytes of a %d-byte stream; want only its head", read, metas[0].Size)
	}
	for _, p := range tables(t, filepath.Join(fs.Dir(), fid, engineDirName)) {
		if !sameInode(t, p, filepath.Join(follower.dir, "engine", filepath.Base(p))) {
			t.Errorf("restored %s is not a hard link to the snapshot's", filepath.Base(p))
		}
	}
	// The follower keeps working, and the snapshot is untouched by it.
	follower.index = leader.index
	follower.put(t, "b", 2000, 300)
	if cp, err := follower.Checkpoint(); err != nil { // flushes
		t.Fatal(err)
	} else {
		cp.Release()
	}
	if err := verifySnapshot(t, fs, fid, filepath.Join(base, "check")); err != nil {
		t.Fatalf("the follower's snapshot no longer verifies after the engine moved on: %v", err)
	}
	// A store that does not hold the snapshot: the stream is copied.
	other := openFSM(t, filepath.Join(base, "other"), openStore(t, filepath.Join(base, "other-snaps"), 1))
	if read := restore(t, fs, other, fid); read != metas[0].Size {
		t.Errorf("restore without the checkpoint read %d bytes, want the whole %d", read, metas[0].Size)
	}
	if checksum(t, other.FSM) != checksum(t, leader.FSM) {
		t.Fatal("state differs after a streamed restore")
	}
}

// TestRetainSharesFiles: retained snapshots share unchanged tables, old
// ones are reaped, and checksums of shared files are reused correctly.
func TestRetainSharesFiles(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	s := openStore(t, filepath.Join(base, "snaps"), 2)
	var ids []string
	for i := 0; i < 4; i++ {
		f.put(t, fmt.Sprintf("r%d", i), 500, 100)
		ids = append(ids, snapshot(t, s, f))
	}
	metas, err := s.List()
	if err != nil || len(metas) != 2 || metas[0].ID != ids[3] || metas[1].ID != ids[2] {
		t.Fatalf("List = %v, %v; want %s, %s", metas, err, ids[3], ids[2])
	}
	names, _ := os.ReadDir(s.Dir())
	if len(names) != 2 {
		t.Fatalf("store directory holds %d entries, want 2", len(names))
	}
	shared := 0
	for _, p := range tables(t, filepath.Join(s.Dir(), ids[2], engineDirName)) {
		q := filepath.Join(s.Dir(), ids[3], engineDirName, filepath.Base(p))
		if _, err := os.Stat(q); err == nil {
			if !sameInode(t, p, q) {
				t.Errorf("%s is in both snapshots but not shared", filepath.Base(p))
			}
			shared++
		}
	}
	if shared == 0 {
		t.Error("the two newest snapshots share no table")
	}
	for _, id := range ids[2:] {
		if err := verifySnapshot(t, s, id, filepath.Join(base, "verify-"+id)); err != nil {
			t.Fatalf("snapshot %s does not verify: %v", id, err)
		}
	}
}

// TestReceiveRejectsCorruption: a damaged stream is refused at Close and
// leaves nothing behind.
func TestReceiveRejectsCorruption(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	f.put(t, "a", 500, 100)
	ls := openStore(t, filepath.Join(base, "a"), 2)
	id := snapshot(t, ls, f)
	_, rc, _ := ls.Open(id)
	stream, _ := io.ReadAll(rc)
	rc.Close()
	for name, b := range map[string][]byte{
		"flipped":   func() []byte { c := bytes.Clone(stream); c[len(c)-10] ^= 1; return c }(),
		"truncated": stream[:len(stream)-1],
		"trailing":  append(bytes.Clone(stream), 0),
		"empty":     nil,
	} {
		s := openStore(t, filepath.Join(base, name), 2)
		sink, err := s.Create(1, 10, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, werr := sink.Write(b)
		if err := sink.Close(); err == nil {
			t.Errorf("%s: Close = nil (write: %v)", name, werr)
		}
		if metas, _ := s.List(); len(metas) != 0 {
			t.Errorf("%s: List = %v", name, metas)
		}
		if ents, _ := os.ReadDir(s.Dir()); len(ents) != 0 {
			t.Errorf("%s: store directory holds %v", name, ents)
		}
	}
	// Cancel mid-stream.
	s := openStore(t, filepath.Join(base, "cancel"), 2)
	sink, _ := s.Create(1, 10, 1, raft.Configuration{}, 1, nil)
	sink.Write(stream[:len(stream)/2])
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.Dir()); len(ents) != 0 {
		t.Errorf("cancel: store directory holds %v", ents)
	}
}

// TestOpenReapsIncomplete: Open removes what a crash left half made, and
// List never shows it.
func TestOpenReapsIncomplete(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 2)
	sink, _ := s.Create(1, 5, 1, raft.Configuration{}, 1, nil)
	sink.Write([]byte("CAIRNSNP"))
	if metas, _ := s.List(); len(metas) != 0 {
		t.Fatalf("List shows a snapshot being made: %v", metas)
	}
	s2 := openStore(t, dir, 2)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			t.Errorf("Open left %s", e.Name())
		}
	}
	if metas, _ := s2.List(); len(metas) != 0 {
		t.Fatalf("List = %v", metas)
	}
	sink.Cancel()
}

// TestManifestMatchesStream: Manifest reads the head only and agrees with
// the stream.
func TestManifestMatchesStream(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	f.put(t, "a", 100, 10)
	s := openStore(t, filepath.Join(base, "s"), 1)
	id := snapshot(t, s, f)
	_, rc, _ := s.Open(id) // completes the checksums
	defer rc.Close()
	m, err := s.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := fsm.ReadSnapshotManifest(rc)
	if err != nil {
		t.Fatal(err)
	}
	if m.AppliedIndex != f.index || len(m.Files) != len(m2.Files) {
		t.Fatalf("Manifest %v, stream %v", m, m2)
	}
	if dir, ok := s.FindCheckpoint(m2); !ok || dir != filepath.Join(s.Dir(), id, engineDirName) {
		t.Fatalf("FindCheckpoint = %q, %v", dir, ok)
	}
	if _, ok := s.FindCheckpoint(&fsmpb.SnapshotManifest{AppliedIndex: m.AppliedIndex, AppliedTerm: m.AppliedTerm}); ok {
		t.Fatal("FindCheckpoint matched a different manifest")
	}
}

// countingFS counts the bytes read through files it opened.
type countingFS struct {
	vfs.FS
	read *int64
}

func (c countingFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.read}, nil
}

type countingFile struct {
	vfs.File
	read *int64
}

func (c countingFile) Read(p []byte) (int, error) {
	n, err := c.File.Read(p)
	*c.read += int64(n)
	return n, err
}

// TestSnapshotReadsNoData: taking a snapshot reads none of the engine's
// files (their checksums are computed when the snapshot is first opened,
// and only for files the previous snapshot did not have); the first Open
// sums the new files once.
func TestSnapshotReadsNoData(t *testing.T) {
	base := t.TempDir()
	f := openFSM(t, filepath.Join(base, "fsm"), nil)
	var read int64
	s, err := Open(filepath.Join(base, "snaps"), &Options{FS: countingFS{vfs.Default, &read}})
	if err != nil {
		t.Fatal(err)
	}
	f.put(t, "a", 4000, 250) // ~1 MB
	id := snapshot(t, s, f)
	if read > 64<<10 {
		t.Fatalf("taking a snapshot of ~1 MB read %d bytes", read)
	}
	meta, rc, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	summed := read
	if summed < meta.Size/2 {
		t.Fatalf("the first Open read %d bytes of a %d-byte snapshot: checksums not computed", summed, meta.Size)
	}
	// A second snapshot after a small write: only the new table is read
	// when it is opened.
	f.put(t, "b", 10, 100)
	id2 := snapshot(t, s, f)
	read = 0
	meta2, rc, err := s.Open(id2)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if read > meta2.Size/4 {
		t.Fatalf("opening the second snapshot read %d bytes of %d: shared files summed again", read, meta2.Size)
	}
	// Both verify.
	for _, id := range []string{id, id2} {
		if err := verifySnapshot(t, s, id, filepath.Join(base, "verify-"+id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}
