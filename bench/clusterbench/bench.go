package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// workload is one measured run's shape.
type workload struct {
	name, op         string
	clients, vsize   int
	label            string
	writes, linReads bool
}

var allWorkloads = []workload{
	{name: "put1", op: "put", clients: 1, vsize: 256, label: "put, 1 client"},
	{name: "put16", op: "put", clients: 16, vsize: 256, label: "put, 16 clients"},
	{name: "put64", op: "put", clients: 64, vsize: 256, label: "put, 64 clients"},
	{name: "put256", op: "put", clients: 256, vsize: 256, label: "put, 256 clients"},
	{name: "lin64", op: "lin", clients: 64, vsize: 256, label: "linearizable get, 64 clients"},
	{name: "ser64", op: "ser", clients: 64, vsize: 256, label: "serializable get, 64 clients"},
	{name: "mix64", op: "mix", clients: 64, vsize: 256, label: "90/10 get/put, 64 clients"},
	{name: "put4k64", op: "put", clients: 64, vsize: 4096, label: "put 4 KiB, 64 clients"},
}

// cluster is three running server processes of one system.
type cluster struct {
	target    string
	procs     []*exec.Cmd
	endpoints []string
	dir       string
	stopped   bool
}

type sample struct{ cpu, wbytes float64 }

func (c *cluster) sample() (sample, error) {
	var s sample
	for _, p := range c.procs {
		pid := p.Process.Pid
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return s, err
		}
		// Fields after the ")" of comm: state is field 3; utime 14, stime 15.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		stm, _ := strconv.ParseFloat(f[12], 64)
		s.cpu += (ut + stm) / 100 // USER_HZ
		io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		if err != nil {
			return s, err
		}
		for _, line := range strings.Split(string(io), "\n") {
			if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
				w, _ := strconv.ParseFloat(v, 64)
				s.wbytes += w
			}
		}
	}
	return s, nil
}

func (c *cluster) stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	for _, p := range c.procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(c.dir)
}

type benchConfig struct {
	self, cairnNode string
	baseNode        string // cairn-node built from --base-root, target "base"
	work            string
	basePort        int
	pprof           bool
}

func startCairn(bc *benchConfig, round int, target string) (*cluster, error) {
	dir := filepath.Join(bc.work, fmt.Sprintf("%s-%d", target, round))
	c := &cluster{target: target, dir: dir}
	p := bc.basePort
	bin := bc.cairnNode
	if target == "base" {
		p += 200
		bin = bc.baseNode
	}
	gossip := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", p+10*i+2) }
	for i := 0; i < 3; i++ {
		var join []string
		for j := 0; j < 3; j++ {
			if j != i {
				join = append(join, gossip(j))
			}
		}
		grpc := fmt.Sprintf("127.0.0.1:%d", p+10*i)
		args := []string{
			"--id", fmt.Sprintf("n%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--grpc-addr", grpc, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", p+10*i+1),
			"--gossip-addr", gossip(i), "--bootstrap-expect", "3", "--join", strings.Join(join, ","),
			"--log-level", "warn",
		}
		cmd := exec.Command(bin, args...)
		if bc.pprof {
			cmd.Env = append(os.Environ(), fmt.Sprintf("CAIRN_PPROF_ADDR=127.0.0.1:%d", p+10*i+5))
		}
		if err := startLogged(cmd, filepath.Join(bc.work, fmt.Sprintf("%s-n%d-r%d.log", target, i+1, round))); err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, cmd)
		c.endpoints = append(c.endpoints, grpc)
	}
	return c, nil
}

func startEtcd(bc *benchConfig, round int) (*cluster, error) {
	dir := filepath.Join(bc.work, fmt.Sprintf("etcd-%d", round))
	c := &cluster{target: "etcd", dir: dir}
	p := bc.basePort + 100
	var initial []string
	for i := 0; i < 3; i++ {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, p+10*i+1))
	}
	for i := 0; i < 3; i++ {
		cu := fmt.Sprintf("http://127.0.0.1:%d", p+10*i)
		cmd := exec.Command(bc.self, "etcd", "--name", fmt.Sprintf("e%d", i+1),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("e%d", i+1)),
			"--client-url", cu, "--peer-url", fmt.Sprintf("http://127.0.0.1:%d", p+10*i+1),
			"--initial-cluster", strings.Join(initial, ","))
		if err := startLogged(cmd, filepath.Join(bc.work, fmt.Sprintf("etcd-e%d-r%d.log", i+1, round))); err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, cmd)
		c.endpoints = append(c.endpoints, fmt.Sprintf("127.0.0.1:%d", p+10*i))
	}
	return c, nil
}

func startLogged(cmd *exec.Cmd, logName string) error {
	f, err := os.Create(logName)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Start()
}

// runOne runs a load process against c and measures it.
func runOne(bc *benchConfig, c *cluster, w workload, dur time.Duration, nkeys int) (result, error) {
	args := []string{"load", "--target", loadTarget(c.target), "--endpoints", strings.Join(c.endpoints, ","),
		"--op", w.op, "--clients", strconv.Itoa(w.clients), "--value-size", strconv.Itoa(w.vsize),
		"--keys", strconv.Itoa(nkeys), "--duration", dur.String()}
	if bc.pprof {
		// The load generator shares the machine's cores with the servers:
		// its CPU per operation is part of what a run measures.
		args = append(args, "--cpuprofile", filepath.Join(bc.work, fmt.Sprintf("%s-load-%s.profile.pb.gz", w.name, c.target)))
	}
	cmd := exec.Command(bc.self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	sc := bufio.NewScanner(out)
	var s0, s1 sample
	var lr loadResult
	var profs []chan struct{}
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "start":
			s0, _ = c.sample()
			if bc.pprof && c.target == "cairn" {
				profs = profile(bc, w.name, dur)
			}
		case line == "end":
			s1, _ = c.sample()
		case strings.HasPrefix(line, "{"):
			if err := json.Unmarshal([]byte(line), &lr); err != nil {
				return result{}, err
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return result{}, fmt.Errorf("%s %s: load: %w", c.target, w.name, err)
	}
	for _, p := range profs {
		<-p
	}
	r := result{load: lr}
	if lr.Ops > 0 {
		r.opsPerSec = float64(lr.Ops) / lr.Seconds
		r.cpuPerK = (s1.cpu - s0.cpu) / float64(lr.Ops) * 1000
		r.bytesPerOp = (s1.wbytes - s0.wbytes) / float64(lr.Ops)
	}
	return r, nil
}

// profile fetches CPU, mutex and block profiles of every cairn node for the
// measured window into the work directory.
func profile(bc *benchConfig, name string, dur time.Duration) []chan struct{} {
	var chs []chan struct{}
	secs := max(1, int(dur.Seconds())-1)
	for i := 0; i < 3; i++ {
		base := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", bc.basePort+10*i+5)
		for _, kind := range []string{"profile", "mutex", "block"} {
			ch := make(chan struct{})
			chs = append(chs, ch)
			go func() {
				defer close(ch)
				u := base + kind + "?seconds=" + strconv.Itoa(secs)
				resp, err := http.Get(u)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				f, err := os.Create(filepath.Join(bc.work, fmt.Sprintf("%s-n%d.%s.pb.gz", name, i+1, kind)))
				if err != nil {
					return
				}
				io.Copy(f, resp.Body)
				f.Close()
			}()
		}
	}
	return chs
}

type result struct {
	load                           loadResult
	opsPerSec, cpuPerK, bytesPerOp float64
}

// waitReady runs tiny puts until the cluster accepts one.
func waitReady(bc *benchConfig, c *cluster) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		cmd := exec.Command(bc.self, "load", "--target", loadTarget(c.target), "--endpoints", strings.Join(c.endpoints, ","),
			"--op", "fill", "--clients", "1", "--keys", "1")
		if err := cmd.Run(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s cluster not ready after 90s", c.target)
		}
		time.Sleep(time.Second)
	}
}

func fill(bc *benchConfig, c *cluster, nkeys int) error {
	cmd := exec.Command(bc.self, "load", "--target", loadTarget(c.target), "--endpoints", strings.Join(c.endpoints, ","),
		"--op", "fill", "--clients", "256", "--keys", strconv.Itoa(nkeys))
	cmd.Stderr = os.Stderr
	return cmd.Run()
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 3, "rounds (each: fresh clusters, every workload once per system)")
	dur := fs.Duration("duration", 20*time.Second, "measured duration of each run (plus 1s warm-up)")
	names := fs.String("workloads", "", "comma-separated workloads (default all): put1,put16,put64,put256,lin64,ser64,mix64,put4k64")
	targets := fs.String("targets", "cairn,etcd", "systems to run")
	nkeys := fs.Int("keys", 100000, "key space (8-byte keys)")
	out := fs.String("out", "", "also write the markdown report to this file")
	work := fs.String("work", "", "work directory (data, logs, profiles); default a new temporary directory, kept")
	port := fs.Int("base-port", 23000, "first port used")
	pprof := fs.Bool("profile", false, "fetch CPU, mutex and block profiles of the cairn nodes for every cairn run, and a CPU profile of every load generator (into the work directory)")
	root := fs.String("root", "../..", "the cairn repository root (cairn-node is built from it)")
	baseRoot := fs.String("base-root", "", "another cairn tree (e.g. an older commit's `git archive`), run as target \"base\" for before/after figures: add base to --targets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	wls := allWorkloads
	if *names != "" {
		wls = nil
		for _, n := range strings.Split(*names, ",") {
			i := slices.IndexFunc(allWorkloads, func(w workload) bool { return w.name == n })
			if i < 0 {
				return fmt.Errorf("unknown workload %q", n)
			}
			wls = append(wls, allWorkloads[i])
		}
	}
	tgts := strings.Split(*targets, ",")
	bc := &benchConfig{basePort: *port, pprof: *pprof}
	var err error
	if bc.self, err = os.Executable(); err != nil {
		return err
	}
	if *work == "" {
		if *work, err = os.MkdirTemp("", "clusterbench-"); err != nil {
			return err
		}
	}
	bc.work = *work
	if err := os.MkdirAll(bc.work, 0o755); err != nil {
		return err
	}
	bc.cairnNode = filepath.Join(bc.work, "cairn-node")
	build := exec.Command("go", "build", "-o", bc.cairnNode, "./cmd/node")
	build.Dir = *root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building cairn-node: %w", err)
	}
	if *baseRoot != "" {
		bc.baseNode = filepath.Join(bc.work, "cairn-node-base")
		build := exec.Command("go", "build", "-o", bc.baseNode, "./cmd/node")
		build.Dir = *baseRoot
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building base cairn-node: %w", err)
		}
	}
	commit, _ := exec.Command("git", "-C", *root, "rev-parse", "--short", "HEAD").Output()
	fmt.Fprintf(os.Stderr, "clusterbench: work directory %s\n", bc.work)
	started := time.Now()

	res := map[string]map[string][]result{} // target -> workload -> per round
	for _, t := range tgts {
		res[t] = map[string][]result{}
	}
	for r := 0; r < *rounds; r++ {
		cls := map[string]*cluster{}
		for _, t := range tgts {
			var c *cluster
			if t == "cairn" || t == "base" {
				c, err = startCairn(bc, r, t)
			} else {
				c, err = startEtcd(bc, r)
			}
			if err != nil {
				return err
			}
			defer c.stop()
			if err := waitReady(bc, c); err != nil {
				return err
			}
			if err := fill(bc, c, *nkeys); err != nil {
				return fmt.Errorf("%s: fill: %w", t, err)
			}
			cls[t] = c
		}
		order := slices.Clone(tgts)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, w := range wls {
			for _, t := range order {
				time.Sleep(500 * time.Millisecond)
				rr, err := runOne(bc, cls[t], w, *dur, *nkeys)
				if err != nil {
					return err
				}
				res[t][w.name] = append(res[t][w.name], rr)
				fmt.Fprintf(os.Stderr, "round %d %-6s %-8s %8.0f ops/s  p50 %6.2f p99 %6.2f p99.9 %6.2f ms  cpu %.3f s/kop  %7.0f B/op  errors %d\n",
					r+1, t, w.name, rr.opsPerSec, rr.load.P50, rr.load.P99, rr.load.P999, rr.cpuPerK, rr.bytesPerOp, rr.load.Errors)
			}
		}
		for _, t := range tgts {
			cls[t].stop()
		}
	}
	host, _ := os.Hostname()
	cpu := cpuModel()
	var b strings.Builder
	fmt.Fprintf(&b, "### Cluster benchmark: cairn vs etcd v3.7.3 (bench/clusterbench)\n\n")
	fmt.Fprintf(&b, "Date %s, commit %s, machine %s (%d CPUs, %s; 2-core shared noisy machine). Command: `make bench-cluster CLUSTER_ARGS=\"%s\"` "+
		"(%d rounds, %v per run + 1 s warm-up, %d keys of 8 bytes). Took %v.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(commit)), host, runtime.NumCPU(), cpu,
		strings.Join(args, " "), *rounds, *dur, *nkeys, time.Since(started).Round(time.Second))
	b.WriteString("Medians over rounds (min–max of throughput in brackets). Latency in ms. CPU = server CPU seconds per 1,000 ops (3 processes); disk = bytes written per op (3 processes).\n\n")
	b.WriteString("| workload | cairn ops/s | cairn p50 / p99 / p99.9 | etcd ops/s | etcd p50 / p99 / p99.9 | **cairn / etcd** | p99 ratio | CPU/kop cairn / etcd | disk B/op cairn / etcd |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range wls {
		c, e := res["cairn"][w.name], res["etcd"][w.name]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | **%s** | %s | %s / %s | %s / %s |\n", w.label,
			tput(c), lat(c), tput(e), lat(e),
			ratio(med(c, opsF), med(e, opsF), "×"), ratio(med(c, p99F), med(e, p99F), "×"),
			f3(med(c, cpuF)), f3(med(e, cpuF)), f0(med(c, bytesF)), f0(med(e, bytesF)))
	}
	if _, ok := res["base"]; ok {
		fmt.Fprintf(&b, "\nBefore/after in the same run (base = %s):\n\n", *baseRoot)
		b.WriteString("| workload | cairn ops/s | cairn p50 / p99 / p99.9 | base ops/s | base p50 / p99 / p99.9 | **cairn / base** | p99 ratio | CPU/kop cairn / base | disk B/op cairn / base |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
		for _, w := range wls {
			c, e := res["cairn"][w.name], res["base"][w.name]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | **%s** | %s | %s / %s | %s / %s |\n", w.label,
				tput(c), lat(c), tput(e), lat(e),
				ratio(med(c, opsF), med(e, opsF), "×"), ratio(med(c, p99F), med(e, p99F), "×"),
				f3(med(c, cpuF)), f3(med(e, cpuF)), f0(med(c, bytesF)), f0(med(e, bytesF)))
		}
	}
	fmt.Print(b.String())
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.WriteString(f, "\n"+b.String()); err != nil {
			return err
		}
	}
	return nil
}

func opsF(r result) float64   { return r.opsPerSec }
func p50F(r result) float64   { return r.load.P50 }
func p99F(r result) float64   { return r.load.P99 }
func p999F(r result) float64  { return r.load.P999 }
func cpuF(r result) float64   { return r.cpuPerK }
func bytesF(r result) float64 { return r.bytesPerOp }

func med(rs []result, f func(result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func tput(rs []result) string {
	if len(rs) == 0 {
		return "–"
	}
	lo := slices.MinFunc(rs, func(a, b result) int { return cmpF(a.opsPerSec, b.opsPerSec) }).opsPerSec
	hi := slices.MaxFunc(rs, func(a, b result) int { return cmpF(a.opsPerSec, b.opsPerSec) }).opsPerSec
	return fmt.Sprintf("%s (%s–%s)", f0(med(rs, opsF)), f0(lo), f0(hi))
}

func lat(rs []result) string {
	if len(rs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f / %.2f / %.1f", med(rs, p50F), med(rs, p99F), med(rs, p999F))
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ratio(a, b float64, suffix string) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f%s", a/b, suffix)
}

func f0(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	if len(s) > 3 && v >= 10000 {
		return s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func loadTarget(t string) string {
	if t == "base" {
		return "cairn"
	}
	return t
}
