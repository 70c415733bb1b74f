package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

var (
	seedFlag = flag.Uint64("seed", 0, "seed of the randomized FSM tests (0: time-based)")
	longFlag = flag.Bool("long", false, "run the randomized FSM tests longer")
)

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return seed
}

// modelRec is the model's view of a key.
type modelRec struct {
	value                string
	version, create, mod uint64
}

// model is the obvious implementation of the commands' semantics, for keys
// only (sessions are not modelled: the generator's retries are always
// recognized, so the model skips them).
type model map[string]modelRec

func (m model) apply(cmd proto.Message, index uint64) {
	switch r := cmd.(type) {
	case *cairnpb.PutRequest:
		old, ok := m[string(r.Key)]
		rec := modelRec{value: string(r.Value), version: 1, create: index, mod: index}
		if ok {
			rec.version, rec.create = old.version+1, old.create
		}
		m[string(r.Key)] = rec
	case *cairnpb.DeleteRequest:
		delete(m, string(r.Key))
	case *cairnpb.DeleteRangeRequest:
		for k := range m {
			in := false
			if len(r.Prefix) > 0 {
				in = bytes.HasPrefix([]byte(k), r.Prefix)
			} else {
				in = k >= string(r.Start) && (len(r.End) == 0 || k < string(r.End))
			}
			if in {
				delete(m, k)
			}
		}
	case *cairnpb.TxnRequest:
		ok := true
		for _, c := range r.Compare {
			rec, found := m[string(c.Key)]
			if !modelCompare(c, rec, found) {
				ok = false
			}
		}
		ops := r.Success
		if !ok {
			ops = r.Failure
		}
		for _, op := range ops {
			switch op := op.Request.(type) {
			case *cairnpb.RequestOp_Put:
				m.apply(op.Put, index)
			case *cairnpb.RequestOp_Delete:
				m.apply(op.Delete, index)
			case *cairnpb.RequestOp_DeleteRange:
				m.apply(op.DeleteRange, index)
			}
		}
	}
}

func modelCompare(c *cairnpb.Compare, rec modelRec, found bool) bool {
	var a, b int64
	switch c.Target {
	case cairnpb.Compare_VALUE:
		if !found {
			return false
		}
		a = int64(bytes.Compare([]byte(rec.value), c.GetValue()))
	case cairnpb.Compare_VERSION:
		a, b = int64(rec.version), int64(c.GetVersion())
	case cairnpb.Compare_MOD_INDEX:
		a, b = int64(rec.mod), int64(c.GetModIndex())
	case cairnpb.Compare_EXISTS:
		if found != c.GetExists() {
			a = 1
		}
	}
	switch c.Result {
	case cairnpb.Compare_EQUAL:
		return a == b
	case cairnpb.Compare_NOT_EQUAL:
		return a != b
	case cairnpb.Compare_GREATER:
		return a > b
	}
	return a < b
}

// genLog makes a random log of n entries and applies it to a model.
func genLog(t testing.TB, rng *rand.Rand, n int) ([]*raft.Log, model) {
	g := newLogGen()
	m := model{}
	key := func() []byte { return fmt.Appendf(nil, "%c%d", 'a'+rng.IntN(4), rng.IntN(10)) }
	val := func() []byte { return fmt.Appendf(nil, "v%d", rng.IntN(1000)) }
	clients := []string{"", "c1", "c2", "c3"}
	seqs := map[string]uint64{}
	last := map[string]proto.Message{}
	var logs []*raft.Log
	randomOp := func() proto.Message {
		switch p := rng.IntN(100); {
		case p < 55:
			return &cairnpb.PutRequest{Key: key(), Value: val(), PrevKv: rng.IntN(2) == 0}
		case p < 70:
			return &cairnpb.DeleteRequest{Key: key(), PrevKv: rng.IntN(2) == 0}
		case p < 75:
			if rng.IntN(2) == 0 {
				return &cairnpb.DeleteRangeRequest{Prefix: key()[:1]}
			}
			s, e := key(), key()
			if bytes.Compare(s, e) > 0 {
				s, e = e, s
			}
			if rng.IntN(4) == 0 {
				e = nil
			}
			return &cairnpb.DeleteRangeRequest{Start: s, End: e}
		default:
			txn := &cairnpb.TxnRequest{}
			for range rng.IntN(3) {
				c := &cairnpb.Compare{Key: key(), Result: cairnpb.Compare_Result(rng.IntN(4))}
				switch rng.IntN(4) {
				case 0:
					c.Target, c.TargetUnion = cairnpb.Compare_VALUE, &cairnpb.Compare_Value{Value: val()}
				case 1:
					c.Target, c.TargetUnion = cairnpb.Compare_VERSION, &cairnpb.Compare_Version{Version: uint64(rng.IntN(3))}
				case 2:
					c.Target, c.TargetUnion = cairnpb.Compare_MOD_INDEX, &cairnpb.Compare_ModIndex{ModIndex: uint64(rng.IntN(n))}
				case 3:
					c.Target, c.TargetUnion = cairnpb.Compare_EXISTS, &cairnpb.Compare_Exists{Exists: rng.IntN(2) == 0}
					c.Result = cairnpb.Compare_Result(rng.IntN(2))
				}
				txn.Compare = append(txn.Compare, c)
			}
			ops := func() (out []*cairnpb.RequestOp) {
				for range rng.IntN(4) {
					switch rng.IntN(4) {
					case 0:
						out = append(out, &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: key(), Value: val()}}})
					case 1:
						out = append(out, &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: key()}}})
					case 2:
						out = append(out, &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: key()}}})
					case 3:
						out = append(out, &cairnpb.RequestOp{Request: &cairnpb.RequestOp_DeleteRange{DeleteRange: &cairnpb.DeleteRangeRequest{Prefix: key()}}})
					}
				}
				return out
			}
			txn.Success, txn.Failure = ops(), ops()
			return txn
		}
	}
	for len(logs) < n {
		g.now = g.now.Add(time.Duration(rng.IntN(100)) * time.Millisecond)
		if rng.IntN(50) == 0 {
			g.term++
		}
		if rng.IntN(20) == 0 {
			logs = append(logs, g.config())
			continue
		}
		c := clients[rng.IntN(len(clients))]
		if c != "" && last[c] != nil && rng.IntN(5) == 0 {
			// A retry: same client, same seq; applied once.
			logs = append(logs, g.cmd(t, last[c]))
			continue
		}
		req := randomOp()
		if c != "" {
			seqs[c]++
			setSession(req, c, seqs[c])
			last[c] = req
		}
		logs = append(logs, g.cmd(t, req))
		m.apply(req, g.index)
	}
	return logs, m
}

func setSession(req proto.Message, client string, seq uint64) {
	switch r := req.(type) {
	case *cairnpb.PutRequest:
		r.ClientId, r.Seq = client, seq
	case *cairnpb.DeleteRequest:
		r.ClientId, r.Seq = client, seq
	case *cairnpb.DeleteRangeRequest:
		r.ClientId, r.Seq = client, seq
	case *cairnpb.TxnRequest:
		r.ClientId, r.Seq = client, seq
	}
}

func checkModel(t *testing.T, f *FSM, m model) {
	t.Helper()
	var got []*cairnpb.KeyValue
	req := &cairnpb.ScanRequest{Limit: 7}
	for {
		resp, err := f.Scan(req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.Kvs...)
		if len(resp.NextPageToken) == 0 {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(got) != len(keys) {
		t.Fatalf("FSM holds %d keys, model %d", len(got), len(keys))
	}
	for i, k := range keys {
		r := m[k]
		want := &cairnpb.KeyValue{Key: []byte(k), Value: []byte(r.value), Version: r.version, CreateIndex: r.create, ModIndex: r.mod}
		if !proto.Equal(got[i], want) {
			t.Fatalf("key %d: FSM %v, model %v", i, got[i], want)
		}
		// Get answers the same as Scan, and its key and value are its
		// own (they share one allocation: appending to the key must not
		// change the value).
		kv, err := f.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		if !proto.Equal(kv, want) {
			t.Fatalf("Get(%q) = %v, model %v", k, kv, want)
		}
		_ = append(kv.Key, 'x')
		if string(kv.Value) != r.value {
			t.Fatalf("Get(%q): appending to the key changed the value to %q", k, kv.Value)
		}
	}
	for _, k := range []string{"a", "zz", "a10"} {
		if _, ok := m[k]; ok {
			continue
		}
		if kv, err := f.Get([]byte(k)); err != nil || kv != nil {
			t.Fatalf("Get(%q) of a missing key = %v, %v", k, kv, err)
		}
	}
}

// TestDeterminism applies one random log to FSMs in different ways: in
// batches of random sizes, one entry at a time, and with replays of
// entries already applied, restarts and simulated power losses in between.
// Every FSM must end with the same checksum (internal keys included), the
// same results, and the model's keys.
func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	rng := newRand(seed)
	n := 2000
	if *longFlag {
		n = 20000
	}
	logs, m := genLog(t, rng, n)

	type variant struct {
		name  string
		apply func(t *testing.T, fs *vfs.MemFS) (*FSM, []interface{})
	}
	randomBatches := func(t *testing.T, fs *vfs.MemFS) (*FSM, []interface{}) {
		f := openTest(t, fs, "/fsm", nil)
		var res []interface{}
		for i := 0; i < len(logs); {
			j := min(len(logs), i+1+rng.IntN(100))
			res = append(res, f.ApplyBatch(logs[i:j])...)
			i = j
		}
		return f, res
	}
	oneByOne := func(t *testing.T, fs *vfs.MemFS) (*FSM, []interface{}) {
		f := openTest(t, fs, "/fsm", nil)
		var res []interface{}
		for _, l := range logs {
			res = append(res, f.Apply(l))
		}
		return f, res
	}
	// withFaults replays, restarts and crashes along the way. Results of
	// replayed entries are nil (raft never waits on them), so results are
	// taken from the first time each entry is applied.
	withFaults := func(t *testing.T, fs *vfs.MemFS) (*FSM, []interface{}) {
		f := openTest(t, fs, "/fsm", nil)
		res := make([]interface{}, len(logs))
		var durable uint64 // the index of the last snapshot
		for i := 0; i < len(logs); {
			j := min(len(logs), i+1+rng.IntN(60))
			from := i
			if rng.IntN(3) == 0 {
				from = rng.IntN(i + 1) // overlap entries already applied
			}
			before := f.AppliedIndex()
			for k, r := range f.ApplyBatch(logs[from:j]) {
				if idx := logs[from+k].Index; idx <= before {
					if r != nil {
						t.Fatalf("replayed entry %d returned %v", idx, r)
					}
				} else {
					res[from+k] = r
				}
			}
			i = j
			switch rng.IntN(15) {
			case 2, 3: // raft takes a snapshot: the engine is durable up to it
				snap, err := f.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				snap.Release()
				durable = f.AppliedIndex()
			case 0: // clean restart
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				f = openTest(t, fs, "/fsm", nil)
				if f.AppliedIndex() != logs[j-1].Index {
					t.Fatalf("applied index %d after restart, want %d", f.AppliedIndex(), logs[j-1].Index)
				}
			case 1: // power loss: unsynced engine writes are lost; raft replays
				crashed := fs.CrashClone()
				f.Close()
				fs = crashed
				f = openTest(t, fs, "/fsm", nil)
				if a := f.AppliedIndex(); a > logs[j-1].Index || a < durable {
					t.Fatalf("applied index %d after a crash, outside [%d, %d]", a, durable, logs[j-1].Index)
				} else {
					t.Logf("power loss at index %d: engine recovered to %d", logs[j-1].Index, a)
				}
				// raft replays from its last snapshot.
				f.ApplyBatch(logs[durable:j])
			}
		}
		return f, res
	}
	// splitBatches writes each raft batch as many small engine batches.
	splitBatches := func(t *testing.T, fs *vfs.MemFS) (*FSM, []interface{}) {
		defer func(n int) { maxEngineBatchBytes = n }(maxEngineBatchBytes)
		maxEngineBatchBytes = 200
		return randomBatches(t, fs)
	}
	variants := []variant{{"random batches", randomBatches}, {"one by one", oneByOne}, {"faults", withFaults},
		{"split engine batches", splitBatches}}

	var sum0 [32]byte
	var res0 []interface{}
	for vi, v := range variants {
		f, res := v.apply(t, vfs.NewMem())
		sum, applied := checksum(t, f)
		if applied != logs[len(logs)-1].Index {
			t.Fatalf("%s: applied %d", v.name, applied)
		}
		checkModel(t, f, m)
		if vi == 0 {
			sum0, res0 = sum, res
			continue
		}
		if sum != sum0 {
			t.Fatalf("%s: state differs from %s", v.name, variants[0].name)
		}
		for i := range logs {
			if !sameResult(res[i], res0[i]) {
				t.Fatalf("%s: entry %d result %v, %s: %v", v.name, logs[i].Index, res[i], variants[0].name, res0[i])
			}
		}
	}
}

// TestReplayChangesNothing re-applies every entry already applied, in
// other batches, and checks that state and applied index are unchanged.
func TestReplayChangesNothing(t *testing.T) {
	rng := newRand(testSeed(t))
	logs, _ := genLog(t, rng, 500)
	f := newTest(t)
	f.ApplyBatch(logs[:400])
	sum, applied := checksum(t, f)
	for i := 0; i < 400; i += 37 {
		for _, r := range f.ApplyBatch(logs[i:min(400, i+37)]) {
			if r != nil {
				t.Fatalf("replayed entry returned %v", r)
			}
		}
	}
	if s, a := checksum(t, f); s != sum || a != applied {
		t.Fatalf("replay changed the state (applied %d -> %d)", applied, a)
	}
	// A batch straddling the applied index applies only the new part.
	f.ApplyBatch(logs[350:500])
	ref := newTest(t)
	ref.ApplyBatch(logs)
	if s, _ := checksum(t, f); s != mustSum(t, ref) {
		t.Fatal("straddling batch: state differs from a straight apply")
	}
}

func mustSum(t *testing.T, f *FSM) [32]byte {
	s, _ := checksum(t, f)
	return s
}
