package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// filledFSM returns an FSM that applied a random log (with flushes, so the
// engine holds several tables), the log, and the index split at.
func filledFSM(t testing.TB, fs vfs.FS, dir string, n int) (*FSM, []*raft.Log) {
	t.Helper()
	logs, _ := genLog(t, newRand(42), n)
	f := openTest(t, fs, dir, nil)
	for i := 0; i < n; i += 100 {
		f.ApplyBatch(logs[i:min(n, i+100)])
		f.mu.RLock()
		err := f.mu.db.Flush()
		f.mu.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	return f, logs
}

func TestSnapshotRestore(t *testing.T) {
	fs := vfs.NewMem()
	src, logs := filledFSM(t, fs, "/src", 600)
	snap := snapshotBytes(t, src)
	wantSum, wantApplied := checksum(t, src)

	// Into a fresh FSM, and into one with other contents.
	fresh := openTest(t, fs, "/fresh", nil)
	other := openTest(t, fs, "/other", nil)
	g := newLogGen()
	for range 50 {
		applyOne(t, other, g.cmd(t, sput("zz", "x", "someone", g.index+1)))
	}
	for _, f := range []*FSM{fresh, other} {
		if err := restoreBytes(f, snap); err != nil {
			t.Fatal(err)
		}
		if sum, applied := checksum(t, f); sum != wantSum || applied != wantApplied {
			t.Fatalf("restored: applied %d (want %d), same checksum %v", applied, wantApplied, sum == wantSum)
		}
		// The restored FSM continues exactly like the source, sessions
		// included.
		more, _ := genLog(t, newRand(43), 200)
		for _, l := range more {
			l.Index += uint64(len(logs))
		}
		_ = src
		srcCopy := openTest(t, fs, fmt.Sprintf("/copy-%p", f), nil)
		if err := restoreBytes(srcCopy, snap); err != nil {
			t.Fatal(err)
		}
		r1, r2 := f.ApplyBatch(more), srcCopy.ApplyBatch(more)
		for i := range r1 {
			if !sameResult(r1[i], r2[i]) {
				t.Fatalf("entry %d after restore: %v vs %v", i, r1[i], r2[i])
			}
		}
		if mustSum(t, f) != mustSum(t, srcCopy) {
			t.Fatal("states diverge after restore")
		}
		// Reopening keeps the restored state.
		f.Close()
	}
	f := openTest(t, fs, "/fresh", nil)
	if f.AppliedIndex() != wantApplied+200 {
		t.Fatalf("applied after reopen %d", f.AppliedIndex())
	}
	assertNoLeftovers(t, fs, "/fresh")
	assertNoLeftovers(t, fs, "/src")
}

// assertNoLeftovers checks that only the engine remains in an FSM's dir.
func assertNoLeftovers(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n != engineDirName && n != checkpointsDirName {
			t.Errorf("leftover %s/%s", dir, n)
		}
	}
	if cps, err := fs.List(dir + "/" + checkpointsDirName); err == nil && len(cps) > 0 {
		t.Errorf("leftover checkpoints %v", cps)
	}
}

func TestSnapshotOnOSFileSystem(t *testing.T) {
	dir := t.TempDir()
	src, _ := filledFSM(t, vfs.Default, dir+"/src", 300)
	snap := snapshotBytes(t, src)
	dst := openTest(t, vfs.Default, dir+"/dst", nil)
	if err := restoreBytes(dst, snap); err != nil {
		t.Fatal(err)
	}
	if mustSum(t, dst) != mustSum(t, src) {
		t.Fatal("restored state differs")
	}
	if _, err := os.Stat(dir + "/dst/" + engineOldDirName); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old engine left behind: %v", err)
	}
}

// TestRestoreCorruptStream damages a snapshot stream in every region and
// checks that Restore fails with a corruption error and leaves the FSM as
// it was.
func TestRestoreCorruptStream(t *testing.T) {
	fs := vfs.NewMem()
	src, _ := filledFSM(t, fs, "/src", 300)
	good := snapshotBytes(t, src)
	m, err := ReadSnapshotManifest(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	headerLen := snapshotHeaderLen + int(binary.LittleEndian.Uint32(good[12:])) + 4

	dst := openTest(t, fs, "/dst", nil)
	g := newLogGen()
	applyOne(t, dst, g.cmd(t, put("mine", "1")))
	wantSum, wantApplied := checksum(t, dst)

	type damage struct {
		name string
		fn   func([]byte) []byte
	}
	flip := func(off int) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= 0x40; return b }
	}
	cases := []damage{
		{"magic", flip(0)},
		{"version", flip(8)},
		{"manifest length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<30); return b }},
		{"manifest byte", flip(snapshotHeaderLen + 3)},
		{"manifest crc", flip(headerLen - 1)},
		{"empty stream", func(b []byte) []byte { return nil }},
		{"truncated header", func(b []byte) []byte { return b[:10] }},
		{"truncated manifest", func(b []byte) []byte { return b[:headerLen-2] }},
		{"truncated file", func(b []byte) []byte { return b[:len(b)-1] }},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }},
	}
	// One flipped byte inside each file.
	off := headerLen
	for _, fi := range m.Files {
		if fi.Size > 0 {
			cases = append(cases, damage{"file " + fi.Name, flip(off + int(fi.Size)/2)})
		}
		off += int(fi.Size)
	}
	// A manifest that is well formed but lies (checksums are right, the
	// applied index is not), and one with a hostile file name.
	rewrite := func(edit func(*fsmpb.SnapshotManifest)) func([]byte) []byte {
		return func(b []byte) []byte {
			m2 := proto.Clone(m).(*fsmpb.SnapshotManifest)
			edit(m2)
			body, _ := proto.Marshal(m2)
			out := append([]byte(nil), b[:snapshotHeaderLen]...)
			binary.LittleEndian.PutUint32(out[12:], uint32(len(body)))
			out = append(out, body...)
			out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(body, castagnoli))
			return append(out, b[headerLen:]...)
		}
	}
	cases = append(cases,
		damage{"wrong applied index", rewrite(func(m *fsmpb.SnapshotManifest) { m.AppliedIndex++ })},
		damage{"path in name", rewrite(func(m *fsmpb.SnapshotManifest) { m.Files[0].Name = "../evil" })},
		damage{"repeated name", rewrite(func(m *fsmpb.SnapshotManifest) { m.Files[1].Name = m.Files[0].Name })},
		damage{"missing file", rewrite(func(m *fsmpb.SnapshotManifest) { m.Files = m.Files[1:] })},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.fn(bytes.Clone(good))
			err := restoreBytes(dst, b)
			if err == nil {
				t.Fatal("Restore accepted a damaged stream")
			}
			if !IsCorruption(err) {
				t.Fatalf("error %v is not a corruption error", err)
			}
			if sum, applied := checksum(t, dst); sum != wantSum || applied != wantApplied {
				t.Fatal("a failed Restore changed the state")
			}
			if kv := getValue(t, dst, "mine"); kv == nil {
				t.Fatal("state lost")
			}
			assertNoLeftovers(t, fs, "/dst")
		})
	}
	// And the undamaged stream still restores.
	if err := restoreBytes(dst, good); err != nil {
		t.Fatal(err)
	}
	if mustSum(t, dst) != mustSum(t, src) {
		t.Fatal("state differs after a good restore")
	}
}

// TestRestoreInterruptedSwap simulates a crash between the two renames of a
// restore and after both.
func TestRestoreInterruptedSwap(t *testing.T) {
	fs := vfs.NewMem()
	f, _ := filledFSM(t, fs, "/fsm", 200)
	sum, applied := checksum(t, f)
	f.Close()

	// Crash after renaming engine aside: New puts it back.
	if err := fs.Rename("/fsm/engine", "/fsm/engine.old"); err != nil {
		t.Fatal(err)
	}
	fs.MkdirAll("/fsm/restore-7", 0o755)
	f = openTest(t, fs, "/fsm", nil)
	if s, a := checksum(t, f); s != sum || a != applied {
		t.Fatal("state not recovered after an interrupted restore")
	}
	assertNoLeftovers(t, fs, "/fsm")
	f.Close()

	// Crash after both renames: the stale engine.old is removed.
	fs.MkdirAll("/fsm/engine.old", 0o755)
	f = openTest(t, fs, "/fsm", nil)
	if s, _ := checksum(t, f); s != sum {
		t.Fatal("state changed")
	}
	assertNoLeftovers(t, fs, "/fsm")
}

// TestReadsDuringRestore reads concurrently with restores: a read sees the
// state before or after, never an error. Run it with -race.
func TestReadsDuringRestore(t *testing.T) {
	fs := vfs.NewMem()
	a := openTest(t, fs, "/a", nil)
	b := openTest(t, fs, "/b", nil)
	ga, gb := newLogGen(), newLogGen()
	applyOne(t, a, ga.cmd(t, put("k", "from-a")))
	applyOne(t, b, gb.cmd(t, put("k", "from-b")))
	snaps := [][]byte{snapshotBytes(t, a), snapshotBytes(t, b)}

	f := openTest(t, fs, "/f", nil)
	if err := restoreBytes(f, snaps[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errc := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				kv, err := f.Get([]byte("k"))
				if err == nil && kv == nil {
					err = errors.New("key missing")
				}
				if err == nil {
					if v := string(kv.Value); v != "from-a" && v != "from-b" {
						err = fmt.Errorf("value %q", v)
					}
				}
				if err == nil {
					_, err = f.Scan(&cairnpb.ScanRequest{})
				}
				if err != nil {
					errc <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 10 {
		if err := restoreBytes(f, snaps[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d reads during 10 restores", reads.Load())
	// Reads after Close fail cleanly.
	f.Close()
	if _, err := f.Get([]byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := restoreBytes(f, snaps[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restore after Close: %v", err)
	}
}

func TestCheckpointFiles(t *testing.T) {
	fs := vfs.NewMem()
	f, _ := filledFSM(t, fs, "/fsm", 300)
	c, err := f.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if c.AppliedIndex != f.AppliedIndex() {
		t.Fatalf("checkpoint at %d, applied %d", c.AppliedIndex, f.AppliedIndex())
	}
	files, err := c.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range files {
		r, err := c.Open(fi.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(b)) != fi.Size || crc32.Checksum(b, castagnoli) != fi.Crc32C {
			t.Fatalf("file %s: size/crc mismatch", fi.Name)
		}
	}
	if _, err := c.Open("../engine/CURRENT"); err == nil {
		t.Fatal("Open accepted a path")
	}
	// The checkpoint directory opens as an engine holding the state.
	db, err := lsm.Open(c.Dir(), &lsm.Options{FS: fs, ErrorIfNotExists: true})
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := loadState(db, false)
	db.Close()
	if err != nil || st.index != c.AppliedIndex {
		t.Fatalf("checkpoint engine: applied %d, %v", st.index, err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Files after Release: %v", err)
	}
	assertNoLeftovers(t, fs, "/fsm")
}

func TestSnapshotPersistCancelsOnError(t *testing.T) {
	f, _ := filledFSM(t, vfs.NewMem(), "/fsm", 100)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &failingSink{limit: 100}
	if err := snap.Persist(sink); err == nil || !sink.cancelled {
		t.Fatalf("Persist over a failing sink: %v, cancelled %v", err, sink.cancelled)
	}
}

type failingSink struct {
	memSink
	limit int
}

func (s *failingSink) Write(p []byte) (int, error) {
	if s.Len()+len(p) > s.limit {
		return 0, errors.New("disk full")
	}
	return s.memSink.Write(p)
}

func FuzzReadSnapshotManifest(f *testing.F) {
	src, _ := filledFSM(f, vfs.NewMem(), "/fsm", 50)
	good := snapshotBytes(f, src)
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte(snapshotMagic))
	f.Add([]byte(strings.Repeat("\x00", 40)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadSnapshotManifest(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, fi := range m.Files {
			if strings.ContainsAny(fi.Name, "/\\") || fi.Name == "" || fi.Name == ".." {
				t.Fatalf("accepted file name %q", fi.Name)
			}
		}
	})
}
