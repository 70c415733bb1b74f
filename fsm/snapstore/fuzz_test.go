package snapstore

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// bufSink is a raft.SnapshotSink over a buffer.
type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "buf" }
func (*bufSink) Close() error  { return nil }
func (*bufSink) Cancel() error { return nil }

// memSnapshotStream returns the snapshot stream of a small state machine on
// an in-memory file system.
func memSnapshotStream(t testing.TB) []byte {
	t.Helper()
	fs := vfs.NewMem()
	f, err := fsm.New("/fsm", &fsm.Options{Engine: &lsm.Options{FS: fs, MemTableSizeBytes: 64 << 10, CacheSizeBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 50 {
		cmd, err := fsm.NewCommand(&cairnpb.PutRequest{Key: fmt.Appendf(nil, "k%03d", i), Value: bytes.Repeat([]byte{byte(i)}, 100)})
		if err != nil {
			t.Fatal(err)
		}
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}); res == nil {
			t.Fatal("no result")
		} else if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// FuzzReceive writes arbitrary snapshot streams into a sink, in chunks of
// a fuzzed size, as raft does with a leader's InstallSnapshot stream. A
// stream the sink refuses (Close fails) must leave no snapshot and no
// temporary directory behind; one it accepts must read back (Open) as a
// stream that receives cleanly with the same manifest.
func FuzzReceive(f *testing.F) {
	good := memSnapshotStream(f)
	f.Add(good, uint16(4096))
	f.Add(good[:len(good)-1], uint16(1))
	f.Add(append(bytes.Clone(good), 0), uint16(100))
	f.Add(good[:40], uint16(7))
	f.Add([]byte{}, uint16(0))
	fs := vfs.NewMem()
	s, err := Open("/snaps", &Options{FS: fs, Retain: 1})
	if err != nil {
		f.Fatal(err)
	}
	var index atomic.Uint64
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint16) {
		before, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		sink, err := s.Create(raft.SnapshotVersionMax, index.Add(1), 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		step := max(int(chunk), 1)
		var werr error
		for off := 0; off < len(stream) && werr == nil; off += step {
			_, werr = sink.Write(stream[off:min(off+step, len(stream))])
		}
		cerr := sink.Close()
		if werr != nil && cerr == nil {
			t.Fatalf("Write failed (%v) but Close committed the snapshot", werr)
		}
		if cerr != nil {
			after, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) || (len(after) > 0 && after[0].ID != before[0].ID) {
				t.Fatalf("refused stream (%v) changed the snapshots: %d before, %d after", cerr, len(before), len(after))
			}
			names, err := fs.List("/snaps")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasSuffix(n, tmpSuffix) {
					t.Fatalf("refused stream (%v) left %s behind", cerr, n)
				}
			}
			return
		}
		want, err := fsm.ReadSnapshotManifest(bytes.NewReader(stream))
		if err != nil {
			t.Fatalf("the sink accepted a stream whose manifest does not read: %v", err)
		}
		_, rc, err := s.Open(sink.ID())
		if err != nil {
			t.Fatalf("opening an accepted snapshot: %v", err)
		}
		dir := "/check-" + sink.ID()
		got, err := fsm.ReceiveSnapshot(fs, rc, dir)
		rc.Close()
		if rerr := fs.RemoveAll(dir); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatalf("an accepted snapshot does not read back: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("an accepted snapshot reads back as\n%v\nnot\n%v", got, want)
		}
	})
}
