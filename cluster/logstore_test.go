package cluster

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/types"
)

// fillLog appends entries [first, last] of valueSize bytes to s, in
// batches of 1024.
func fillLog(t testing.TB, s raft.LogStore, first, last uint64, valueSize int) {
	t.Helper()
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte(i)
	}
	batch := make([]*raft.Log, 0, 1024)
	for i := first; i <= last; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: value})
		if len(batch) == cap(batch) || i == last {
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

func checkRange(t testing.TB, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("log is [%d, %d], want [%d, %d]", f, l, first, last)
	}
	var e raft.Log
	if first > 1 {
		if err := s.GetLog(first-1, &e); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("entry %d: %v, want ErrLogNotFound", first-1, err)
		}
	}
	for _, i := range []uint64{first, (first + last) / 2, last} {
		if err := s.GetLog(i, &e); err != nil || e.Index != i {
			t.Fatalf("entry %d: %v (index %d)", i, err, e.Index)
		}
	}
}

// TestResolveLogStore: the default keeps raft-boltdb for a directory that
// has raft/raft.db and picks raft-wal for a new one; an explicit store
// that contradicts the directory is refused.
func TestResolveLogStore(t *testing.T) {
	newDir := func(files ...string) string {
		d := t.TempDir()
		for _, f := range files {
			p := filepath.Join(d, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	walMeta := filepath.Join(walDirName, "wal-meta.db")
	for _, tc := range []struct {
		kind  string
		files []string
		want  string // "" → error
	}{
		{"", nil, LogStoreWAL},
		{"", []string{boltFileName}, LogStoreBoltDB},
		{"", []string{walMeta}, LogStoreWAL},
		{LogStoreBoltDB, nil, LogStoreBoltDB},
		{LogStoreWAL, nil, LogStoreWAL},
		{LogStoreBoltDB, []string{boltFileName}, LogStoreBoltDB},
		{LogStoreWAL, []string{walMeta}, LogStoreWAL},
		{LogStoreWAL, []string{boltFileName}, ""},
		{LogStoreBoltDB, []string{walMeta}, ""},
		{"", []string{boltFileName, walMeta}, ""},
	} {
		got, why, err := resolveLogStore(tc.kind, newDir(tc.files...))
		if err == nil && why == "" {
			t.Errorf("kind %q with %v: no reason given for %q", tc.kind, tc.files, got)
		}
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("kind %q with %v: got %q, %v; want %q", tc.kind, tc.files, got, err, tc.want)
		}
	}
}

// TestUpgradeKeepsBoltDB: a data directory created with raft-boltdb
// itself (the default before raft-wal; cairn now opens raft/raft.db with
// its own cluster/boltlog) is reopened with the new default and keeps its
// raft-boltdb log: its raft state (term, log, configuration: the single
// node elects itself without a new bootstrap) and its data survive, and
// raft-boltdb still reads the file afterwards (a node can go back). An
// explicit raft-wal on it is refused before anything is created.
func TestUpgradeKeepsBoltDB(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "n1")
	cfg.BootstrapExpect = 1
	raftDir := filepath.Join(cfg.DataDir, raftDirName)
	if err := os.MkdirAll(raftDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rb, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, boltFileName)})
	if err != nil {
		t.Fatal(err)
	}
	n := tc.start(cfg, &Deps{LogStore: rb, StableStore: rb})
	tc.waitReady([]*Node{n}, 1)
	for i := range 50 {
		put(t, tc.kv(n), fmt.Sprintf("k%02d", i), "v")
	}
	term, lastIndex := raftTerm(t, n), n.raft.LastIndex()
	if err := n.kill(); err != nil {
		t.Fatal(err)
	}
	if err := rb.Close(); err != nil {
		t.Fatal(err)
	}

	cfg = tc.cfgs["n1"]
	cfg.BootstrapExpect = 0
	cfg.RaftLogStore = LogStoreWAL
	bad, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(); err == nil || !strings.Contains(err.Error(), "raft-boltdb") {
		bad.kill()
		t.Fatalf("starting with raft-wal on a raft-boltdb directory: %v, want an error naming raft-boltdb", err)
	}

	cfg.RaftLogStore = "" // the default
	n = tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	if _, err := os.Stat(filepath.Join(raftDir, walDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a raft-wal directory appeared in a raft-boltdb data directory: %v", err)
	}
	if got := raftTerm(t, n); got < term {
		t.Errorf("term %d after the upgrade, %d before", got, term)
	}
	if got := n.raft.LastIndex(); got <= lastIndex {
		t.Errorf("last index %d after the upgrade and a new leader's entry, %d before", got, lastIndex)
	}
	for i := range 50 {
		if r := get(t, tc.kv(n), fmt.Sprintf("k%02d", i), cairnpb.Consistency_LINEARIZABLE); string(r.GetKv().GetValue()) != "v" {
			t.Fatalf("k%02d = %q after the upgrade", i, r.GetKv().GetValue())
		}
	}
	put(t, tc.kv(n), "after", "v")
	lastIndex = n.raft.LastIndex()
	if err := n.kill(); err != nil {
		t.Fatal(err)
	}
	rb, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, boltFileName)})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if got, err := rb.LastIndex(); err != nil || got != lastIndex {
		t.Fatalf("raft-boltdb reads last index %d (%v) after the upgrade, the node had %d", got, err, lastIndex)
	}
	if got, err := rb.GetUint64([]byte("CurrentTerm")); err != nil || got < term {
		t.Fatalf("raft-boltdb reads term %d (%v) after the upgrade, want at least %d", got, err, term)
	}
}

// TestBoltLogCompaction: on a raft-boltdb-format log, raft's log
// compaction after each snapshot reaches the store through raft's log
// cache and is carried out by the appends that follow: the log's first
// index keeps up with the snapshots, and the log stays one range.
func TestBoltLogCompaction(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "n1")
	cfg.BootstrapExpect = 1
	cfg.RaftLogStore = LogStoreBoltDB
	cfg.SnapshotThreshold = 64
	cfg.SnapshotInterval = 10 * time.Millisecond
	cfg.TrailingLogs = 16
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	for i := range 400 {
		put(t, tc.kv(n), fmt.Sprintf("k%03d", i), "v")
	}
	var first uint64
	waitFor(t, 30*time.Second, "log compaction to delete most of the log", func() bool {
		put(t, tc.kv(n), "more", "v") // the trim rides on appends
		var err error
		first, err = n.logs.FirstIndex()
		return err == nil && first > 300
	})
	last, err := n.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var e raft.Log
	for i := first; i <= last; i++ {
		if err := n.logs.GetLog(i, &e); err != nil {
			t.Fatalf("log [%d, %d]: entry %d: %v", first, last, i, err)
		}
	}
}

func raftTerm(t testing.TB, n *Node) uint64 {
	t.Helper()
	term, err := strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return term
}

// TestWALTornTail checks what cairn relies on from raft-wal v0.4.0 on a
// crash: a last batch torn by the crash (its bytes garbled, or never
// written) is dropped on open, and every earlier batch is intact. That
// batch was never acknowledged to raft: raft-wal syncs before StoreLogs
// returns.
func TestWALTornTail(t *testing.T) {
	for _, tear := range []string{"garbled", "unwritten"} {
		t.Run(tear, func(t *testing.T) {
			dir := t.TempDir()
			ls, _, closer, err := openLogStore(LogStoreWAL, dir)
			if err != nil {
				t.Fatal(err)
			}
			fillLog(t, ls, 1, 100, 200)
			fillLog(t, ls, 101, 110, 200) // the batch the crash tears
			closer.Close()

			segs, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
			if err != nil || len(segs) != 1 {
				t.Fatalf("segments %v, %v", segs, err)
			}
			b, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			end := len(b) // the file is preallocated: find the written end
			for end > 0 && b[end-1] == 0 {
				end--
			}
			const batchBytes = 10 * 200
			switch tear {
			case "garbled": // one byte inside the last batch's entries
				b[end-batchBytes/2] ^= 0xff
			case "unwritten": // its last sectors never reached the disk
				clear(b[end-batchBytes/2 : end])
			}
			if err := os.WriteFile(segs[0], b, 0o644); err != nil {
				t.Fatal(err)
			}

			ls, _, closer, err = openLogStore(LogStoreWAL, dir)
			if err != nil {
				t.Fatalf("reopening after a torn tail: %v", err)
			}
			defer closer.Close()
			checkRange(t, ls, 1, 100)
			var e raft.Log
			for i := uint64(1); i <= 100; i++ {
				if err := ls.GetLog(i, &e); err != nil || len(e.Data) != 200 {
					t.Fatalf("entry %d: %v", i, err)
				}
			}
			fillLog(t, ls, 101, 101, 10) // appends continue where the log ends
			checkRange(t, ls, 1, 101)
		})
	}
}

// blockingFiler is a segment filer whose Delete waits for release.
type blockingFiler struct {
	types.SegmentFiler
	release chan struct{}
	mu      sync.Mutex
	deleted []uint64
}

func (f *blockingFiler) Delete(baseIndex, id uint64) error {
	<-f.release
	f.mu.Lock()
	f.deleted = append(f.deleted, id)
	f.mu.Unlock()
	return nil
}

// TestAsyncDeleteFiler: removing a segment file does not hold up the
// caller (raft-wal calls Delete with its write lock held); Close waits for
// the queued removals, and a Delete after Close runs inline.
func TestAsyncDeleteFiler(t *testing.T) {
	bf := &blockingFiler{release: make(chan struct{})}
	f := &asyncDeleteFiler{SegmentFiler: bf}
	for id := uint64(1); id <= 3; id++ {
		done := make(chan struct{})
		go func() { f.Delete(id*100, id); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Delete waited for the file removal")
		}
	}
	closed := make(chan struct{})
	go func() { f.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with removals pending")
	case <-time.After(50 * time.Millisecond): // only delays a passing run
	}
	close(bf.release)
	<-closed
	if !slices.Equal(bf.deleted, []uint64{1, 2, 3}) {
		t.Fatalf("deleted %v, want [1 2 3] in order", bf.deleted)
	}
	f.Delete(400, 4)
	if !slices.Equal(bf.deleted, []uint64{1, 2, 3, 4}) {
		t.Fatalf("a Delete after Close: deleted %v", bf.deleted)
	}
}

var rawWAL = flag.Bool("rawwal", false, "TestWALNoEntriesBelowFirstIndex: read raft-wal without the fence (it must fail)")

// TestWALNoEntriesBelowFirstIndex: after log compaction deletes a prefix
// of a raft-wal log, the deleted entries are gone for GetLog too, also
// while they are still in the open segment (raft-wal v0.4.0 serves them
// from there; run with -args -rawwal to see it fail).
func TestWALNoEntriesBelowFirstIndex(t *testing.T) {
	ls, _, closer, err := openLogStore(LogStoreWAL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, ok := ls.(raft.MonotonicLogStore); !ok {
		t.Fatal("the wrapped raft-wal store is not a raft.MonotonicLogStore")
	}
	if *rawWAL {
		ls = ls.(firstIndexStore).LogStore
	}
	var e raft.Log
	if err := ls.GetLog(1, &e); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 1 of an empty log: %v, want ErrLogNotFound", err)
	}
	fillLog(t, ls, 1, 100, 100) // one segment: all of it in the open one
	if err := ls.DeleteRange(1, 60); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 60; i++ {
		if err := ls.GetLog(i, &e); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("entry %d after deleting [1, 60]: %v (index %d), want ErrLogNotFound", i, err, e.Index)
		}
	}
	checkRange(t, ls, 61, 100)
}

// TestSecondNodeOnDataDirFails: a second node on a data directory in use
// fails at once with a clear error, with either log store. raft-wal opens
// its metadata database (bbolt) without a lock timeout, so a second opener
// would wait forever on the database's flock: the data directory's own
// lock (lock_unix.go), taken before any store opens, is what refuses it.
// (flock excludes a second open file description in the same process as
// it does another process.)
func TestSecondNodeOnDataDirFails(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(kind, func(t *testing.T) {
			tc := newTestCluster(t)
			cfg := testConfig(t, "n1")
			cfg.BootstrapExpect = 1
			cfg.RaftLogStore = kind
			tc.start(cfg, nil)
			second := testConfig(t, "n1")
			second.DataDir = cfg.DataDir
			second.RaftLogStore = kind
			n, err := New(second, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- n.Start() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "is locked") {
					n.kill()
					t.Fatalf("a second node on %s: %v, want an error saying it is locked", cfg.DataDir, err)
				}
				t.Log(err)
			case <-time.After(60 * time.Second):
				t.Fatal("a second node on the data directory hangs")
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLogStoreChoiceLogged: a node logs once at start which raft log
// store it opened and why.
func TestLogStoreChoiceLogged(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "n1")
	cfg.BootstrapExpect = 1
	buf := &lockedBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(buf, nil))
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	if err := n.kill(); err != nil {
		t.Fatal(err)
	}
	want := `msg="raft log store" node=n1 store=wal why="default for a new data directory"`
	if got := buf.String(); strings.Count(got, `msg="raft log store"`) != 1 || !strings.Contains(got, want) {
		t.Fatalf("log does not say once %s:\n%s", want, got)
	}
	buf = &lockedBuffer{}
	cfg = tc.cfgs["n1"]
	cfg.BootstrapExpect = 0
	cfg.Logger = slog.New(slog.NewTextHandler(buf, nil))
	n = tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	want = `msg="raft log store" node=n1 store=wal why="default: the data directory has a raft-wal log (wal/)"`
	if got := buf.String(); !strings.Contains(got, want) {
		t.Fatalf("log after a restart does not say %s:\n%s", want, got)
	}
}

// TestWALSuffixTruncationReopens: raft removes a conflicting log suffix
// (DeleteRange up to the last index) when a new leader's log wins. raft-wal
// v0.4.0 then recorded the open tail segment as sealed without writing its
// index, and the next open failed with "sealed segment has no index block"
// (hashicorp/raft-wal#31): the node could never start again. Found by the
// jepsen harness (jepsen/README.md, track record #1).
func TestWALSuffixTruncationReopens(t *testing.T) {
	for _, tc := range []struct {
		name           string
		fill, keepUpTo uint64
	}{
		{"within-tail", 100, 90},
		{"whole-tail-batch", 100, 99},
		{"after-reopen", 100, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ls, _, closer, err := openLogStore(LogStoreWAL, dir)
			if err != nil {
				t.Fatal(err)
			}
			fillLog(t, ls, 1, tc.fill, 100)
			if tc.name == "after-reopen" { // truncate a tail recovered at open
				closer.Close()
				if ls, _, closer, err = openLogStore(LogStoreWAL, dir); err != nil {
					t.Fatal(err)
				}
			}
			if err := ls.DeleteRange(tc.keepUpTo+1, tc.fill); err != nil {
				t.Fatal(err)
			}
			checkRange(t, ls, 1, tc.keepUpTo)
			fillLog(t, ls, tc.keepUpTo+1, tc.keepUpTo+5, 50) // the new leader's entries
			closer.Close()

			ls, _, closer, err = openLogStore(LogStoreWAL, dir)
			if err != nil {
				t.Fatalf("reopening after a suffix truncation: %v", err)
			}
			defer closer.Close()
			checkRange(t, ls, 1, tc.keepUpTo+5)
			var e raft.Log
			for i := uint64(1); i <= tc.keepUpTo+5; i++ {
				if err := ls.GetLog(i, &e); err != nil || e.Index != i {
					t.Fatalf("entry %d: %v", i, err)
				}
				want := 100
				if i > tc.keepUpTo {
					want = 50
				}
				if len(e.Data) != want {
					t.Fatalf("entry %d holds %d bytes, want %d (a truncated entry came back)", i, len(e.Data), want)
				}
			}
		})
	}
}
