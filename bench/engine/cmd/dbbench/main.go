// Command dbbench runs db_bench-style workloads against one storage engine
// in this process:
//
//	go run ./cmd/dbbench --engine cairn|pebble|badger|goleveldb \
//	    --benchmarks fillseq,fillrandom,... --num N --value-size V [--json]
//
// Without --benchmarks it runs dbbench.DefaultBenchmarks. With --json it
// prints one JSON report (dbbench.Report) on stdout and the db_bench-style
// lines on stderr. See package dbbench for the workloads and their checks,
// and cmd/enginebench for the interleaved comparison.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	"github.com/cairnkv/cairn/bench/engine/dbbench"
)

func main() {
	def := dbbench.DefaultConfig()
	engine := flag.String("engine", "cairn", "engine: "+strings.Join(dbbench.Engines(), ", "))
	benchmarks := flag.String("benchmarks", strings.Join(dbbench.DefaultBenchmarks, ","), "comma-separated benchmarks, run in order")
	num := flag.Int("num", 1000000, "keys written by a fill")
	reads := flag.Int("reads", 0, "operations of each read benchmark (0: --num)")
	syncNum := flag.Int("sync-num", 0, "writes of fillsync (0: num/100)")
	valueSize := flag.Int("value-size", 100, "value size in bytes")
	dbDir := flag.String("db", "", "DB directory, deleted at the end (default: a new directory under $TMPDIR)")
	seed := flag.Uint64("seed", 0, "workload seed (0: from the clock)")
	asJSON := flag.Bool("json", false, "print a JSON report on stdout (the text lines go to stderr)")
	flag.Int64Var(&def.CacheBytes, "cache-size", def.CacheBytes, "block cache bytes")
	flag.Int64Var(&def.MemTableBytes, "memtable-size", def.MemTableBytes, "memtable bytes")
	flag.Float64Var(&def.BloomBitsKey, "bloom-bits", def.BloomBitsKey, "Bloom filter bits per key")
	flag.Int64Var(&def.BadgerValueThreshold, "badger-value-threshold", 0, "Badger ValueThreshold (0: Badger's default)")
	flag.IntVar(&def.PebbleValueSepMin, "pebble-value-sep-min", 0, "Pebble value separation for values >= this size (0: off)")
	flag.Int64Var(&def.CairnMinBlobSize, "cairn-min-blob-size", 0, "cairn lsm.Options.MinBlobSize (0: engine default, 4096; negative: no separation)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the benchmark(s) named by --profile-benchmark to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile taken after the benchmark(s) named by --profile-benchmark to this file")
	blockProfile := flag.String("blockprofile", "", "write a blocking profile (every blocking event) of the benchmark(s) named by --profile-benchmark to this file")
	mutexProfile := flag.String("mutexprofile", "", "write a mutex contention profile (every event) of the benchmark(s) named by --profile-benchmark to this file")
	traceFile := flag.String("trace", "", "write a Go execution trace of the benchmark(s) named by --profile-benchmark to this file (go tool trace; -pprof=sched|sync|syscall for off-CPU time)")
	profBench := flag.String("profile-benchmark", "readrandom", "benchmark name(s) to profile, comma-separated (a name after compact ends in @compacted)")
	flag.BoolVar(&def.CairnDisableWALMmap, "cairn-disable-wal-mmap", false, "cairn lsm.Options.DisableWALMmap: WAL appends by write(2)")
	flag.IntVar(&def.CairnMaxConcurrentCompactions, "cairn-max-concurrent-compactions", 0, "cairn lsm.Options.MaxConcurrentCompactions (0: engine default)")
	flag.BoolVar(&def.CairnWALBuffered, "cairn-wal-buffered", false, "cairn lsm.Options.WALBufferedWrites: the WAL buffered in memory and written by a goroutine (an acknowledged NoSync write may be lost in a process kill, as with Pebble)")
	flag.Parse()

	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	dir := *dbDir
	if dir == "" {
		parent, err := os.MkdirTemp("", "dbbench-"+*engine+"-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(parent)
		dir = filepath.Join(parent, "db")
	}
	log := os.Stdout
	if *asJSON {
		log = os.Stderr
	}
	fmt.Fprintf(log, "engine %s, keys %d B, values %d B (incompressible), num %d, seed %d, dir %s\n",
		*engine, dbbench.KeySize, *valueSize, *num, *seed, dir)
	rep, err := dbbench.Run(dbbench.Options{
		Engine: *engine, Dir: dir, Num: *num, Reads: *reads, SyncNum: *syncNum, ValueSize: *valueSize,
		Benchmarks: strings.Split(*benchmarks, ","), Config: def, Seed: *seed, Log: log,
		Profile: profiler(profiles{cpu: *cpuProfile, mem: *memProfile, block: *blockProfile, mutex: *mutexProfile, trace: *traceFile}, strings.Split(*profBench, ",")),
	})
	if err != nil {
		os.RemoveAll(dir)
		fail(err)
	}
	fmt.Fprintf(log, "settings: %s\nversions: %v\ndisk writes: %s\n", strings.Join(rep.Settings, "; "), rep.Versions, rep.WriteBytesSource)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fail(err)
		}
	}
}

// profiles names the files of the profiles to take (empty: not taken).
type profiles struct{ cpu, mem, block, mutex, trace string }

// profiler returns dbbench.Options.Profile for --cpuprofile, --memprofile,
// --blockprofile, --mutexprofile and --trace: one CPU profile and one
// execution trace over every named benchmark, and allocation, blocking and
// mutex profiles written after the last of them.
func profiler(p profiles, names []string) func(string) func() {
	if p == (profiles{}) {
		return nil
	}
	var cpu, tr *os.File
	open := func(name string) *os.File {
		f, err := os.Create(name)
		if err != nil {
			fail(err)
		}
		return f
	}
	writeProfile := func(file, name string) {
		f := open(file)
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			fail(err)
		}
		f.Close()
	}
	return func(name string) func() {
		if !slices.Contains(names, name) {
			return nil
		}
		if p.cpu != "" {
			if cpu == nil {
				cpu = open(p.cpu)
			}
			if err := pprof.StartCPUProfile(cpu); err != nil {
				fail(err)
			}
		}
		if p.trace != "" {
			if tr == nil {
				tr = open(p.trace)
			}
			if err := trace.Start(tr); err != nil {
				fail(err)
			}
		}
		if p.mem != "" {
			runtime.MemProfileRate = 4096
		}
		if p.block != "" {
			runtime.SetBlockProfileRate(1)
		}
		if p.mutex != "" {
			runtime.SetMutexProfileFraction(1)
		}
		return func() {
			if p.cpu != "" {
				pprof.StopCPUProfile()
			}
			if p.trace != "" {
				trace.Stop()
			}
			if p.mem != "" {
				writeProfile(p.mem, "allocs")
			}
			if p.block != "" {
				runtime.SetBlockProfileRate(0)
				writeProfile(p.block, "block")
			}
			if p.mutex != "" {
				runtime.SetMutexProfileFraction(0)
				writeProfile(p.mutex, "mutex")
			}
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "dbbench:", err)
	os.Exit(1)
}
