package fsm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

func TestDuplicateAppliedOnce(t *testing.T) {
	fs := vfs.NewMem()
	f, g := openTest(t, fs, "/fsm", nil), newLogGen()

	// A retry in a later batch.
	first := mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, sput("k", "v1", "c1", 1))))
	again := applyOne(t, f, g.cmd(t, sput("k", "v1", "c1", 1)))
	if !proto.Equal(first, mustResp[*cairnpb.PutResponse](t, again)) {
		t.Fatalf("duplicate returned %v, first %v", again, first)
	}
	if kv := getValue(t, f, "k"); kv.Version != 1 {
		t.Fatalf("duplicate applied: %v", kv)
	}
	if n := f.Duplicates(); n != 1 {
		t.Fatalf("%d duplicates counted after one retry", n)
	}

	// Retries in the same batch as the original (its result not yet in the
	// engine), and a retry of an error result.
	res := f.ApplyBatch([]*raft.Log{
		g.cmd(t, sput("k", "v2", "c1", 2)),
		g.cmd(t, sput("k", "v2", "c1", 2)),
		g.cmd(t, sput("", "v", "c1", 3)),
		g.cmd(t, sput("", "v", "c1", 3)),
		g.cmd(t, sput("k", "v", "c1", 1)), // older than the last: result gone
	})
	if !proto.Equal(mustResp[*cairnpb.PutResponse](t, res[0]), mustResp[*cairnpb.PutResponse](t, res[1])) {
		t.Fatalf("same-batch duplicate: %v vs %v", res[0], res[1])
	}
	e1, ok1 := res[2].(error)
	e2, ok2 := res[3].(error)
	if !ok1 || !ok2 || !errors.Is(e2, ErrInvalidArgument) || e1.Error() != e2.Error() {
		t.Fatalf("error result and its duplicate: %v, %v", res[2], res[3])
	}
	if err, ok := res[4].(error); !ok || !errors.Is(err, ErrResultUnavailable) {
		t.Fatalf("old seq: %v", res[4])
	}
	if kv := getValue(t, f, "k"); kv.Version != 2 {
		t.Fatalf("k = %v, want version 2", kv)
	}
	if n := f.Duplicates(); n != 4 {
		t.Fatalf("%d duplicates counted, want 4 (three retries in the batch)", n)
	}

	// Sessions survive a restart.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTest(t, fs, "/fsm", nil)
	if r := applyOne(t, f, g.cmd(t, sput("", "v", "c1", 3))); !sameResult(r, e1) {
		t.Fatalf("duplicate after restart: %v, want %v", r, e1)
	}
	r1 := applyOne(t, f, g.cmd(t, sput("k", "v2", "c9", 1)))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTest(t, fs, "/fsm", nil)
	if r := applyOne(t, f, g.cmd(t, sput("k", "v2", "c9", 1))); !sameResult(r, r1) {
		t.Fatalf("duplicate after restart: %v, want %v", r, r1)
	}
	if kv := getValue(t, f, "k"); kv.Version != 3 {
		t.Fatalf("duplicate after restart applied: %v", kv)
	}
	// A new seq applies; other clients are independent; no client_id means
	// no deduplication.
	mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, sput("k", "v3", "c1", 5))))
	mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, sput("k", "v4", "c2", 5))))
	mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, put("k", "v5"))))
	mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, put("k", "v5"))))
	if kv := getValue(t, f, "k"); kv.Version != 7 {
		t.Fatalf("k = %v, want version 7", kv)
	}
}

func TestDuplicateLargeResultNotRetained(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxSessionResultBytes = 100
	f, g := openTest(t, o.Engine.FS, "/fsm", o), newLogGen()
	applyOne(t, f, g.cmd(t, put("k", string(make([]byte, 200)))))
	req := sput("k", "small", "c", 1)
	req.PrevKv = true // the result carries the 200-byte value
	mustResp[*cairnpb.PutResponse](t, applyOne(t, f, g.cmd(t, req)))
	if err, ok := applyOne(t, f, g.cmd(t, req)).(error); !ok || !errors.Is(err, ErrResultUnavailable) {
		t.Fatalf("duplicate of an unretained result: %v", err)
	}
	if kv := getValue(t, f, "k"); kv.Version != 2 {
		t.Fatalf("duplicate applied: %v", kv)
	}
}

func TestSessionEviction(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxSessions = 3
	f, g := openTest(t, o.Engine.FS, "/fsm", o), newLogGen()
	for i, c := range []string{"a", "b", "c"} {
		applyOne(t, f, g.cmd(t, sput("k"+c, "v", c, uint64(i+1))))
	}
	// "a" becomes the most recently active; "d" then evicts "b".
	applyOne(t, f, g.cmd(t, sput("ka", "v", "a", 10)))
	applyOne(t, f, g.cmd(t, sput("kd", "v", "d", 1)))
	if f.sessions.len() != 3 || f.sessions.get("b") != nil {
		t.Fatalf("sessions after eviction: %d, b present: %v", f.sessions.len(), f.sessions.get("b") != nil)
	}
	// b's retry is no longer recognized: it applies again (the documented
	// limit of at-most-once).
	applyOne(t, f, g.cmd(t, sput("kb", "v", "b", 2)))
	if kv := getValue(t, f, "kb"); kv.Version != 2 {
		t.Fatalf("kb = %v", kv)
	}
	// a's and c's... c was evicted by b's return; a is still known.
	if f.sessions.get("c") != nil {
		t.Fatal("c not evicted")
	}
	if kv := getValue(t, f, "ka"); kv.Version != 2 {
		t.Fatalf("ka = %v", kv)
	}
	applyOne(t, f, g.cmd(t, sput("ka", "v", "a", 10)))
	if kv := getValue(t, f, "ka"); kv.Version != 2 {
		t.Fatalf("a's duplicate applied: %v", kv)
	}
	// The engine holds exactly the live sessions.
	assertPersistedSessions(t, f, "a", "b", "d")
}

func assertPersistedSessions(t *testing.T, f *FSM, want ...string) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	reloaded := newSessionTable()
	if err := reloaded.load(f.mu.db); err != nil {
		t.Fatal(err)
	}
	var got []string
	for e := reloaded.lru.Front(); e != nil; e = e.Next() {
		got = append(got, e.Value.(*session).id)
	}
	var mem []string
	for e := f.sessions.lru.Front(); e != nil; e = e.Next() {
		mem = append(mem, e.Value.(*session).id)
	}
	if fmt.Sprint(got) != fmt.Sprint(mem) {
		t.Fatalf("persisted sessions %v, in memory %v", got, mem)
	}
	gotSet := map[string]bool{}
	for _, id := range got {
		gotSet[id] = true
	}
	if len(got) != len(want) {
		t.Fatalf("sessions %v, want %v", got, want)
	}
	for _, id := range want {
		if !gotSet[id] {
			t.Fatalf("sessions %v, want %v", got, want)
		}
	}
}

func TestSessionTTL(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.SessionTTL = time.Minute
	f, g := openTest(t, o.Engine.FS, "/fsm", o), newLogGen()
	applyOne(t, f, g.cmd(t, sput("k", "v", "old", 1)))
	g.now = g.now.Add(30 * time.Second)
	applyOne(t, f, g.cmd(t, sput("k", "v", "young", 1)))
	// An entry without AppendedAt does not move the clock.
	l := g.cmd(t, put("x", "y"))
	l.AppendedAt = time.Time{}
	applyOne(t, f, l)
	// A leader whose clock is behind does not move it back either.
	g.now = g.now.Add(-time.Hour)
	applyOne(t, f, g.cmd(t, put("x", "y")))
	assertPersistedSessions(t, f, "old", "young")

	g.now = g.now.Add(time.Hour + 31*time.Second) // old idle 61s, young 31s
	applyOne(t, f, g.cmd(t, put("x", "y")))
	assertPersistedSessions(t, f, "young")
	// old's retry applies again, young's does not.
	applyOne(t, f, g.cmd(t, sput("k", "v", "old", 1)))
	applyOne(t, f, g.cmd(t, sput("k", "v", "young", 1)))
	if kv := getValue(t, f, "k"); kv.Version != 3 {
		t.Fatalf("k = %v, want version 3", kv)
	}
	// Expiry is measured with the log's clock, which restarts with the FSM.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTest(t, o.Engine.FS, "/fsm", o)
	if f.state.clock != g.now.UnixNano() {
		t.Fatalf("clock after restart %d, want %d", f.state.clock, g.now.UnixNano())
	}
}

// TestSessionDeterminism applies one log full of sessions, evictions,
// expiries and duplicates to FSMs that batch it differently (and to one
// that restarts in the middle): their states must be identical.
func TestSessionDeterminism(t *testing.T) {
	o := func() *Options {
		o := testOptions(vfs.NewMem())
		o.MaxSessions = 4
		o.SessionTTL = 10 * time.Second
		return o
	}
	g := newLogGen()
	var logs []*raft.Log
	seqs := map[string]uint64{}
	rng := newRand(7)
	for range 600 {
		g.now = g.now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		if rng.IntN(20) == 0 {
			g.now = g.now.Add(-5 * time.Second) // a leader with a slow clock
		}
		c := fmt.Sprintf("c%d", rng.IntN(7))
		if rng.IntN(4) > 0 || seqs[c] == 0 {
			seqs[c]++
		}
		logs = append(logs, g.cmd(t, sput(fmt.Sprintf("k%d", rng.IntN(5)), "v", c, seqs[c]-uint64(rng.IntN(2)))))
	}
	var sums [][32]byte
	var allResults [][]interface{}
	for variant, batchSize := range []int{1, 7, 64, 600} {
		opts := o()
		f := openTest(t, opts.Engine.FS, "/fsm", opts)
		var results []interface{}
		for i := 0; i < len(logs); i += batchSize {
			results = append(results, f.ApplyBatch(logs[i:min(i+batchSize, len(logs))])...)
			if variant == 1 && i == 7*40 {
				f.Close()
				f = openTest(t, opts.Engine.FS, "/fsm", opts)
			}
		}
		sum, _ := checksum(t, f)
		sums = append(sums, sum)
		allResults = append(allResults, results)
	}
	for v := 1; v < len(sums); v++ {
		if sums[v] != sums[0] {
			t.Fatalf("variant %d state differs", v)
		}
		for i := range logs {
			if !sameResult(allResults[0][i], allResults[v][i]) {
				t.Fatalf("variant %d entry %d: %v vs %v", v, i, allResults[v][i], allResults[0][i])
			}
		}
	}
}

func sameResult(a, b interface{}) bool {
	switch a := a.(type) {
	case error:
		b, ok := b.(error)
		return ok && a.Error() == b.Error()
	case proto.Message:
		b, ok := b.(proto.Message)
		return ok && proto.Equal(a, b)
	}
	return a == nil && b == nil
}
