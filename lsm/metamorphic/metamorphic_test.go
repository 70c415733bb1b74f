package metamorphic

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed   = flag.Uint64("seed", 0, "replay this seed (0: draw random seeds)")
	flagSeeds  = flag.Int("seeds", 0, "number of random seeds to run (0: 3, or 1 under -race/-short)")
	flagOps    = flag.Int("ops", 0, "operations per workload (0: 4000, or 800 under -race/-short)")
	flagConfig = flag.String("config", "", "comma-separated config names to run (empty: all)")
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := engineGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "engine goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// engineGoroutines waits up to d for every goroutine running engine code
// (package lsm itself) to exit and returns the stacks of those left.
func engineGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "github.com/cairnkv/cairn/lsm.") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func numOps() int {
	switch {
	case *flagOps > 0:
		return *flagOps
	case raceEnabled || testing.Short():
		return 800
	}
	return 4000
}

func seeds() []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	n := *flagSeeds
	if n == 0 {
		n = 3
		if raceEnabled || testing.Short() {
			n = 1
		}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = rand.Uint64()
	}
	return out
}

func selectedConfigs(seed uint64) []Config {
	all := Configs(seed)
	if *flagConfig == "" {
		return all
	}
	var out []Config
	for _, c := range all {
		for _, name := range strings.Split(*flagConfig, ",") {
			if c.Name == name {
				out = append(out, c)
			}
		}
	}
	return out
}

// report renders a failure with everything needed to replay it.
func report(w *Workload, cfg Config, n int, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n", err)
	fmt.Fprintf(&b, "seed %d, %d ops, sync mode %s, config %s\n", w.Seed, n, w.SyncMode, cfg)
	fmt.Fprintf(&b, "replay: go test ./lsm/metamorphic -run 'TestMetamorphic$' -seed %d -ops %d -config %s\n", w.Seed, n, cfg.Name)
	var f *Failure
	if errors.As(err, &f) {
		from := max(0, f.OpIndex-15)
		fmt.Fprintf(&b, "ops #%d..#%d:\n", from, f.OpIndex)
		for i := from; i <= f.OpIndex && i < len(w.Ops); i++ {
			fmt.Fprintf(&b, "  #%d %s\n", i, w.Ops[i])
		}
	}
	return b.String()
}

// TestMetamorphic runs random workloads under every config, checks each run
// against the model, and compares the runs' histories with each other.
func TestMetamorphic(t *testing.T) {
	n := numOps()
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := Generate(seed, n)
			cfgs := selectedConfigs(seed)
			results := make([]*Result, len(cfgs))
			t.Run("configs", func(t *testing.T) {
				for i, cfg := range cfgs {
					t.Run(cfg.Name, func(t *testing.T) {
						t.Parallel()
						res, err := Run(w, cfg)
						if err != nil {
							t.Fatal(report(w, cfg, n, err))
						}
						t.Logf("%s: %+v", cfg.Name, res.Stats)
						checkExercised(t, cfg, n, res.Stats)
						results[i] = res
					})
				}
			})
			if t.Failed() {
				return
			}
			for i := 1; i < len(results); i++ {
				at, err := CompareHistories(results[0], results[i])
				if err != nil {
					t.Errorf("seed %d (%d ops, sync mode %s): %v\nreplay: go test ./lsm/metamorphic -run 'TestMetamorphic$' -seed %d -ops %d -config %s,%s",
						seed, n, w.SyncMode, err, seed, n, results[0].Config, results[i].Config)
				} else if at >= 0 {
					t.Logf("%s and %s compared up to op #%d, a crash after which they recovered different numbers of unsynced writes",
						results[0].Config, results[i].Config, at)
				}
			}
		})
	}
}

// checkExercised fails if a long enough run of a config meant to stress
// flushes and compactions did not get any: the test would be weaker than it
// claims.
func checkExercised(t *testing.T, cfg Config, n int, s Stats) {
	if cfg.Opts.MinBlobSize > 0 && cfg.Opts.MinBlobSize < 1024 && n >= 2000 && s.MaxBlobFiles == 0 {
		t.Errorf("config %s ran %d ops and never had a blob file", cfg.Name, n)
	}
	if cfg.Name != "tiny" || n < 2000 {
		return
	}
	if s.Flushes == 0 || s.Compactions == 0 || s.MaxLevelFiles < 2 {
		t.Errorf("config tiny ran %d ops with only %d flushes, %d compactions, at most %d files in a level below L0",
			n, s.Flushes, s.Compactions, s.MaxLevelFiles)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := Generate(42, 500), Generate(42, 500)
	if a.SyncMode != b.SyncMode || len(a.Ops) != len(b.Ops) {
		t.Fatalf("two workloads of seed 42 differ: %s/%d vs %s/%d ops", a.SyncMode, len(a.Ops), b.SyncMode, len(b.Ops))
	}
	for i := range a.Ops {
		if a.Ops[i].String() != b.Ops[i].String() {
			t.Fatalf("op #%d differs: %s vs %s", i, a.Ops[i], b.Ops[i])
		}
	}
	c := Generate(43, 500)
	same := 0
	for i := range a.Ops {
		if a.Ops[i].String() == c.Ops[i].String() {
			same++
		}
	}
	if same > len(a.Ops)/2 {
		t.Fatalf("seeds 42 and 43 produced %d identical ops of %d", same, len(a.Ops))
	}
}

// TestGenerateCoversEveryOp checks that a workload of moderate size holds
// every kind of op the runner knows, so that no kind is silently never
// tested.
func TestGenerateCoversEveryOp(t *testing.T) {
	w := Generate(7, 3000)
	seen := make(map[string]int)
	var note func(op Op)
	note = func(op Op) {
		seen[fmt.Sprintf("%T", op)]++
		if it, ok := op.(*iterOp); ok {
			for _, s := range it.steps {
				seen[fmt.Sprintf("step%d", s.kind)]++
				if s.op != nil {
					seen["nested"]++
				}
			}
		}
	}
	for _, op := range w.Ops {
		note(op)
	}
	want := []string{"*metamorphic.putOp", "*metamorphic.deleteOp", "*metamorphic.deleteRangeOp",
		"*metamorphic.batchOp", "*metamorphic.getOp", "*metamorphic.newSnapshotOp",
		"*metamorphic.closeSnapshotOp", "*metamorphic.iterOp", "*metamorphic.flushOp",
		"*metamorphic.compactOp", "*metamorphic.checkpointOp", "*metamorphic.reopenOp",
		"*metamorphic.crashOp", "*metamorphic.metricsOp", "*metamorphic.invalidOp", "nested"}
	for k := stepFirst; k <= stepDB; k++ {
		want = append(want, fmt.Sprintf("step%d", k))
	}
	for _, k := range want {
		if seen[k] == 0 {
			t.Errorf("3000 generated ops hold no %s", k)
		}
	}
}

func TestModelIter(t *testing.T) {
	m := newModel()
	for _, k := range []string{"a", "b", "c", "d"} {
		m.set([]byte(k), []byte("v"+k))
	}
	it := newModelIter(m, []byte("b"), []byte("d"))
	type step struct {
		do   func() bool
		want string // "" means exhausted
	}
	steps := []step{
		{it.first, "b"}, {it.next, "c"}, {it.next, ""}, {it.next, ""}, {it.prev, ""},
		{it.last, "c"}, {it.prev, "b"}, {it.prev, ""},
		{func() bool { return it.seekGE([]byte("a")) }, "b"},
		{func() bool { return it.seekGE([]byte("bb")) }, "c"},
		{func() bool { return it.seekGE([]byte("d")) }, ""},
		{func() bool { return it.seekLT([]byte("z")) }, "c"},
		{func() bool { return it.seekLT([]byte("c")) }, "b"},
		{func() bool { return it.seekLT([]byte("b")) }, ""},
	}
	for i, s := range steps {
		ok := s.do()
		got := ""
		if ok {
			got = string(it.key())
			if string(it.value()) != "v"+got {
				t.Fatalf("step %d: value %q at key %q", i, it.value(), got)
			}
		}
		if got != s.want || ok != (s.want != "") {
			t.Fatalf("step %d: got %q (ok=%v), want %q", i, got, ok, s.want)
		}
	}
}

func TestModelDiff(t *testing.T) {
	m := newModel()
	m.set([]byte("a"), []byte("1"))
	m.set([]byte("b"), []byte{})
	m.deleteRange([]byte("b"), []byte("c"))
	if d := m.diff([]kv{{[]byte("a"), []byte("1")}}); d != "" {
		t.Fatalf("diff of equal contents: %s", d)
	}
	for _, got := range [][]kv{
		nil,
		{{[]byte("a"), []byte("2")}},
		{{[]byte("a"), []byte("1")}, {[]byte("b"), []byte{}}},
		{{[]byte("b"), []byte("1")}, {[]byte("a"), []byte("1")}},
	} {
		if m.diff(got) == "" {
			t.Errorf("diff of %v against the model is empty", got)
		}
	}
}

func TestCompareHistories(t *testing.T) {
	mk := func(name string, lines ...string) *Result { return &Result{Config: name, History: lines} }
	a := mk("a", "#0 put → ok", "#1 crash() → crash: recovered 1 of 2 unsynced writes", "#2 get → 1B")
	b := mk("b", "#0 put → ok", "#1 crash() → crash: recovered 2 of 2 unsynced writes", "#2 get → 2B")
	if at, err := CompareHistories(a, b); err != nil || at != 1 {
		t.Fatalf("CompareHistories = %d, %v; want divergence at 1", at, err)
	}
	c := mk("c", "#0 put → ok", "#1 crash() → crash: recovered 1 of 2 unsynced writes", "#2 get → 2B")
	if _, err := CompareHistories(a, c); err == nil {
		t.Fatal("CompareHistories missed a difference after equal crashes")
	}
	if at, err := CompareHistories(a, a); err != nil || at != -1 {
		t.Fatalf("CompareHistories(a, a) = %d, %v", at, err)
	}
}
