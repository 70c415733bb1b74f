package fsm

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// testOptions returns small-engine options over fs.
func testOptions(fs vfs.FS) *Options {
	return &Options{Engine: &lsm.Options{FS: fs, MemTableSizeBytes: 256 << 10, CacheSizeBytes: 1 << 20}}
}

func openTest(t testing.TB, fs vfs.FS, dir string, o *Options) *FSM {
	t.Helper()
	if o == nil {
		o = testOptions(fs)
	}
	f, err := New(dir, o)
	if err != nil {
		t.Fatalf("New(%s): %v", dir, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func newTest(t testing.TB) *FSM {
	return openTest(t, vfs.NewMem(), "/fsm", nil)
}

// logGen makes raft entries with consecutive indexes.
type logGen struct {
	index, term uint64
	now         time.Time
}

func newLogGen() *logGen {
	return &logGen{term: 1, now: time.Unix(1_700_000_000, 0)}
}

func (g *logGen) next(typ raft.LogType, data []byte) *raft.Log {
	g.index++
	return &raft.Log{Index: g.index, Term: g.term, Type: typ, Data: data, AppendedAt: g.now}
}

func (g *logGen) cmd(t testing.TB, req proto.Message) *raft.Log {
	t.Helper()
	cmd, err := NewCommand(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return g.next(raft.LogCommand, data)
}

func (g *logGen) config() *raft.Log { return g.next(raft.LogConfiguration, []byte("conf")) }

func put(k, v string) *cairnpb.PutRequest {
	return &cairnpb.PutRequest{Key: []byte(k), Value: []byte(v)}
}

func sput(k, v, client string, seq uint64) *cairnpb.PutRequest {
	return &cairnpb.PutRequest{Key: []byte(k), Value: []byte(v), ClientId: client, Seq: seq}
}

// applyOne applies one entry and returns its result.
func applyOne(t testing.TB, f *FSM, l *raft.Log) interface{} {
	t.Helper()
	return f.ApplyBatch([]*raft.Log{l})[0]
}

func mustResp[T proto.Message](t testing.TB, r interface{}) T {
	t.Helper()
	if err, ok := r.(error); ok {
		t.Fatalf("result is an error: %v", err)
	}
	m, ok := r.(T)
	if !ok {
		t.Fatalf("result is %T", r)
	}
	return m
}

func checksum(t testing.TB, f *FSM) ([32]byte, uint64) {
	t.Helper()
	sum, applied, err := f.Checksum()
	if err != nil {
		t.Fatal(err)
	}
	if applied != f.AppliedIndex() {
		t.Fatalf("checksum view at index %d, AppliedIndex %d", applied, f.AppliedIndex())
	}
	return sum, applied
}

func getValue(t testing.TB, f *FSM, k string) *cairnpb.KeyValue {
	t.Helper()
	kv, err := f.Get([]byte(k))
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	return kv
}

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Write(p []byte) (int, error) {
	if s.closed || s.cancelled {
		return 0, errors.New("sink closed")
	}
	return s.Buffer.Write(p)
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed {
		t.Fatal("Persist did not close the sink")
	}
	return sink.Bytes()
}

func restoreBytes(f *FSM, b []byte) error {
	return f.Restore(io.NopCloser(bytes.NewReader(b)))
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
