//go:build linux

package lsm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnkv/cairn/trace"
)

// BenchmarkReadRandomTraceInterleaved measures the tracer's cost on a
// noisy machine: on one DB (readrandom's, 200k keys compacted) it runs
// rounds of chunkGets random Gets in each of three modes, in a rotating
// order, and reports the median ns per Get of each mode and their ratios:
//
//   - nohook: the read path without the tracer check (get's body with a
//     nil trace.Access, what a build without the hook runs);
//   - off: DB.Get with no trace running (one atomic load more);
//   - on: DB.Get while a trace records every access to a file.
//
// Noise that drifts over seconds hits the three modes alike. Each chunk is
// timed in CPU time of its OS thread (the goroutine is locked to it), which
// other processes on a loaded machine disturb far less than wall time;
// wall-time medians are reported too. Run it with -benchtime 1x (one
// iteration runs every round).
func BenchmarkReadRandomTraceInterleaved(b *testing.B) {
	const rounds, chunkGets = 40, 5_000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration { return threadCPUTime(b) }
	d := benchDB(b)
	n := benchKeys
	fillDB(b, d, n)
	if err := d.Compact(nil, nil); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(b.TempDir(), "trace"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(2, 2))
	var key []byte
	modes := []string{"nohook", "off", "on"}
	perOp := map[string][]float64{}
	wall := map[string][]float64{}
	run := func(mode string) {
		if mode == "on" {
			if err := d.StartTrace(trace.Options{}, f); err != nil {
				b.Fatal(err)
			}
		}
		start, startCPU := time.Now(), threadCPU()
		for range chunkGets {
			key = benchKey(key, rng.Uint64N(uint64(n)))
			var err error
			if mode == "nohook" {
				_, err = d.getAccess(key, 0, d.resolveGet, nil)
			} else {
				_, err = d.Get(key)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		perOp[mode] = append(perOp[mode], float64((threadCPU()-startCPU).Nanoseconds())/chunkGets)
		wall[mode] = append(wall[mode], float64(time.Since(start).Nanoseconds())/chunkGets)
		if mode == "on" {
			if err := d.EndTrace(); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Warm the cache so that every mode sees the same hit ratio.
	for range 3 {
		run("off")
	}
	perOp, wall = map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := range rounds {
			for j := range modes {
				run(modes[(r+j)%len(modes)])
			}
		}
	}
	b.StopTimer()
	med := map[string]float64{}
	for _, m := range modes {
		v := slices.Clone(perOp[m])
		slices.Sort(v)
		med[m] = v[len(v)/2]
		b.ReportMetric(med[m], m+"-cpu-ns/get")
		w := slices.Clone(wall[m])
		slices.Sort(w)
		b.ReportMetric(w[len(w)/2], m+"-wall-ns/get")
	}
	b.ReportMetric(med["off"]/med["nohook"], "off/nohook")
	b.ReportMetric(med["on"]/med["off"], "on/off")
	// Per-round ratios, whose median is less sensitive to drift.
	var offRatio, onRatio []float64
	for r := range perOp["off"] {
		offRatio = append(offRatio, perOp["off"][r]/perOp["nohook"][r])
		onRatio = append(onRatio, perOp["on"][r]/perOp["off"][r])
	}
	slices.Sort(offRatio)
	slices.Sort(onRatio)
	b.ReportMetric(offRatio[len(offRatio)/2], "median-round-off/nohook")
	b.ReportMetric(onRatio[len(onRatio)/2], "median-round-on/off")
}

// threadCPUTime returns the CPU time of the calling OS thread: lock the
// goroutine to its thread around a measurement.
func threadCPUTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTraceIdleCheck times what Get pays for the tracer while no
// trace runs: get's check, NewAccess on an idle tracer (one atomic load,
// nil), in CPU time of the benchmark's thread (cpu-ns/op; wall time on a
// loaded machine counts the waits for a core, as for an empty loop).
// Divided by readrandom's CPU time per Get it is the idle overhead, far
// below what an A/B run of whole Gets resolves on a noisy machine.
func BenchmarkTraceIdleCheck(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var d DB
	traced := 0
	start := threadCPUTime(b)
	for i := 0; i < b.N; i++ {
		if d.tracer.NewAccess(trace.CallerGet, 0, false) != nil {
			traced++
		}
	}
	b.ReportMetric(float64(threadCPUTime(b)-start)/float64(b.N), "cpu-ns/op")
	if traced != 0 {
		b.Fatal("idle tracer returned an Access")
	}
}
