package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

func TestPutGetDeleteMetadata(t *testing.T) {
	f, g := newTest(t), newLogGen()
	r1 := mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, put("k", "v1"))))
	if r1.Version != 1 || r1.CreateIndex != 1 || r1.ModIndex != 1 || r1.Header.GetAppliedIndex() != 1 || r1.Header.GetRaftTerm() != 1 {
		t.Fatalf("first put: %v", r1)
	}
	g.term = 2
	req := put("k", "v2")
	req.PrevKv = true
	r2 := mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, req)))
	if r2.Version != 2 || r2.CreateIndex != 1 || r2.ModIndex != 2 || r2.Header.GetRaftTerm() != 2 {
		t.Fatalf("second put: %v", r2)
	}
	if string(r2.PrevKv.GetValue()) != "v1" || r2.PrevKv.GetVersion() != 1 {
		t.Fatalf("prev_kv: %v", r2.PrevKv)
	}
	kv := getValue(t, f, "k")
	want := &cairnpb.KeyValue{Key: []byte("k"), Value: []byte("v2"), Version: 2, CreateIndex: 1, ModIndex: 2}
	if !proto.Equal(kv, want) {
		t.Fatalf("Get = %v, want %v", kv, want)
	}
	d := mustResp[*cairnpb.DeleteResponse](t, applyOne(t, f, g.cmd(t, &cairnpb.DeleteRequest{Key: []byte("k"), PrevKv: true})))
	if d.Deleted != 1 || !proto.Equal(d.PrevKv, want) {
		t.Fatalf("delete: %v", d)
	}
	if kv := getValue(t, f, "k"); kv != nil {
		t.Fatalf("Get after delete = %v", kv)
	}
	d = mustResp[*cairnpb.DeleteResponse](t, applyOne(t, f, g.cmd(t, &cairnpb.DeleteRequest{Key: []byte("k")})))
	if d.Deleted != 0 {
		t.Fatalf("second delete: %v", d)
	}
	// Recreating starts a new life: version 1, new create index.
	r := mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, put("k", "v3"))))
	if r.Version != 1 || r.CreateIndex != 5 {
		t.Fatalf("recreate: %v", r)
	}
	if f.AppliedIndex() != 5 {
		t.Fatalf("AppliedIndex = %d", f.AppliedIndex())
	}
}

func TestDeleteRange(t *testing.T) {
	f, g := newTest(t), newLogGen()
	var logs []*raft.Log
	for _, k := range []string{"a", "b", "ba", "bb", "c", "d"} {
		logs = append(logs, g.cmd(t, put(k, k)))
	}
	f.ApplyBatch(logs)
	applyOne(t, f, g.cmd(t, &cairnpb.DeleteRangeRequest{Prefix: []byte("b")}))
	applyOne(t, f, g.cmd(t, &cairnpb.DeleteRangeRequest{Start: []byte("c")})) // unbounded end
	resp, err := f.Scan(&cairnpb.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(resp.Kvs); got != "a" {
		t.Fatalf("after range deletes: %q", got)
	}
	// Refused ranges.
	for _, req := range []*cairnpb.DeleteRangeRequest{
		{},
		{Start: []byte("b"), End: []byte("a")},
		{Prefix: []byte("a"), Start: []byte("a")},
		{End: []byte("z")},
	} {
		if err, ok := applyOne(t, f, g.cmd(t, req)).(error); !ok || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DeleteRange(%v) = %v, want invalid argument", req, err)
		}
	}
}

func keysOf(kvs []*cairnpb.KeyValue) string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, string(kv.Key))
	}
	return strings.Join(ks, ",")
}

// TestBatchOverlay checks that commands see the effects of earlier commands
// of the same batch, including range deletions and re-creations.
func TestBatchOverlay(t *testing.T) {
	f, g := newTest(t), newLogGen()
	f.ApplyBatch([]*raft.Log{g.cmd(t, put("x", "0"))})
	casOn := func(key string, version uint64, val string) *cairnpb.TxnRequest {
		return &cairnpb.TxnRequest{
			Compare: []*cairnpb.Compare{{Key: []byte(key), Target: cairnpb.Compare_VERSION, Result: cairnpb.Compare_EQUAL,
				TargetUnion: &cairnpb.Compare_Version{Version: version}}},
			Success: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: put(key, val)}}},
		}
	}
	logs := []*raft.Log{
		g.cmd(t, put("x", "1")),        // x v2
		g.cmd(t, casOn("x", 2, "2")),   // succeeds: x v3
		g.cmd(t, casOn("x", 2, "bad")), // fails
		g.cmd(t, &cairnpb.DeleteRangeRequest{Start: []byte("a"), End: []byte("z")}),
		g.cmd(t, casOn("x", 0, "new")), // x gone: version 0, succeeds
		g.cmd(t, put("x", "again")),    // x v2, created at the previous index
		g.cmd(t, &cairnpb.DeleteRequest{Key: []byte("x")}),
		g.cmd(t, &cairnpb.DeleteRequest{Key: []byte("x")}), // already gone
	}
	res := f.ApplyBatch(logs)
	wantSucceeded := map[int]bool{1: true, 2: false, 4: true}
	for i, want := range wantSucceeded {
		if got := mustResp[*cairnpb.TxnResponse](t, res[i]).Succeeded; got != want {
			t.Errorf("txn %d succeeded = %v, want %v", i, got, want)
		}
	}
	if p := mustResp[*cairnpb.PutResponse](t, res[5]); p.Version != 2 || p.CreateIndex != logs[4].Index {
		t.Errorf("put after range delete and recreate: %v", p)
	}
	if d := mustResp[*cairnpb.DeleteResponse](t, res[6]); d.Deleted != 1 {
		t.Errorf("delete: %v", d)
	}
	if d := mustResp[*cairnpb.DeleteResponse](t, res[7]); d.Deleted != 0 {
		t.Errorf("second delete: %v", d)
	}
	if kv := getValue(t, f, "x"); kv != nil {
		t.Fatalf("x = %v", kv)
	}
}

func TestTxnSemantics(t *testing.T) {
	// State: "a" = "apple" written at index 1 and again at 2 (version 2,
	// create 1, mod 2); "b" absent.
	cmp := func(key string, target cairnpb.Compare_Target, result cairnpb.Compare_Result, operand any) *cairnpb.Compare {
		c := &cairnpb.Compare{Key: []byte(key), Target: target, Result: result}
		switch v := operand.(type) {
		case string:
			c.TargetUnion = &cairnpb.Compare_Value{Value: []byte(v)}
		case bool:
			c.TargetUnion = &cairnpb.Compare_Exists{Exists: v}
		case int:
			switch target {
			case cairnpb.Compare_VERSION:
				c.TargetUnion = &cairnpb.Compare_Version{Version: uint64(v)}
			case cairnpb.Compare_MOD_INDEX:
				c.TargetUnion = &cairnpb.Compare_ModIndex{ModIndex: uint64(v)}
			case cairnpb.Compare_CREATE_INDEX:
				c.TargetUnion = &cairnpb.Compare_CreateIndex{CreateIndex: uint64(v)}
			default:
				c.TargetUnion = &cairnpb.Compare_Version{Version: uint64(v)}
			}
		}
		return c
	}
	const (
		V  = cairnpb.Compare_VALUE
		VE = cairnpb.Compare_VERSION
		M  = cairnpb.Compare_MOD_INDEX
		C  = cairnpb.Compare_CREATE_INDEX
		X  = cairnpb.Compare_EXISTS
		EQ = cairnpb.Compare_EQUAL
		NE = cairnpb.Compare_NOT_EQUAL
		GT = cairnpb.Compare_GREATER
		LT = cairnpb.Compare_LESS
	)
	for _, tc := range []struct {
		name    string
		cmps    []*cairnpb.Compare
		want    bool   // succeeded
		invalid string // expected argument error substring
	}{
		{name: "no compares", want: true},
		{name: "value eq", cmps: []*cairnpb.Compare{cmp("a", V, EQ, "apple")}, want: true},
		{name: "value ne", cmps: []*cairnpb.Compare{cmp("a", V, NE, "apple")}, want: false},
		{name: "value gt", cmps: []*cairnpb.Compare{cmp("a", V, GT, "apq")}, want: false},
		{name: "value gt2", cmps: []*cairnpb.Compare{cmp("a", V, GT, "appl")}, want: true},
		{name: "value lt", cmps: []*cairnpb.Compare{cmp("a", V, LT, "b")}, want: true},
		{name: "value of missing eq empty", cmps: []*cairnpb.Compare{cmp("b", V, EQ, "")}, want: false},
		{name: "value of missing ne", cmps: []*cairnpb.Compare{cmp("b", V, NE, "x")}, want: false},
		{name: "version eq", cmps: []*cairnpb.Compare{cmp("a", VE, EQ, 2)}, want: true},
		{name: "version gt", cmps: []*cairnpb.Compare{cmp("a", VE, GT, 1)}, want: true},
		{name: "version lt", cmps: []*cairnpb.Compare{cmp("a", VE, LT, 2)}, want: false},
		{name: "missing version 0", cmps: []*cairnpb.Compare{cmp("b", VE, EQ, 0)}, want: true},
		{name: "mod index", cmps: []*cairnpb.Compare{cmp("a", M, EQ, 2)}, want: true},
		{name: "mod index lt", cmps: []*cairnpb.Compare{cmp("a", M, LT, 2)}, want: false},
		{name: "create index", cmps: []*cairnpb.Compare{cmp("a", C, EQ, 1)}, want: true},
		{name: "create index ne", cmps: []*cairnpb.Compare{cmp("a", C, NE, 1)}, want: false},
		{name: "exists", cmps: []*cairnpb.Compare{cmp("a", X, EQ, true)}, want: true},
		{name: "not exists", cmps: []*cairnpb.Compare{cmp("b", X, EQ, false)}, want: true},
		{name: "exists ne", cmps: []*cairnpb.Compare{cmp("b", X, NE, true)}, want: true},
		{name: "exists false", cmps: []*cairnpb.Compare{cmp("b", X, EQ, true)}, want: false},
		{name: "all must hold", cmps: []*cairnpb.Compare{cmp("a", X, EQ, true), cmp("b", X, EQ, true)}, want: false},
		{name: "exists gt invalid", cmps: []*cairnpb.Compare{cmp("a", X, GT, true)}, invalid: "EXISTS"},
		{name: "operand mismatch", cmps: []*cairnpb.Compare{cmp("a", V, EQ, 1)}, invalid: "operand"},
		{name: "empty key", cmps: []*cairnpb.Compare{cmp("", V, EQ, "x")}, invalid: "compare 0: empty key"},
		{name: "unknown target", cmps: []*cairnpb.Compare{cmp("a", 9, EQ, "x")}, invalid: "unknown compare target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, g := newTest(t), newLogGen()
			f.ApplyBatch([]*raft.Log{g.cmd(t, put("a", "apple")), g.cmd(t, put("a", "apple"))})
			before, _ := checksum(t, f)
			txn := &cairnpb.TxnRequest{
				Compare: tc.cmps,
				Success: []*cairnpb.RequestOp{
					{Request: &cairnpb.RequestOp_Put{Put: put("s", "1")}},
					{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: []byte("s")}}},
					{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: []byte("a"), PrevKv: true}}},
				},
				Failure: []*cairnpb.RequestOp{
					{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: []byte("a")}}},
					{Request: &cairnpb.RequestOp_Put{Put: put("f", "1")}},
				},
			}
			res := applyOne(t, f, g.cmd(t, txn))
			if tc.invalid != "" {
				err, ok := res.(error)
				if !ok || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("result %v, want invalid argument containing %q", res, tc.invalid)
				}
				// Nothing but the applied index changed.
				for _, k := range []string{"s", "f"} {
					if getValue(t, f, k) != nil {
						t.Fatalf("refused txn wrote %q", k)
					}
				}
				if kv := getValue(t, f, "a"); kv == nil || kv.Version != 2 {
					t.Fatalf("refused txn changed a: %v", kv)
				}
				if after, _ := checksum(t, f); after == before {
					t.Fatal("applied index not advanced by a refused txn")
				}
				return
			}
			r := mustResp[*cairnpb.TxnResponse](t, res)
			if r.Succeeded != tc.want {
				t.Fatalf("succeeded = %v, want %v", r.Succeeded, tc.want)
			}
			if r.Header.GetAppliedIndex() != 3 {
				t.Fatalf("header %v", r.Header)
			}
			if tc.want {
				if len(r.Responses) != 3 {
					t.Fatalf("responses %v", r.Responses)
				}
				if p := r.Responses[0].GetPut(); p.GetVersion() != 1 || p.GetModIndex() != 3 || p.Header != nil {
					t.Fatalf("txn put response %v", p)
				}
				// The get sees the put before it.
				if kv := r.Responses[1].GetGet().GetKv(); string(kv.GetValue()) != "1" || kv.GetModIndex() != 3 {
					t.Fatalf("txn get response %v", kv)
				}
				if d := r.Responses[2].GetDelete(); d.GetDeleted() != 1 || string(d.GetPrevKv().GetValue()) != "apple" {
					t.Fatalf("txn delete response %v", d)
				}
				if getValue(t, f, "a") != nil || getValue(t, f, "s") == nil || getValue(t, f, "f") != nil {
					t.Fatal("success branch effects missing")
				}
			} else {
				if len(r.Responses) != 2 || string(r.Responses[0].GetGet().GetKv().GetValue()) != "apple" {
					t.Fatalf("failure responses %v", r.Responses)
				}
				if getValue(t, f, "a") == nil || getValue(t, f, "s") != nil || getValue(t, f, "f") == nil {
					t.Fatal("failure branch effects missing")
				}
			}
		})
	}
}

func TestTxnLimits(t *testing.T) {
	f, g := newTest(t), newLogGen()
	ops := make([]*cairnpb.RequestOp, cairnpb.MaxTxnOps+1)
	for i := range ops {
		ops[i] = &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: put("k", "v")}}
	}
	for name, txn := range map[string]*cairnpb.TxnRequest{
		"too many ops":  {Success: ops},
		"empty op":      {Failure: []*cairnpb.RequestOp{{}}},
		"bad nested op": {Success: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: put("", "v")}}}},
	} {
		if err, ok := applyOne(t, f, g.cmd(t, txn)).(error); !ok || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: result %v, want invalid argument", name, err)
		}
	}
	if kv := getValue(t, f, "k"); kv != nil {
		t.Fatalf("refused txns wrote: %v", kv)
	}
}

// TestInvalidCommandsHaveNoSideEffects checks refused commands in the
// middle of a batch: they change nothing, and the batch's other commands
// apply.
func TestInvalidCommandsHaveNoSideEffects(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxValueSize = 1000
	f, g := openTest(t, o.Engine.FS, "/fsm", o), newLogGen()
	// The API's limit, which every layer enforces (not the FSM's own
	// constant: the two once differed by one).
	big := bytes.Repeat([]byte("k"), cairnpb.MaxKeySize+1)
	logs := []*raft.Log{
		g.cmd(t, put("ok1", "v")),
		g.cmd(t, &cairnpb.PutRequest{Key: big, Value: []byte("v")}),
		g.cmd(t, &cairnpb.PutRequest{Key: []byte("v"), Value: make([]byte, 1001)}),
		g.cmd(t, &cairnpb.PutRequest{Value: []byte("v")}),
		g.cmd(t, &cairnpb.DeleteRequest{Key: big}),
		g.cmd(t, &cairnpb.PutRequest{Key: []byte("c"), ClientId: "c"}), // seq 0 with a client
		g.cmd(t, &cairnpb.PutRequest{Key: []byte("c"), ClientId: strings.Repeat("c", cairnpb.MaxClientIDSize+1), Seq: 1}),
		g.next(raft.LogCommand, []byte{0xff, 0xff, 0xff}), // undecodable
		g.next(raft.LogCommand, nil),                      // no operation
		g.cmd(t, put("ok2", "v")),
		g.cmd(t, &cairnpb.PutRequest{Key: []byte("max"), Value: make([]byte, 1000)}),
		g.cmd(t, &cairnpb.PutRequest{Key: bytes.Repeat([]byte("m"), cairnpb.MaxKeySize)}),
	}
	res := f.ApplyBatch(logs)
	for i := 1; i <= 8; i++ {
		if err, ok := res[i].(error); !ok || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("entry %d: result %v, want invalid argument", i, res[i])
		}
	}
	for _, i := range []int{0, 9, 10, 11} {
		mustResp[*cairnpb.PutResponse](t, res[i])
	}
	resp, err := f.Scan(&cairnpb.ScanRequest{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.Kvs); got != 4 {
		t.Fatalf("%d keys after the batch, want 4", got)
	}
	if f.AppliedIndex() != g.index {
		t.Fatalf("AppliedIndex %d, want %d", f.AppliedIndex(), g.index)
	}
	// Validate agrees with ApplyBatch.
	for i, l := range logs {
		cmd, err := Decode(l.Data)
		if err == nil {
			err = f.Validate(cmd)
		}
		if _, refused := res[i].(error); refused != (err != nil) {
			t.Errorf("entry %d: Validate = %v, result %v", i, err, res[i])
		}
	}
}

func TestConfigEntriesOnlyAdvanceIndex(t *testing.T) {
	fs := newTest(t).fs
	f := openTest(t, fs, "/cfg", nil)
	g := newLogGen()
	sumBefore, _ := checksum(t, f)
	res := f.ApplyBatch([]*raft.Log{g.config(), g.config(), g.config()})
	for i, r := range res {
		if r != nil {
			t.Fatalf("result %d = %v", i, r)
		}
	}
	sumAfter, applied := checksum(t, f)
	if applied != 3 || sumAfter == sumBefore {
		t.Fatalf("applied %d (checksum changed: %v)", applied, sumAfter != sumBefore)
	}
	resp, err := f.Scan(&cairnpb.ScanRequest{})
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("user keys after config entries: %v, %v", resp, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTest(t, fs, "/cfg", nil)
	if f.AppliedIndex() != 3 {
		t.Fatalf("AppliedIndex after reopen = %d", f.AppliedIndex())
	}
}
