package fsm

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

func TestRestartSkipsApplied(t *testing.T) {
	dir := t.TempDir()
	logs, _ := genLog(t, newRand(5), 300)
	f := openTest(t, vfs.Default, dir, nil)
	f.ApplyBatch(logs[:200])
	sum := mustSum(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	f = openTest(t, vfs.Default, dir, nil)
	if f.AppliedIndex() != 200 {
		t.Fatalf("AppliedIndex after restart = %d", f.AppliedIndex())
	}
	if mustSum(t, f) != sum {
		t.Fatal("state changed across restart")
	}
	// raft replays from its snapshot (here: the start); the FSM skips what
	// it has and applies the rest once.
	res := f.ApplyBatch(logs)
	for i := range 200 {
		if res[i] != nil {
			t.Fatalf("replayed entry %d returned %v", i+1, res[i])
		}
	}
	ref := newTest(t)
	ref.ApplyBatch(logs)
	if mustSum(t, f) != mustSum(t, ref) {
		t.Fatal("restarted FSM differs from one that never stopped")
	}
}

func TestNewRefusesForeignEngine(t *testing.T) {
	fs := vfs.NewMem()
	// An engine with data but no format marker is not ours.
	db, err := lsm.Open("/other/engine", &lsm.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	db.Put([]byte("\x01user"), []byte("x"), nil)
	db.Close()
	if _, err := New("/other", testOptions(fs)); err == nil || !strings.Contains(err.Error(), "format marker") {
		t.Fatalf("New over a foreign engine: %v", err)
	}
}

func TestWaitApplied(t *testing.T) {
	f, g := newTest(t), newLogGen()
	ctx := context.Background()
	if err := f.WaitApplied(ctx, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.WaitApplied(ctx, 3) }()
	f.ApplyBatch([]*raft.Log{g.cmd(t, put("a", "1")), g.config()})
	select {
	case err := <-done:
		t.Fatalf("WaitApplied(3) returned %v at index 2", err)
	case <-time.After(10 * time.Millisecond):
	}
	f.ApplyBatch([]*raft.Log{g.cmd(t, put("a", "2"))})
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- f.WaitApplied(cctx, 100) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	go func() { done <- f.WaitApplied(ctx, 100) }()
	f.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("wait across Close: %v", err)
	}
}

// armedInjector injects nothing until armed.
type armedInjector struct{ p atomic.Pointer[errorfs.Index] }

func (a *armedInjector) MaybeError(op errorfs.Op, path string) error {
	if ii := a.p.Load(); ii != nil {
		return ii.MaybeError(op, path)
	}
	return nil
}

// TestHaltOnEngineFailure fails an engine write during apply: the batch
// fails as a whole, the FSM halts, and a restart replays from the durable
// applied index.
func TestHaltOnEngineFailure(t *testing.T) {
	mem := vfs.NewMem()
	var inj armedInjector
	fs := errorfs.Wrap(mem, &inj)
	// The engine's WAL is where an apply writes (without it, an apply
	// writes nothing until a flush).
	o := testOptions(fs)
	o.EngineWAL = true
	f, g := openTest(t, fs, "/fsm", o), newLogGen()
	logs := []*raft.Log{g.cmd(t, put("a", "1")), g.cmd(t, put("b", "1")), g.cmd(t, put("c", "1"))}
	f.ApplyBatch(logs[:1])
	inj.p.Store(errorfs.OnIndex(0).WithOps(errorfs.OpWrite))
	res := f.ApplyBatch(logs[1:])
	inj.p.Store(nil)
	for _, r := range res {
		if err, ok := r.(error); !ok || !errors.Is(err, ErrHalted) || !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("result %v, want a halt", r)
		}
	}
	if f.AppliedIndex() != 1 || !errors.Is(f.Err(), ErrHalted) {
		t.Fatalf("applied %d, Err %v", f.AppliedIndex(), f.Err())
	}
	// Everything after fails the same way; reads still work.
	if r := applyOne(t, f, g.cmd(t, put("d", "1"))); !errors.Is(r.(error), ErrHalted) {
		t.Fatalf("apply after halt: %v", r)
	}
	if err := f.WaitApplied(context.Background(), 5); !errors.Is(err, ErrHalted) {
		t.Fatalf("WaitApplied after halt: %v", err)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
		t.Fatalf("Snapshot after halt: %v", err)
	}
	if kv := getValue(t, f, "a"); kv == nil {
		t.Fatal("read after halt failed")
	}
	f.Close()
	f = openTest(t, mem, "/fsm", nil)
	if f.AppliedIndex() != 1 {
		t.Fatalf("applied after restart %d", f.AppliedIndex())
	}
	f.ApplyBatch(logs)
	if getValue(t, f, "c") == nil {
		t.Fatal("replay after restart did not apply")
	}
}

// TestRestoreFaultSweep fails each file system operation of a Restore in
// turn. Each time, the FSM either has the snapshot's state, or the old state
// and keeps working, or is halted; and reopening the directory gives the old
// or the new state, complete.
func TestRestoreFaultSweep(t *testing.T) {
	srcFS := vfs.NewMem()
	src, _ := filledFSM(t, srcFS, "/src", 200)
	snap := snapshotBytes(t, src)
	sumNew := mustSum(t, src)

	var succeeded, failed, halted int
	for i := int64(0); ; i++ {
		mem := vfs.NewMem()
		var inj armedInjector
		fs := errorfs.Wrap(mem, &inj)
		f, g := openTest(t, fs, "/fsm", nil), newLogGen()
		applyOne(t, f, g.cmd(t, put("old", "1")))
		sumOld := mustSum(t, f)

		ii := errorfs.OnIndex(i)
		inj.p.Store(ii)
		err := restoreBytes(f, snap)
		inj.p.Store(nil)
		if !ii.Injected() {
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("swept %d operations: %d restores succeeded anyway, %d failed cleanly, %d halted",
				i, succeeded, failed, halted)
			return
		}
		switch {
		case err == nil:
			succeeded++
			if mustSum(t, f) != sumNew {
				t.Fatalf("op %d: Restore succeeded with a wrong state", i)
			}
		case f.Err() == nil:
			failed++
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("op %d: error %v does not wrap the injected one", i, err)
			}
			if mustSum(t, f) != sumOld {
				t.Fatalf("op %d: failed Restore (%v) changed the state", i, err)
			}
			applyOne(t, f, g.cmd(t, put("after", "1")))
			sumOld = mustSum(t, f)
		default:
			halted++
			if !errors.Is(f.Err(), ErrHalted) {
				t.Fatalf("op %d: Err %v", i, f.Err())
			}
		}
		f.Close()
		f = openTest(t, mem, "/fsm", nil)
		if s := mustSum(t, f); s != sumOld && s != sumNew {
			t.Fatalf("op %d (%v): reopened state is neither the old nor the new", i, err)
		}
		f.Close()
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []*Options{
		{MaxSessions: -1},
		{SessionTTL: -time.Second},
		{MaxValueSize: 1 << 40},
		{MaxSessionResultBytes: -1},
	} {
		o.Engine = testOptions(vfs.NewMem()).Engine
		if _, err := New("/fsm", o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New(%+v): %v", o, err)
		}
	}
}

func TestNewCommand(t *testing.T) {
	for _, req := range []proto.Message{
		&cairnpb.PutRequest{ClientId: "a", Seq: 1},
		&cairnpb.DeleteRequest{ClientId: "a", Seq: 1},
		&cairnpb.DeleteRangeRequest{ClientId: "a", Seq: 1},
		&cairnpb.TxnRequest{ClientId: "a", Seq: 1},
	} {
		cmd, err := NewCommand(req)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.ClientId != "a" || cmd.Seq != 1 || cmd.Op == nil {
			t.Fatalf("NewCommand(%v) = %v", req, cmd)
		}
		b, err := Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Decode(b); err != nil || !proto.Equal(got, cmd) {
			t.Fatalf("Decode(Encode(%v)) = %v, %v", cmd, got, err)
		}
	}
	if _, err := NewCommand(&cairnpb.GetRequest{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewCommand(GetRequest): %v", err)
	}
}

func TestMetrics(t *testing.T) {
	f, _ := filledFSM(t, vfs.NewMem(), "/fsm", 200)
	m, err := f.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	p := MetricsProto(m)
	var files uint64
	for _, l := range p.Levels {
		files += l.NumFiles
	}
	if files == 0 || p.Flushes == 0 || p.BytesIngested == 0 || len(p.Levels) != len(m.Levels) {
		t.Fatalf("metrics %v", p)
	}
	f.Close()
	if _, err := f.Metrics(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Metrics after Close: %v", err)
	}
}
