package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// allocated returns the bytes the process allocated while fn ran
// (runtime.MemStats.TotalAlloc: every allocation counts, even one the
// garbage collector has already freed).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func getOp(k string) *cairnpb.RequestOp {
	return &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: []byte(k)}}}
}

func putOp(k, v string) *cairnpb.RequestOp {
	return &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: put(k, v)}}
}

// getsOf returns n Gets of key k.
func getsOf(k string, n int) []*cairnpb.RequestOp {
	ops := make([]*cairnpb.RequestOp, n)
	for i := range ops {
		ops[i] = getOp(k)
	}
	return ops
}

// userKeys returns every user key and value, for comparing states.
func userKeys(t testing.TB, f *FSM) map[string]string {
	t.Helper()
	m := map[string]string{}
	var tok []byte
	for {
		resp, err := f.Scan(&cairnpb.ScanRequest{PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			m[string(kv.Key)] = string(kv.Value)
		}
		if tok = resp.NextPageToken; tok == nil {
			return m
		}
	}
}

func wantBoundError(t testing.TB, r interface{}, limit int) {
	t.Helper()
	err, ok := r.(error)
	if !ok {
		t.Fatalf("result %T, want the txn response bound's error", r)
	}
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("txn response exceeds the limit of %d bytes", limit)) {
		t.Fatalf("error %v, want InvalidArgument naming the limit of %d bytes", err, limit)
	}
}

// TestTxnResponseBound is the review's finding: a Txn of 128 Gets of one
// 4 MiB value (a few KB in the log) made every replica build a 512 MiB
// response, and marshal it again (1 GiB) for the session of a client id.
// Now the Txn fails with InvalidArgument naming the bound, none of its
// writes applied, having copied the value once.
func TestTxnResponseBound(t *testing.T) {
	f, g := newTest(t), newLogGen()
	big := string(bytes.Repeat([]byte{7}, 4<<20))
	applyOne(t, f, g.cmd(t, put("big", big)))
	applyOne(t, f, g.cmd(t, put("other", "x")))
	applyOne(t, f, g.cmd(t, put("r1", "y")))
	before := userKeys(t, f)

	ops := []*cairnpb.RequestOp{
		putOp("new", "v"),
		{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: []byte("other")}}},
		{Request: &cairnpb.RequestOp_DeleteRange{DeleteRange: &cairnpb.DeleteRangeRequest{Prefix: []byte("r")}}},
	}
	ops = append(ops, getsOf("big", cairnpb.MaxTxnOps-len(ops))...)
	const maxAlloc = 24 << 20 // one copy of the value (4 MiB) and slack; it was 513 MiB
	for _, tc := range []struct {
		name   string
		client string
	}{{"no client id", ""}, {"client id", "c1"}} {
		t.Run(tc.name, func(t *testing.T) {
			l := g.cmd(t, &cairnpb.TxnRequest{Success: ops, ClientId: tc.client, Seq: 1})
			var r interface{}
			n := allocated(func() { r = applyOne(t, f, l) })
			wantBoundError(t, r, cairnpb.DefaultMaxResponseKVBytes)
			t.Logf("allocated %d KiB applying the refused txn: %v", n>>10, r)
			if n > maxAlloc {
				t.Errorf("applying the txn allocated %d MiB, want at most %d", n>>20, maxAlloc>>20)
			}
			if got := userKeys(t, f); len(got) != len(before) || got["other"] != "x" || got["r1"] != "y" || got["new"] != "" {
				t.Fatalf("a refused txn changed the keys: %d keys, other %q, r1 %q, new %q", len(got), got["other"], got["r1"], got["new"])
			}
			if tc.client == "" {
				return
			}
			// The session remembers the error, not a response: a retry
			// gets the identical error.
			dup := applyOne(t, f, g.cmd(t, &cairnpb.TxnRequest{Success: ops, ClientId: tc.client, Seq: 1}))
			if de, ok := dup.(error); !ok || de.Error() != r.(error).Error() {
				t.Fatalf("duplicate: %v, want %v", dup, r)
			}
			if s := f.sessions.get(tc.client); s == nil || !s.retained {
				t.Fatalf("session %+v does not retain the error", s)
			}
		})
	}
}

// TestTxnResponseWithinBound: a Txn whose response fits the bound but not
// a session (MaxSessionResultBytes) succeeds; its Gets of one key share
// one copy of the value, and the response is not marshalled for the
// session only to be dropped (it was: 24 MiB allocated for a 12 MiB
// response).
func TestTxnResponseWithinBound(t *testing.T) {
	f, g := newTest(t), newLogGen()
	big := bytes.Repeat([]byte{9}, 4<<20)
	applyOne(t, f, g.cmd(t, put("big", string(big))))
	l := g.cmd(t, &cairnpb.TxnRequest{Success: append(getsOf("big", 3), putOp("after", "z")), ClientId: "c", Seq: 1})
	var r interface{}
	n := allocated(func() { r = applyOne(t, f, l) })
	resp := mustResp[*cairnpb.TxnResponse](t, r)
	t.Logf("allocated %d KiB applying a 12 MiB response", n>>10)
	if n > 12<<20 {
		t.Errorf("applying the txn allocated %d MiB, want at most 12", n>>20)
	}
	if len(resp.Responses) != 4 {
		t.Fatalf("%d responses", len(resp.Responses))
	}
	for i := range 3 {
		if kv := resp.Responses[i].GetGet().GetKv(); !bytes.Equal(kv.GetValue(), big) || string(kv.GetKey()) != "big" {
			t.Fatalf("get %d: key %q, %d bytes", i, kv.GetKey(), len(kv.GetValue()))
		}
	}
	if getValue(t, f, "after") == nil {
		t.Fatal("the txn's put is missing")
	}
	// Too large for the session: a retry learns that the write applied.
	dup := applyOne(t, f, g.cmd(t, &cairnpb.TxnRequest{Success: getsOf("big", 3), ClientId: "c", Seq: 1}))
	if err, ok := dup.(error); !ok || !errors.Is(err, ErrResultUnavailable) {
		t.Fatalf("duplicate: %v, want ErrResultUnavailable", dup)
	}
}

// TestTxnBatchSharesValues: a raft batch of Txns each within the bound
// (raft hands the FSM up to MaxAppendEntries = 1024 entries at once, and
// keeps every response of the batch until it returns) copies a value read
// by many of them once: 32 Txns of 3 Gets of one 4 MiB value built 384 MiB
// of responses.
func TestTxnBatchSharesValues(t *testing.T) {
	f, g := newTest(t), newLogGen()
	applyOne(t, f, g.cmd(t, put("big", string(make([]byte, 4<<20)))))
	var logs []*raft.Log
	for range 32 {
		logs = append(logs, g.cmd(t, &cairnpb.TxnRequest{Success: getsOf("big", 3)}))
	}
	var res []interface{}
	n := allocated(func() { res = f.ApplyBatch(logs) })
	for _, r := range res {
		if resp := mustResp[*cairnpb.TxnResponse](t, r); len(resp.Responses[2].GetGet().GetKv().GetValue()) != 4<<20 {
			t.Fatal("a get of the batch lacks its value")
		}
	}
	t.Logf("allocated %d KiB applying the batch", n>>10)
	if n > 16<<20 {
		t.Errorf("applying the batch allocated %d MiB", n>>20)
	}
}

// TestTxnComparesDoNotCopyValues: 128 VALUE compares of a 4 MiB value
// copied it 128 times (513 MiB); they compare it in place now.
func TestTxnComparesDoNotCopyValues(t *testing.T) {
	f, g := newTest(t), newLogGen()
	applyOne(t, f, g.cmd(t, put("big", string(make([]byte, 4<<20)))))
	var cs []*cairnpb.Compare
	for range cairnpb.MaxTxnOps {
		cs = append(cs, &cairnpb.Compare{Key: []byte("big"), Target: cairnpb.Compare_VALUE,
			Result: cairnpb.Compare_GREATER, TargetUnion: &cairnpb.Compare_Value{Value: []byte{0}}})
	}
	l := g.cmd(t, &cairnpb.TxnRequest{Compare: cs, Success: []*cairnpb.RequestOp{putOp("ok", "1")}})
	var r interface{}
	n := allocated(func() { r = applyOne(t, f, l) })
	if resp := mustResp[*cairnpb.TxnResponse](t, r); !resp.Succeeded {
		t.Fatal("compares did not hold")
	}
	if n > 4<<20 {
		t.Errorf("128 compares of a 4 MiB value allocated %d MiB", n>>20)
	}
	// A top-level Delete without prev_kv does not copy the value either.
	l = g.cmd(t, &cairnpb.DeleteRequest{Key: []byte("big")})
	n = allocated(func() { r = applyOne(t, f, l) })
	if resp := mustResp[*cairnpb.DeleteResponse](t, r); resp.Deleted != 1 {
		t.Fatalf("delete: %v", resp)
	}
	if n > 2<<20 {
		t.Errorf("deleting a 4 MiB value allocated %d MiB", n>>20)
	}
}

// TestTxnBoundPrevKV: a Put's and a Delete's prev_kv count towards the
// bound, and values a Txn wrote itself (or an earlier command of the same
// raft batch) as much as values read from the engine.
func TestTxnBoundPrevKV(t *testing.T) {
	f, g := newTest(t), newLogGen()
	v := string(make([]byte, 6<<20))
	applyOne(t, f, g.cmd(t, put("a", v)))
	prevPut := func(k string) *cairnpb.RequestOp {
		return &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: []byte(k), Value: []byte(v), PrevKv: true}}}
	}
	prevDel := &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: []byte("a"), PrevKv: true}}}
	for i, ops := range [][]*cairnpb.RequestOp{
		{prevPut("a"), prevPut("a"), prevPut("a")},          // 3 prev_kv of 6 MiB
		{prevPut("a"), getOp("a"), prevDel},                 // prev_kv, a get of its own put, prev_kv
		{putOp("b", v), getOp("b"), getOp("b"), getOp("b")}, // its own value, three times
	} {
		r := f.ApplyBatch([]*raft.Log{
			g.cmd(t, put("c", v)),
			g.cmd(t, &cairnpb.TxnRequest{Success: append(ops, getOp("c"))}),
		})
		mustResp[*cairnpb.PutResponse](t, r[0])
		wantBoundError(t, r[1], cairnpb.DefaultMaxResponseKVBytes)
		if kv := getValue(t, f, "a"); kv == nil || kv.Version != 1 {
			t.Fatalf("case %d: a refused txn wrote a: %v", i, kv)
		}
		if kv := getValue(t, f, "b"); kv != nil {
			t.Fatalf("case %d: a refused txn wrote b", i)
		}
	}
	// Within the bound.
	resp := mustResp[*cairnpb.TxnResponse](t, applyOne(t, f, g.cmd(t, &cairnpb.TxnRequest{Success: []*cairnpb.RequestOp{prevPut("a"), prevDel}})))
	if len(resp.Responses[0].GetPut().GetPrevKv().GetValue()) != len(v) || len(resp.Responses[1].GetDelete().GetPrevKv().GetValue()) != len(v) {
		t.Fatalf("prev_kvs of a txn within the bound: %.200v", resp)
	}
}

// TestTxnRefusedInBatch: a refused Txn's writes stay out of the batch it
// is applied in: the commands after it in the same raft batch do not see
// them, and its earlier siblings' writes are kept.
func TestTxnRefusedInBatch(t *testing.T) {
	f, g := newTest(t), newLogGen()
	exists := func(k string, want bool) *cairnpb.Compare {
		return &cairnpb.Compare{Key: []byte(k), Target: cairnpb.Compare_EXISTS, TargetUnion: &cairnpb.Compare_Exists{Exists: want}}
	}
	// Within one raft batch: a put, a txn refused after writing (as far
	// as it got), and a txn whose compares check that none of the
	// refused txn's writes are visible.
	res := f.ApplyBatch([]*raft.Log{
		g.cmd(t, put("before", "1")),
		g.cmd(t, put("big", string(make([]byte, 8<<20)))),
		g.cmd(t, &cairnpb.TxnRequest{Success: []*cairnpb.RequestOp{
			putOp("x", "1"),
			{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: []byte("before")}}},
			{Request: &cairnpb.RequestOp_DeleteRange{DeleteRange: &cairnpb.DeleteRangeRequest{Start: []byte("a"), End: []byte("bh")}}},
			getOp("big"), getOp("big"), getOp("big"),
		}}),
		g.cmd(t, &cairnpb.TxnRequest{Compare: []*cairnpb.Compare{exists("x", false), exists("before", true), exists("big", true)}}),
	})
	mustResp[*cairnpb.PutResponse](t, res[0])
	wantBoundError(t, res[2], cairnpb.DefaultMaxResponseKVBytes)
	if resp := mustResp[*cairnpb.TxnResponse](t, res[3]); !resp.Succeeded {
		t.Fatal("the command after a refused txn saw its writes")
	}
	if getValue(t, f, "x") != nil || getValue(t, f, "before") == nil || len(getValue(t, f, "big").GetValue()) != 8<<20 {
		t.Fatal("a refused txn's writes reached the engine")
	}
}

// TestTxnBoundDeterminism: a command applies alike on replicas whatever
// their own MaxValueSize, since the bound it is held to is the one stamped
// in it; a command without a bound (logged before the field existed)
// applies as it always did, its whole response built.
func TestTxnBoundDeterminism(t *testing.T) {
	fs := vfs.NewMem()
	small := testOptions(fs)
	small.MaxValueSize = 1 << 20
	large := testOptions(fs)
	large.MaxValueSize = 64 << 20
	fSmall, fLarge := openTest(t, fs, "/small", small), openTest(t, fs, "/large", large)
	replicas := []*FSM{fSmall, fLarge}
	g := newLogGen()
	apply := func(cmd *fsmpb.Command) []interface{} {
		t.Helper()
		data, err := Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		l := g.next(raft.LogCommand, data)
		var res []interface{}
		for _, f := range replicas {
			res = append(res, applyOne(t, f, l))
		}
		s0, _ := checksum(t, fSmall)
		s1, _ := checksum(t, fLarge)
		if s0 != s1 {
			t.Fatalf("entry %d: replicas diverge", l.Index)
		}
		return res
	}
	mustCmd := func(cmd *fsmpb.Command, err error) *fsmpb.Command {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	apply(mustCmd(NewCommand(put("v", string(make([]byte, 512<<10))))))
	txn := func() *cairnpb.TxnRequest {
		return &cairnpb.TxnRequest{Success: append([]*cairnpb.RequestOp{putOp("w", "1")}, getsOf("v", 3)...), ClientId: "c", Seq: uint64(g.index + 1)}
	}

	// Stamped by the small replica: 1.5 MiB passes its bound, on both.
	cmd := mustCmd(fSmall.NewCommand(txn()))
	if got, want := cmd.GetMaxTxnResponseBytes(), uint64(cairnpb.MaxResponseKVBytes(1<<20)); got != want {
		t.Fatalf("stamped bound %d, want %d", got, want)
	}
	for i, r := range apply(cmd) {
		wantBoundError(t, r, cairnpb.MaxResponseKVBytes(1<<20))
		if getValue(t, replicas[i], "w") != nil {
			t.Fatal("a refused txn wrote w")
		}
	}
	// Stamped by the large one: it applies, on both.
	cmd = mustCmd(fLarge.NewCommand(txn()))
	res := apply(cmd)
	r0, r1 := mustResp[*cairnpb.TxnResponse](t, res[0]), mustResp[*cairnpb.TxnResponse](t, res[1])
	if !proto.Equal(r0, r1) || len(r0.Responses) != 4 {
		t.Fatal("the replicas' responses differ")
	}
	// A command logged before the bound existed carries none (field 7
	// absent: the bytes an older node wrote), and applies unbounded.
	cmd = mustCmd(NewCommand(&cairnpb.TxnRequest{Success: getsOf("v", 100)}))
	cmd.MaxTxnResponseBytes = 0
	data, err := Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("undecodable command")
		}
		if num == 7 {
			t.Fatal("a command without a bound encodes field 7")
		}
		b = b[n:]
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
	for _, r := range apply(cmd) {
		if resp := mustResp[*cairnpb.TxnResponse](t, r); len(resp.Responses) != 100 {
			t.Fatalf("unbounded txn: %d responses", len(resp.Responses))
		}
	}
}

// TestScanPageWithinMessageLimit: a Scan page stops before a key that
// would take it past the node's gRPC message limit (maxValueSize +
// MaxKeySize + 1 MiB). It held about MaxScanPageBytes plus one more value:
// more than the limit when the largest value is small, or after a page of
// nearly 4 MiB, and every retry of the page failed alike.
func TestScanPageWithinMessageLimit(t *testing.T) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.MaxValueSize = 256 << 10
	f, g := openTest(t, fs, "/scan", o), newLogGen()
	msgLimit := o.MaxValueSize + cairnpb.MaxKeySize + 1<<20 // cluster's maxMessageSize
	var logs []*raft.Log
	for i := range 20 {
		logs = append(logs, g.cmd(t, put(fmt.Sprintf("k%02d", i), string(make([]byte, 100<<10)))))
	}
	f.ApplyBatch(logs)
	for _, reverse := range []bool{false, true} {
		var tok []byte
		keys, pages := 0, 0
		for {
			resp, err := f.Scan(&cairnpb.ScanRequest{PageToken: tok, Reverse: reverse})
			if err != nil {
				t.Fatal(err)
			}
			resp.Header = &cairnpb.ResponseHeader{NodeId: strings.Repeat("n", 64), RaftTerm: 1 << 62, AppliedIndex: 1 << 62}
			if size := proto.Size(resp); size > msgLimit {
				t.Fatalf("page of %d keys, %d bytes: larger than a message (%d)", len(resp.Kvs), size, msgLimit)
			}
			keys += len(resp.Kvs)
			pages++
			if tok = resp.NextPageToken; tok == nil {
				break
			}
		}
		if keys != 20 || pages != 2 {
			t.Fatalf("reverse %v: %d keys in %d pages, want 20 in 2", reverse, keys, pages)
		}
	}
	// Keys only: the values do not count.
	resp, err := f.Scan(&cairnpb.ScanRequest{KeysOnly: true})
	if err != nil || len(resp.Kvs) != 20 {
		t.Fatalf("keys-only scan: %d keys, %v", len(resp.GetKvs()), err)
	}
	// A value larger than the bound (stored under a larger MaxValueSize)
	// still comes, alone in its page.
	big := testOptions(fs)
	big.MaxValueSize = 1 << 20
	f2 := openTest(t, fs, "/scan2", big)
	f2.ApplyBatch([]*raft.Log{g.cmd(t, put("a", "1")), g.cmd(t, put("b", string(make([]byte, 1<<20)))), g.cmd(t, put("c", "1"))})
	f2.limits.maxScanPage = 64 << 10
	var got []int
	var tok []byte
	for {
		resp, err := f2.Scan(&cairnpb.ScanRequest{PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, len(resp.Kvs))
		if tok = resp.NextPageToken; tok == nil {
			break
		}
	}
	if fmt.Sprint(got) != "[1 1 1]" {
		t.Fatalf("pages of %v keys, want [1 1 1]", got)
	}
}
