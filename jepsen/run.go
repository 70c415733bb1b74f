package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairnkv/cairn/jepsen/check"
	"github.com/cairnkv/cairn/jepsen/history"
)

// config is one run's settings (the command line).
type config struct {
	nodes           int
	duration        time.Duration
	workload        string
	nemeses         []string
	seed            int64
	mode            string
	out             string
	clients         int
	rate            float64
	opTimeout       time.Duration
	nodeBin         string
	gapMin, holdMin time.Duration
	unsafeReads     bool
	nodeArgs        []string      // more cairn-node flags
	recoveryTimeout time.Duration // default 90s
	startupTimeout  time.Duration // default 60s
	checkTimeout    time.Duration // porcupine search bound (0: the checker's default)
	recheck         string        // a results directory to check again (no run)
	scenarioExpect  string        // what a --scenario run should show
	tls             bool          // TLS between nodes and mutual TLS for clients (local mode)
}

// outcome is what a run found.
type outcome struct {
	valid bool
	// troubles are failures beside the checker's verdict: a node that
	// exited by itself, a cluster that did not recover after healing.
	troubles []string
	dir      string
	result   check.Result
	ops      int
	faults   map[string]int
	summary  string
}

// runTest runs one test and writes its report. The error is for a run
// that could not be carried out (the cluster did not start, the run was
// interrupted); a run that found anomalies returns valid == false.
func runTest(ctx context.Context, cfg config, out io.Writer) (res outcome, err error) {
	if cfg.recoveryTimeout == 0 {
		cfg.recoveryTimeout = 90 * time.Second
	}
	if cfg.startupTimeout == 0 {
		cfg.startupTimeout = 60 * time.Second
	}
	h := history.History{Workload: cfg.workload, Seed: cfg.seed, Nodes: cfg.nodes, Duration: cfg.duration}
	wl, err := newWorkload(cfg.workload, &h)
	if err != nil {
		return res, err
	}
	if cfg.rate == 0 {
		cfg.rate = map[string]float64{"register": 150, "set": 300, "bank": 100}[cfg.workload]
	}
	if cfg.rate < 0 {
		cfg.rate = 0
	}
	res.dir = filepath.Join(cfg.out, fmt.Sprintf("%s-%s-%d", time.Now().UTC().Format("20060102T150405Z"), cfg.workload, cfg.seed))
	if err := os.MkdirAll(res.dir, 0o755); err != nil {
		return res, err
	}
	logf, err := os.Create(filepath.Join(res.dir, "harness.log"))
	if err != nil {
		return res, err
	}
	defer logf.Close()
	var logMu sync.Mutex
	t0 := time.Now()
	logln := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		line := fmt.Sprintf("[%7.2fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
		io.WriteString(out, line)
		io.WriteString(logf, line)
	}
	logln("jepsen: workload %s, %d nodes, %v, nemeses %v, seed %d, mode %s; results in %s",
		cfg.workload, cfg.nodes, cfg.duration, cfg.nemeses, cfg.seed, cfg.mode, res.dir)
	if cfg.scenarioExpect != "" {
		logln("jepsen: scenario: expect %s", cfg.scenarioExpect)
	}
	if cfg.unsafeReads {
		logln("jepsen: UNSAFE: nodes serve linearizable reads locally (--unsafe-local-reads); this run is expected to fail")
	}

	// The cluster.
	var cl Cluster
	switch cfg.mode {
	case "local":
		netOK, why := haveNetControl()
		if netOK {
			for _, r := range sweepLeftovers() {
				logln("jepsen: removed a leftover of an earlier run: %s", r)
			}
		} else {
			logln("jepsen: no network control (%s): nodes share 127.0.0.1, only kill, pause, membership and restart can run", why)
		}
		bin := cfg.nodeBin
		if bin == "" {
			tmp, err := os.MkdirTemp("", "cairn-jepsen-bin-")
			if err != nil {
				return res, err
			}
			defer os.RemoveAll(tmp)
			bin = filepath.Join(tmp, "cairn-node")
			logln("jepsen: building cairn-node")
			if err := buildNode(bin); err != nil {
				return res, err
			}
		}
		extra := cfg.nodeArgs
		if cfg.unsafeReads {
			extra = append(extra, "--unsafe-local-reads")
		}
		lc, err := newLocalCluster(localConfig{Nodes: cfg.nodes, Bin: bin, LogDir: filepath.Join(res.dir, "nodes"), NetNS: netOK, Extra: extra, TLS: cfg.tls})
		if err != nil {
			return res, fmt.Errorf("start cluster: %w", err)
		}
		cl = lc
	case "docker":
		dc, err := newDockerCluster(ctx, cfg, filepath.Join(res.dir, "nodes"), logln)
		if err != nil {
			return res, fmt.Errorf("docker cluster: %w", err)
		}
		cl = dc
		cfg.startupTimeout = max(cfg.startupTimeout, 3*time.Minute) // node4 and node5 join as non-voters first
	}
	defer func() {
		if cerr := cl.Close(); cerr != nil {
			logln("jepsen: cleanup: %v", cerr)
		}
	}()
	var clientTLS *tls.Config
	if ct, ok := cl.(interface{ ClientTLS() *tls.Config }); ok {
		clientTLS = ct.ClientTLS()
	}
	if cfg.tls {
		logln("jepsen: TLS: nodes and clients use certificates made in the work directory")
	}
	admin, err := newClient(endpoints(cl), fmt.Sprintf("jepsen-%d-admin", cfg.seed), clientTLS)
	if err != nil {
		return res, err
	}
	defer admin.Close()
	if err := waitHealthy(ctx, admin, cl, cfg.startupTimeout); err != nil {
		return res, fmt.Errorf("startup: %w", err)
	}
	logln("jepsen: cluster up, leader %s", idOf(cl, leader(ctx, admin, cl)))
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = wl.setup(sctx, admin)
	cancel()
	if err != nil {
		return res, fmt.Errorf("workload setup: %w", err)
	}

	// Traffic and faults.
	rec := newRecorder(h)
	e := &env{cluster: cl, admin: admin}
	var nems []Nemesis
	for _, n := range cfg.nemeses {
		nem := allNemeses[n]()
		if !nem.Available(e) {
			logln("jepsen: nemesis %s is not available here; skipped", n)
			continue
		}
		nems = append(nems, nem)
	}
	sched := &schedule{nemeses: nems, gap: [2]time.Duration{cfg.gapMin, 2 * cfg.gapMin},
		hold: [2]time.Duration{cfg.holdMin, 2 * cfg.holdMin}, rec: rec, log: logln}
	tr := &traffic{wl: wl, clients: cfg.clients, endpoints: endpoints(cl), opTimeout: cfg.opTimeout,
		rate: cfg.rate, seed: cfg.seed, rec: rec, tls: clientTLS}
	rctx, cancelRun := context.WithTimeout(ctx, cfg.duration)
	defer cancelRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sched.run(rctx, e, rand.New(rand.NewPCG(uint64(cfg.seed), 0x6e656d)))
	}()
	trafficErr := tr.run(rctx)
	wg.Wait()
	if ctx.Err() != nil {
		return res, fmt.Errorf("interrupted")
	}
	if trafficErr != nil {
		return res, trafficErr
	}

	// Heal, recover, read.
	logln("jepsen: traffic done (%d ops); healing everything", len(rec.history().Ops))
	healAll(cl, logln)
	if err := waitHealthy(ctx, admin, cl, cfg.recoveryTimeout); err != nil {
		logln("jepsen: RECOVERY FAILED: %v", err)
		res.troubles = append(res.troubles, "the cluster did not recover after healing: "+err.Error())
	} else {
		logln("jepsen: cluster recovered")
	}
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	if err := tr.final(fctx); err != nil {
		logln("jepsen: final reads: %v", err)
	}
	cancel()

	// Check and report.
	hist := rec.history()
	hist.Duration = cfg.duration
	logln("jepsen: checking %d ops", len(hist.Ops))
	res.result = check.CheckWith(hist, check.Options{Timeout: cfg.checkTimeout})
	if cr, ok := cl.(interface{ Crashes() []string }); ok {
		for _, c := range cr.Crashes() {
			logln("jepsen: NODE CRASHED: %s", c)
			res.troubles = append(res.troubles, "node crashed: "+c)
		}
	}
	for _, t := range res.troubles {
		res.result.Notes = append(res.result.Notes, "harness: "+t)
	}
	if kd, ok := cl.(interface{ KeepData(string) }); ok && (!res.result.Valid || len(res.troubles) > 0) {
		kd.KeepData(filepath.Join(res.dir, "data"))
		logln("jepsen: keeping the nodes' data directories in %s", filepath.Join(res.dir, "data"))
	}
	if err := check.WriteReport(res.dir, hist, res.result); err != nil {
		logln("jepsen: report: %v", err)
	}
	writeNemesisLog(filepath.Join(res.dir, "nemesis.log"), hist)
	res.valid = res.result.Valid && len(res.troubles) == 0
	res.ops = len(hist.Ops)
	res.faults = sched.injected
	res.summary = summarize(hist, res)
	for _, l := range topErrors(hist, 8) {
		logln("jepsen: errors: %s", l)
	}
	for i, a := range res.result.Anomalies {
		if i == 10 {
			logln("jepsen: ... %d more anomalies in summary.json", len(res.result.Anomalies)-i)
			break
		}
		logln("jepsen: ANOMALY: %s", a)
	}
	for _, n := range res.result.Notes {
		logln("jepsen: note: %s", n)
	}
	logln("%s", res.summary)
	return res, nil
}

// healAll undoes every fault the nemeses may have left: the network,
// paused and stopped nodes.
func healAll(cl Cluster, logln func(string, ...any)) {
	if cl.CanPartition() {
		if err := cl.Partition(nil); err != nil {
			logln("jepsen: heal network: %v", err)
		}
	}
	for i := range cl.Nodes() {
		_ = cl.Resume(i)
		if err := cl.Start(i); err != nil {
			logln("jepsen: restart %s: %v", cl.Nodes()[i].ID, err)
		}
	}
}

func idOf(cl Cluster, i int) string {
	if i < 0 {
		return "(none)"
	}
	return cl.Nodes()[i].ID
}

// buildNode builds cairn-node into bin, from the module that holds this
// directory (the working directory must be inside it).
func buildNode(bin string) error {
	cmd := exec.Command("go", "build", "-o", bin, "github.com/cairnkv/cairn/cmd/node")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build cairn-node: %v\n%s", err, out)
	}
	return nil
}

func writeNemesisLog(path string, h *history.History) {
	var b strings.Builder
	for _, f := range h.Faults {
		end := "not healed"
		if f.End > 0 {
			end = fmt.Sprintf("%8.2fs", f.End.Seconds())
		}
		fmt.Fprintf(&b, "%8.2fs  %s  %-10s %s\n", f.Start.Seconds(), end, f.Nemesis, f.Detail)
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// summarize is the verdict printed at the end.
func summarize(h *history.History, res outcome) string {
	counts := map[history.Outcome]int{}
	for _, o := range h.Ops {
		counts[o.Outcome]++
	}
	var kinds []string
	for k, n := range res.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	verdict := strings.ToUpper(string(res.result.Status))
	if len(res.troubles) > 0 {
		verdict += fmt.Sprintf(" but %d CLUSTER FAILURE(S) (see notes)", len(res.troubles))
	}
	return fmt.Sprintf("jepsen: %s: %s workload, %d ops (ok %d, fail %d, info %d), faults: %s; report in %s",
		verdict, h.Workload, len(h.Ops), counts[history.OK], counts[history.Fail], counts[history.Info],
		orNone(strings.Join(kinds, ", ")), res.dir)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// topErrors lists the most frequent operation errors, "count f outcome:
// error", with the numbers in messages blurred so that alike errors group.
func topErrors(h *history.History, n int) []string {
	counts := map[string]int{}
	for _, o := range h.Ops {
		if o.Error == "" {
			continue
		}
		msg := o.Error
		if len(msg) > 160 {
			msg = msg[:160]
		}
		counts[fmt.Sprintf("%s %s: %s", o.F, o.Outcome, digits.ReplaceAllString(msg, "N"))]++
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	var lines []string
	for _, k := range keys[:min(n, len(keys))] {
		lines = append(lines, fmt.Sprintf("%6d %s", counts[k], k))
	}
	return lines
}

var digits = regexp.MustCompile(`[0-9]+`)
