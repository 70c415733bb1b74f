package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// userState hashes every user key with its value and versions, as Scan
// serves them: what a command that "changes nothing" must leave alone.
func userState(t testing.TB, f *FSM) [32]byte {
	t.Helper()
	h := sha256.New()
	req := &cairnpb.ScanRequest{Start: []byte{0}, Limit: cairnpb.MaxScanLimit}
	for {
		resp, err := f.Scan(req)
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for _, kv := range resp.GetKvs() {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(kv)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
		if resp.GetNextPageToken() == nil {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// commandSeeds are raft log payloads of every kind of command, valid and
// not.
func commandSeeds(t testing.TB) [][]byte {
	reqs := []proto.Message{
		put("a", "1"),
		sput("b", "2", "c1", 1),
		sput("b", "3", "c1", 1), // a duplicate
		&cairnpb.DeleteRequest{Key: []byte("a")},
		&cairnpb.DeleteRangeRequest{Prefix: []byte("b")},
		&cairnpb.DeleteRangeRequest{Start: []byte("a"), End: []byte("z")},
		&cairnpb.TxnRequest{
			Compare: []*cairnpb.Compare{{Key: []byte("a"), Target: cairnpb.Compare_VALUE, Result: cairnpb.Compare_EQUAL,
				TargetUnion: &cairnpb.Compare_Value{Value: []byte("1")}}},
			Success: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: put("t", "s")}},
				{Request: &cairnpb.RequestOp_DeleteRange{DeleteRange: &cairnpb.DeleteRangeRequest{Prefix: []byte("x")}}}},
			Failure: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: []byte("a")}}}},
		},
		&cairnpb.PutRequest{Key: nil},                                     // empty key
		&cairnpb.PutRequest{Key: []byte("k"), ClientId: "c2", Seq: 0},     // a session without a seq
		&cairnpb.DeleteRangeRequest{Start: []byte("z"), End: []byte("a")}, // start > end
	}
	var out [][]byte
	for _, r := range reqs {
		cmd, err := NewCommand(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return append(out, nil, []byte{0xff}, []byte("\x0a\x05hello"), bytes.Repeat([]byte{0x0a, 0x80}, 20))
}

// FuzzApplyCommand applies arbitrary raft log payloads, as a malicious or
// buggy leader could replicate them, to two state machines. Every payload
// must yield a result (a response of its command's type, or an error
// wrapping ErrInvalidArgument or ErrResultUnavailable), never halt the
// state machine or panic; a payload that does not decode, and a command
// Validate refuses that carries no session, must change no user key; and
// both state machines must stay identical (determinism).
func FuzzApplyCommand(f *testing.F) {
	for _, b := range commandSeeds(f) {
		f.Add(b)
	}
	a, b := newTest(f), newTest(f)
	g := newLogGen()
	f.Fuzz(func(t *testing.T, data []byte) {
		before := userState(t, a)
		// A duplicate (a client_id and seq already applied) gets the
		// first write's result whatever it carries now.
		dup := false
		if cmd, err := Decode(data); err == nil && cmd.GetClientId() != "" {
			if s := a.sessions.get(cmd.GetClientId()); s != nil && cmd.GetSeq() <= s.seq {
				dup = true
			}
		}
		l := g.next(raft.LogCommand, data)
		l.AppendedAt = l.AppendedAt.Add(time.Duration(l.Index) * time.Millisecond)
		resA := a.ApplyBatch([]*raft.Log{l})[0]
		resB := b.ApplyBatch([]*raft.Log{l})[0]
		cmd, decErr := Decode(data)
		switch r := resA.(type) {
		case nil:
			t.Fatalf("no result for a command entry")
		case error:
			if errors.Is(r, ErrHalted) || !(errors.Is(r, ErrInvalidArgument) || errors.Is(r, ErrResultUnavailable)) {
				t.Fatalf("result %v: want an ErrInvalidArgument or ErrResultUnavailable", r)
			}
		case *cairnpb.PutResponse, *cairnpb.DeleteResponse, *cairnpb.DeleteRangeResponse, *cairnpb.TxnResponse:
			if decErr != nil {
				t.Fatalf("undecodable payload (%v) applied as %T", decErr, r)
			}
			if err := a.Validate(cmd); err != nil && !dup {
				t.Fatalf("Validate refuses (%v) a command the state machine applied", err)
			}
		default:
			t.Fatalf("result of type %T", r)
		}
		if decErr != nil || (cmd.GetClientId() == "" && a.Validate(cmd) != nil) {
			if userState(t, a) != before {
				t.Fatalf("a refused command (%v) changed the state", resA)
			}
		}
		if ea, eb := errString(resA), errString(resB); ea != eb {
			t.Fatalf("replicas disagree: %q vs %q", ea, eb)
		}
		sa, ia, errA := a.Checksum()
		sb, ib, errB := b.Checksum()
		if errA != nil || errB != nil || sa != sb || ia != ib || ia != l.Index {
			t.Fatalf("replicas diverged at %d: %x@%d (%v) vs %x@%d (%v)", l.Index, sa, ia, errA, sb, ib, errB)
		}
	})
}

func errString(r any) string {
	if err, ok := r.(error); ok {
		return err.Error()
	}
	m, _ := r.(proto.Message)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return string(b)
}

// snapshotParts splits a snapshot stream into its manifest and files.
func snapshotParts(t testing.TB, stream []byte) (*fsmpb.SnapshotManifest, [][]byte) {
	t.Helper()
	r := bytes.NewReader(stream)
	m, err := ReadSnapshotManifest(r)
	if err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, fi := range m.Files {
		b := make([]byte, fi.Size)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	return m, files
}

// forgeSnapshot encodes a snapshot stream of m and files, with the sizes
// and checksums made to match: what a malicious sender can always do.
func forgeSnapshot(t testing.TB, m *fsmpb.SnapshotManifest, files [][]byte) []byte {
	t.Helper()
	m = proto.Clone(m).(*fsmpb.SnapshotManifest)
	for i, fi := range m.Files {
		fi.Size, fi.Crc32C = uint64(len(files[i])), crc32.Checksum(files[i], castagnoli)
	}
	head, err := EncodeSnapshotHead(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(head, bytes.Join(files, nil)...)
}

// FuzzRestore restores arbitrary snapshot streams: both raw bytes (which
// the framing's checksums mostly refuse) and streams forged from a real
// snapshot with one file replaced and every checksum fixed up, as a
// malicious sender would. A stream Restore refuses must leave the state
// machine as it was, with no staging directory left behind; one it
// accepts must be a usable state machine.
func FuzzRestore(f *testing.F) {
	fs := vfs.NewMem()
	src, _ := filledFSM(f, fs, "/src", 300)
	good := snapshotBytes(f, src)
	m, files := snapshotParts(f, good)
	f.Add(false, uint8(0), good)
	f.Add(false, uint8(0), good[:len(good)/2])
	for i, fi := range m.Files {
		f.Add(true, uint8(i), files[i][:len(files[i])/2])
		f.Add(true, uint8(i), append(bytes.Clone(files[i]), 0))
		if strings.HasPrefix(fi.Name, "MANIFEST") || fi.Name == "CURRENT" {
			f.Add(true, uint8(i), []byte("MANIFEST-000099\n"))
			f.Add(true, uint8(i), []byte{})
		}
	}
	dst := openTest(f, fs, "/dst", nil)
	g := newLogGen()
	applyOne(f, dst, g.cmd(f, put("mine", "1")))
	wantSum, wantApplied := checksum(f, dst)
	initial := snapshotBytes(f, dst)
	f.Fuzz(func(t *testing.T, forge bool, file uint8, data []byte) {
		stream := data
		if forge {
			fs := make([][]byte, len(files))
			copy(fs, files)
			fs[int(file)%len(files)] = data
			stream = forgeSnapshot(t, m, fs)
		}
		err := restoreBytes(dst, stream)
		if err == nil {
			// Accepted: it must be a working state machine; put back
			// the state the next input starts from.
			if _, _, err := dst.Checksum(); err != nil {
				t.Fatalf("accepted snapshot does not read: %v", err)
			}
			if err := restoreBytes(dst, initial); err != nil {
				t.Fatal(err)
			}
			return
		}
		if errors.Is(err, ErrHalted) {
			t.Fatalf("a bad snapshot halted the state machine: %v", err)
		}
		if sum, applied := checksum(t, dst); sum != wantSum || applied != wantApplied {
			t.Fatalf("refused snapshot (%v) changed the state", err)
		}
		names, lerr := fs.List("/dst")
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, n := range names {
			if strings.HasPrefix(n, restorePrefix) {
				t.Fatalf("refused snapshot (%v) left %s behind", err, n)
			}
		}
	})
}
