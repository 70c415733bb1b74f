// Command enginebench runs cmd/dbbench against cairn and its peers, one
// child process per engine per round, interleaved (A B C D A B C D …), and
// prints a markdown table of medians with min–max and cairn / best-peer
// ratios, ready for bench/RESULTS.md:
//
//	go run ./cmd/enginebench --rounds 3 --scale 0.25 --out results.md
//
// Two shapes: "small" (100-byte values × 1,000,000 keys) and "large"
// (4 KiB values × 200,000 keys, Badger's ValueThreshold 1 KiB so its value
// log is used, and a "pebble-vs" variant with Pebble's value separation on
// for values ≥ 1 KiB). --scale multiplies the key counts.
//
// Peak RSS and CPU seconds are the child's (wait4's rusage: ru_maxrss,
// ru_utime + ru_stime); throughput, write and space amplification come
// from the child's JSON report (see package dbbench). --raw saves every
// report; --from re-renders the tables (and --png) from such a file.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cairnkv/cairn/bench/engine/dbbench"
)

// shape is one value size and key count with its engine-specific flags.
type shape struct {
	Name      string
	Num       int
	ValueSize int
	Engines   []string
	Args      map[string][]string // extra dbbench flags per engine
}

// run is one child process's outcome.
type run struct {
	Shape, Engine string
	Round         int
	Report        *dbbench.Report
	CPUSeconds    float64
	MaxRSSBytes   int64
	WallSeconds   float64
}

// saved is the --raw file.
type saved struct {
	Date, Command, Machine string
	Rounds                 int
	Shapes                 []shape
	Runs                   []run
}

func main() {
	enginesF := flag.String("engines", "cairn,pebble,badger,goleveldb", "engines, in run order")
	rounds := flag.Int("rounds", 3, "rounds (each runs every engine once per shape)")
	shapesF := flag.String("shapes", "small,large", "shapes: small (100 B × 1,000,000), large (4 KiB × 200,000)")
	scale := flag.Float64("scale", 1, "multiplies the key counts")
	reads := flag.Int("reads", 0, "dbbench --reads (0: num)")
	benchmarks := flag.String("benchmarks", "", "dbbench --benchmarks (empty: dbbench's default list)")
	pebbleVS := flag.Bool("pebble-vs", true, "in the large shape, also run pebble with value separation (engine pebble-vs)")
	cairnBlob := flag.Int64("cairn-min-blob-size", 0, "dbbench --cairn-min-blob-size for cairn in the large shape (0: not passed, the engine default; negative: no separation)")
	memScale := flag.Float64("memory-scale", 1, "multiplies the 64 MiB block cache and memtable of every engine (to keep data/memtable as at full size when --scale < 1)")
	bin := flag.String("dbbench", "", "dbbench binary (empty: go build ./cmd/dbbench into a temporary directory)")
	out := flag.String("out", "", "also write the markdown report to this file")
	raw := flag.String("raw", "", "save every child's report (JSON) to this file")
	from := flag.String("from", "", "render the report from a --raw file instead of running")
	png := flag.String("png", "", "write a PNG of the cairn / best-peer throughput ratios")
	logDir := flag.String("logdir", "", "keep each child's stderr here (default: discarded unless it fails)")
	flag.Parse()

	var s saved
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			fail(err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			fail(err)
		}
	} else {
		s = saved{
			Date:    time.Now().UTC().Format("2006-01-02 15:04 UTC"),
			Command: "go run ./cmd/enginebench " + strings.Join(os.Args[1:], " "),
			Rounds:  *rounds,
			Shapes:  makeShapes(*shapesF, *enginesF, *scale, *pebbleVS, *cairnBlob),
		}
		s.Machine = machine("start")
		path := *bin
		if path == "" {
			tmp, err := os.MkdirTemp("", "enginebench-")
			if err != nil {
				fail(err)
			}
			defer os.RemoveAll(tmp)
			path = filepath.Join(tmp, "dbbench")
			build := exec.Command("go", "build", "-o", path, "./cmd/dbbench")
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fail(fmt.Errorf("building dbbench: %w", err))
			}
		}
		var common []string
		if *reads > 0 {
			common = append(common, fmt.Sprintf("--reads=%d", *reads))
		}
		if *benchmarks != "" {
			common = append(common, "--benchmarks="+*benchmarks)
		}
		if *memScale != 1 {
			def := dbbench.DefaultConfig()
			common = append(common,
				fmt.Sprintf("--cache-size=%d", int64(float64(def.CacheBytes)**memScale)),
				fmt.Sprintf("--memtable-size=%d", int64(float64(def.MemTableBytes)**memScale)))
		}
		for round := 1; round <= *rounds; round++ {
			for _, sh := range s.Shapes {
				for _, e := range sh.Engines {
					r, err := runOne(path, sh, e, round, common, *logDir)
					if err != nil {
						fail(err)
					}
					s.Runs = append(s.Runs, r)
					if *raw != "" {
						writeJSON(*raw, &s) // after every run, so a cut-short run keeps what it has
					}
				}
			}
		}
		s.Machine += "; at end: " + loadAvg()
		if *raw != "" {
			writeJSON(*raw, &s)
		}
	}
	var md bytes.Buffer
	report(&md, &s)
	os.Stdout.Write(md.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, md.Bytes(), 0o644); err != nil {
			fail(err)
		}
	}
	if *png != "" {
		if err := plotRatios(*png, &s); err != nil {
			fail(err)
		}
	}
}

func makeShapes(names, engines string, scale float64, pebbleVS bool, cairnBlob int64) []shape {
	var shapes []shape
	for _, n := range strings.Split(names, ",") {
		sh := shape{Name: n, Engines: strings.Split(engines, ","), Args: map[string][]string{}}
		switch n {
		case "small":
			sh.Num, sh.ValueSize = 1000000, 100
		case "large":
			sh.Num, sh.ValueSize = 200000, 4096
			sh.Args["badger"] = []string{"--badger-value-threshold=1024"}
			sh.Args["pebble-vs"] = []string{"--pebble-value-sep-min=1024"}
			if cairnBlob != 0 {
				sh.Args["cairn"] = []string{fmt.Sprintf("--cairn-min-blob-size=%d", cairnBlob)}
			}
			if pebbleVS && contains(sh.Engines, "pebble") {
				sh.Engines = append(sh.Engines, "pebble-vs")
			}
		default:
			fail(fmt.Errorf("unknown shape %q (small, large)", n))
		}
		sh.Num = max(int(float64(sh.Num)*scale), 100)
		shapes = append(shapes, sh)
	}
	return shapes
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// runOne runs one dbbench child and collects its report and rusage.
func runOne(bin string, sh shape, engine string, round int, common []string, logDir string) (run, error) {
	real := engine
	if engine == "pebble-vs" {
		real = "pebble"
	}
	args := append([]string{"--json", "--engine=" + real, fmt.Sprintf("--num=%d", sh.Num),
		fmt.Sprintf("--value-size=%d", sh.ValueSize), fmt.Sprintf("--seed=%d", round)}, common...)
	args = append(args, sh.Args[engine]...)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	fmt.Fprintf(os.Stderr, "enginebench: round %d %s %s: %s\n", round, sh.Name, engine, strings.Join(args, " "))
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if logDir != "" {
		os.MkdirAll(logDir, 0o755)
		os.WriteFile(filepath.Join(logDir, fmt.Sprintf("%s-%s-%d.log", sh.Name, engine, round)), stderr.Bytes(), 0o644)
	}
	if err != nil {
		return run{}, fmt.Errorf("%s %s round %d: %w\n%s", sh.Name, engine, round, err, tail(stderr.String(), 2000))
	}
	var rep dbbench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return run{}, fmt.Errorf("%s %s round %d: bad report: %w", sh.Name, engine, round, err)
	}
	r := run{Shape: sh.Name, Engine: engine, Round: round, Report: &rep, WallSeconds: wall.Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CPUSeconds = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		r.MaxRSSBytes = ru.Maxrss << 10 // KiB on Linux
	}
	fmt.Fprintf(os.Stderr, "enginebench:   %.1fs wall, %.1fs CPU, peak RSS %d MiB\n", r.WallSeconds, r.CPUSeconds, r.MaxRSSBytes>>20)
	return r, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func machine(when string) string {
	return fmt.Sprintf("%d CPUs, %s/%s; load average (1, 5, 15 min) at %s: %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, when, loadAvg())
}

func loadAvg() string {
	load, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(load)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", " ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginebench: saving --raw:", err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "enginebench:", err)
	os.Exit(1)
}

// stat is the median and range of one figure over the rounds.
type stat struct {
	med, min, max float64
	n             int
}

func summarize(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{med: m, min: s[0], max: s[len(s)-1], n: len(s)}
}

// row is one line of a table: how to get the figure from a run.
type row struct {
	label        string
	higherBetter bool
	unit         string // "ops", "s", "x", "MiB"
	get          func(r *run) (float64, bool)
}

func resultOf(r *run, name string) *dbbench.Result {
	for i := range r.Report.Results {
		if r.Report.Results[i].Name == name {
			return &r.Report.Results[i]
		}
	}
	return nil
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "ops":
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2fM", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.1fk", v/1e3)
		}
		return fmt.Sprintf("%.0f", v)
	case "s":
		if v < 1 {
			return fmt.Sprintf("%.0f ms", v*1e3)
		}
		return fmt.Sprintf("%.1f s", v)
	case "MiB":
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtCell(s stat, unit string) string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 {
		return fmtVal(s.med, unit)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtVal(s.med, unit), fmtVal(s.min, unit), fmtVal(s.max, unit))
}

// ratio is cairn's median over the best peer's median; "best" is the
// highest for higher-is-better figures and the lowest otherwise.
func ratio(meds map[string]stat, engines []string, higherBetter bool) (float64, string) {
	c, ok := meds["cairn"]
	if !ok || c.n == 0 {
		return 0, ""
	}
	best, bestName := 0.0, ""
	for _, e := range engines {
		s, ok := meds[e]
		if e == "cairn" || !ok || s.n == 0 {
			continue
		}
		if bestName == "" || (higherBetter && s.med > best) || (!higherBetter && s.med < best) {
			best, bestName = s.med, e
		}
	}
	if bestName == "" || best == 0 {
		return 0, ""
	}
	return c.med / best, bestName
}

func table(w io.Writer, s *saved, sh shape, rows []row) {
	fmt.Fprintf(w, "| %s | %s | cairn / best peer |\n", "benchmark", strings.Join(sh.Engines, " | "))
	fmt.Fprintf(w, "|---|%s---|\n", strings.Repeat("---|", len(sh.Engines)))
	for _, rw := range rows {
		meds := map[string]stat{}
		for _, e := range sh.Engines {
			var xs []float64
			for i := range s.Runs {
				r := &s.Runs[i]
				if r.Shape == sh.Name && r.Engine == e {
					if v, ok := rw.get(r); ok {
						xs = append(xs, v)
					}
				}
			}
			meds[e] = summarize(xs)
		}
		var cells []string
		for _, e := range sh.Engines {
			cells = append(cells, fmtCell(meds[e], rw.unit))
		}
		rat, best := ratio(meds, sh.Engines, rw.higherBetter)
		rs := "–"
		if best != "" {
			rs = fmt.Sprintf("%.2f (%s)", rat, best)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", rw.label, strings.Join(cells, " | "), rs)
	}
	fmt.Fprintln(w)
}

// benchNames returns the result names of the shape's runs, in run order.
func benchNames(s *saved, sh shape) []string {
	var names []string
	seen := map[string]bool{}
	for i := range s.Runs {
		if s.Runs[i].Shape != sh.Name {
			continue
		}
		for _, res := range s.Runs[i].Report.Results {
			if !seen[res.Name] {
				seen[res.Name] = true
				names = append(names, res.Name)
			}
		}
	}
	return names
}

func throughputRows(names []string) []row {
	var rows []row
	for _, name := range names {
		name := name
		base, _, _ := strings.Cut(name, "@")
		label := name
		switch base {
		case "readrandom2":
			label = strings.Replace(name, "readrandom2", "readrandom, 2 goroutines", 1)
		case "readwhilewriting":
			label = name + " (reader)"
		case "seekrandom":
			label = name + " (seek + 10 next)"
		}
		if strings.HasSuffix(name, "@compacted") {
			label = strings.TrimSuffix(label, "@compacted")
			label = strings.Replace(label, "@compacted", "", 1) + ", after compact + reopen"
		}
		if base == "compact" || base == "reopen" {
			rows = append(rows, row{label: base + " (time)", unit: "s", get: func(r *run) (float64, bool) {
				res := resultOf(r, name)
				return resSeconds(res)
			}})
			continue
		}
		rows = append(rows, row{label: label + ", ops/s", higherBetter: true, unit: "ops", get: func(r *run) (float64, bool) {
			res := resultOf(r, name)
			if res == nil {
				return 0, false
			}
			return res.OpsSec, true
		}})
	}
	return rows
}

func resSeconds(res *dbbench.Result) (float64, bool) {
	if res == nil {
		return 0, false
	}
	return res.Seconds, true
}

func ampRows(names []string) []row {
	var rows []row
	field := func(label, name, unit string, f func(*dbbench.Result) float64) {
		if !contains(names, name) {
			return
		}
		rows = append(rows, row{label: label, unit: unit, get: func(r *run) (float64, bool) {
			res := resultOf(r, name)
			if res == nil {
				return 0, false
			}
			return f(res), true
		}})
	}
	wa := func(x *dbbench.Result) float64 { return x.WriteAmp }
	cwa := func(x *dbbench.Result) float64 { return x.CumWriteAmp }
	sa := func(x *dbbench.Result) float64 { return x.SpaceAmp }
	mbs := func(x *dbbench.Result) float64 { return x.MBSec }
	field("fillseq MB/s (higher is better)", "fillseq", "x", mbs)
	field("fillrandom MB/s (higher is better)", "fillrandom", "x", mbs)
	field("write amp, fillseq", "fillseq", "x", wa)
	field("write amp, fillrandom", "fillrandom", "x", wa)
	field("write amp, fillsync", "fillsync", "x", wa)
	field("write amp, overwrite", "overwrite", "x", wa)
	field("write amp, fillrandom → end of readwhilewriting (cumulative)", "readwhilewriting", "x", cwa)
	field("space amp after fillrandom", "fillrandom", "x", sa)
	field("space amp after overwrite", "overwrite", "x", sa)
	field("space amp after compact + reopen", "reopen@compacted", "x", sa)
	for i := range rows {
		if strings.Contains(rows[i].label, "MB/s") {
			rows[i].higherBetter = true
		}
	}
	rows = append(rows,
		row{label: "peak RSS of the process, MiB", unit: "MiB", get: func(r *run) (float64, bool) { return float64(r.MaxRSSBytes) / (1 << 20), r.MaxRSSBytes > 0 }},
		row{label: "CPU seconds of the process (user + sys)", unit: "x", get: func(r *run) (float64, bool) { return r.CPUSeconds, r.CPUSeconds > 0 }},
		row{label: "wall seconds of the process", unit: "x", get: func(r *run) (float64, bool) { return r.WallSeconds, true }},
	)
	return rows
}

func report(w io.Writer, s *saved) {
	fmt.Fprintf(w, "Date: %s. Command (from bench/engine): `%s`.\n", s.Date, s.Command)
	fmt.Fprintf(w, "Machine: %s. %d rounds; in each round every shape runs every engine once, in the order of the columns, one process each.\n\n", s.Machine, s.Rounds)
	if len(s.Runs) > 0 {
		r := s.Runs[0].Report
		var vs []string
		for k, v := range r.Versions {
			vs = append(vs, k+" "+v)
		}
		sort.Strings(vs)
		fmt.Fprintf(w, "Versions (debug.ReadBuildInfo of dbbench): %s.\n\n", strings.Join(vs, ", "))
		fmt.Fprintf(w, "Keys %d B; values incompressible (random bytes). reopen = Close + Open. Disk bytes written: %s. Space amp: allocated size of the DB directory / (live keys × (key + value)). Cells: median (min–max) over the rounds; ratio: cairn's median / the best peer's median (throughput: >1 means cairn is faster; times, amplification, RSS, CPU: <1 means cairn is lower).\n\n", r.KeySize, r.WriteBytesSource)
	}
	for _, sh := range s.Shapes {
		var any *run
		settings := map[string][]string{}
		for i := range s.Runs {
			r := &s.Runs[i]
			if r.Shape == sh.Name {
				if any == nil {
					any = r
				}
				settings[r.Engine] = r.Report.Settings
			}
		}
		if any == nil {
			continue
		}
		fmt.Fprintf(w, "### %s: %d-byte values × %d keys (reads %d, fillsync %d)\n\n", sh.Name, sh.ValueSize, sh.Num, any.Report.Reads, any.Report.SyncNum)
		fmt.Fprintln(w, "Settings as applied:")
		fmt.Fprintln(w)
		for _, e := range sh.Engines {
			fmt.Fprintf(w, "- %s: %s\n", e, strings.Join(settings[e], "; "))
		}
		fmt.Fprintln(w)
		names := benchNames(s, sh)
		table(w, s, sh, throughputRows(names))
		table(w, s, sh, ampRows(names))
	}
}
