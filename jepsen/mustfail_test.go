package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cairnkv/cairn/jepsen/check"
)

// envMustFail gates the harness's cluster tests: they start five
// cairn-node processes in network namespaces (root only) and take minutes,
// so plain `go test ./...` skips them. `make jepsen-mustfail` sets it.
const envMustFail = "CAIRN_JEPSEN"

// TestMustFail is the harness's own test: with nodes that serve
// linearizable reads locally (--unsafe-local-reads, no read-index), short
// register runs under partitions and pauses must report a linearizability
// violation within a bounded number of runs. A harness that passes this
// cluster proves nothing.
//
// CAIRN_JEPSEN_RUNS (default 10) bounds the runs, CAIRN_JEPSEN_TIME (default
// 30s) is each run's length; CAIRN_JEPSEN_ALL=1 makes every run happen (to
// measure "violations in k of n runs") instead of stopping at the first.
func TestMustFail(t *testing.T) {
	if os.Getenv(envMustFail) == "" {
		t.Skipf("set %s=1 (make jepsen-mustfail): starts a cluster in network namespaces, as root, for minutes", envMustFail)
	}
	if ok, why := haveNetControl(); !ok {
		t.Skipf("no network control: %s", why)
	}
	// A run found a violation in 4 of 5 runs on 2026-12-01 but in 2 of 5
	// and 1 of 4 on 2026-12-02 (and 0 of 4 in one CI run), after changes
	// that make followers catch up sooner: 10 runs keep the chance of a
	// false failure near 0.6^10 ≈ 0.6%; the test stops at the first.
	runs := envInt(t, "CAIRN_JEPSEN_RUNS", 10)
	dur := 30 * time.Second
	if s := os.Getenv("CAIRN_JEPSEN_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CAIRN_JEPSEN_TIME: %v", err)
		}
		dur = d
	}
	all := os.Getenv("CAIRN_JEPSEN_ALL") != ""
	bin := filepath.Join(t.TempDir(), "cairn-node")
	if err := buildNode(bin); err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("CAIRN_JEPSEN_OUT")
	if out == "" {
		out = t.TempDir()
	}
	found := 0
	for i := 1; i <= runs; i++ {
		cfg := config{
			nodes: 5, duration: dur, workload: "register", nemeses: []string{"partition", "pause"},
			seed: int64(1000 + i), mode: "local", out: out, clients: 10, opTimeout: 3 * time.Second,
			nodeBin: bin, gapMin: time.Second, holdMin: 3 * time.Second, unsafeReads: true,
		}
		res, err := runTest(context.Background(), cfg, testWriter{t})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if res.result.Status == check.Invalid {
			found++
			t.Logf("run %d (seed %d): violation found, as it must be (%s)", i, cfg.seed, res.dir)
			if !all {
				break
			}
		} else {
			t.Logf("run %d (seed %d): no violation found (%s)", i, cfg.seed, res.result.Status)
		}
	}
	t.Logf("must-fail: violations in %d of the runs made (at most %d)", found, runs)
	if found == 0 {
		t.Fatalf("the harness found no violation in %d runs of a cluster that serves stale reads", runs)
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// testWriter sends the harness's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-min(1, len(p))]))
	return len(p), nil
}
