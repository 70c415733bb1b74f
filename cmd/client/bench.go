package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

type benchConfig struct {
	mode        string
	clients     int
	duration    time.Duration
	valueSize   int
	keys        int
	readRatio   float64
	consistency string
	preload     bool
	jsonOut     bool
	progress    string
}

func newBenchCmd(g *globals) *cobra.Command {
	bc := &benchConfig{}
	cmd := &cobra.Command{
		Use:   "bench put|get|mixed",
		Short: "Generate load and report throughput and latency",
		Long: `Run a load generator against the cluster for --duration: --clients concurrent
callers share one client connection and each issues one request at a time
(put: writes; get: reads; mixed: --read-ratio reads, the rest writes), on
keys chosen uniformly among --keys keys ("bench/0000000000", ...). get and
mixed first write every key once (--preload).

A progress line shows the operations and errors so far; the final report
gives the throughput, the latency percentiles (p50, p90, p99, p99.9, max) and
the errors by gRPC code (--json for machines). Each operation may take
--timeout, retries included: leader changes during a run cost latency, not
errors. The command exits with code 1 if any operation failed.`,
		Example: `  cairn bench put
  cairn bench put --clients 64 --duration 30s --value-size 1024
  cairn bench get --consistency serializable --keys 100000
  cairn bench mixed --read-ratio 0.9 --json`,
		Args:      usageArgs(cobra.ExactArgs(1)),
		ValidArgs: []string{"put", "get", "mixed"},
		RunE: func(cmd *cobra.Command, args []string) error {
			bc.mode = args[0]
			if !cmd.Flags().Changed("json") && g.output == outJSON {
				bc.jsonOut = true
			}
			if err := bc.check(); err != nil {
				return err
			}
			show, err := g.showProgress(bc.progress)
			if err != nil {
				return err
			}
			return g.withClient(func(c *client.Client) error {
				return runBench(c, bc, g, show)
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&bc.clients, "clients", 16, "concurrent callers")
	f.DurationVar(&bc.duration, "duration", 10*time.Second, "how long to run")
	f.IntVar(&bc.valueSize, "value-size", 256, "value size in bytes")
	f.IntVar(&bc.keys, "keys", 10000, "number of distinct keys")
	f.Float64Var(&bc.readRatio, "read-ratio", 0.5, "mixed: the fraction of reads")
	consistencyFlag(cmd, &bc.consistency)
	f.BoolVar(&bc.preload, "preload", true, "get, mixed: write every key before the run")
	f.BoolVar(&bc.jsonOut, "json", false, "print the report as JSON")
	f.StringVar(&bc.progress, "progress", "auto", "show the progress line on stderr: auto (if a terminal), always or never")
	return cmd
}

func (bc *benchConfig) check() error {
	switch bc.mode {
	case "put", "get", "mixed":
	default:
		return usagef("bench %q: want put, get or mixed", bc.mode)
	}
	switch {
	case bc.clients < 1:
		return usagef("--clients %d: want at least 1", bc.clients)
	case bc.duration <= 0:
		return usagef("--duration must be positive")
	case bc.valueSize < 0:
		return usagef("--value-size %d < 0", bc.valueSize)
	case bc.keys < 1:
		return usagef("--keys %d: want at least 1", bc.keys)
	case bc.readRatio < 0 || bc.readRatio > 1:
		return usagef("--read-ratio %v: want 0 to 1", bc.readRatio)
	}
	if _, err := client.ParseConsistency(bc.consistency); err != nil {
		return usageError{err}
	}
	return nil
}

func benchKey(i int) []byte { return fmt.Appendf(nil, "bench/%010d", i) }

// benchStats are one run's counters, shared by the workers.
type benchStats struct {
	ops, errs atomic.Int64
	mu        sync.Mutex
	lat       []time.Duration // of successful operations
	byCode    map[string]int
}

func (s *benchStats) merge(lat []time.Duration, byCode map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat = append(s.lat, lat...)
	for k, v := range byCode {
		s.byCode[k] += v
	}
}

// progressLine draws a live progress line until stop is closed.
func progressLine(w io.Writer, total time.Duration, desc func() string, stop <-chan struct{}, done *sync.WaitGroup) {
	defer done.Done()
	bar := progressbar.NewOptions64(total.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(20),
		progressbar.OptionSetDescription(desc()),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
	start := time.Now()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			bar.Describe(desc())
			bar.Set64(min(time.Since(start), total).Milliseconds())
			bar.Finish()
			fmt.Fprintln(w)
			return
		case <-t.C:
			bar.Describe(desc())
			bar.Set64(min(time.Since(start), total).Milliseconds())
		}
	}
}

func runBench(c *client.Client, bc *benchConfig, g *globals, show bool) error {
	cons, _ := client.ParseConsistency(bc.consistency)
	if bc.preload && bc.mode != "put" {
		if err := preload(c, bc, g, show); err != nil {
			return err
		}
	}
	st := &benchStats{byCode: map[string]int{}}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	start := time.Now()
	if show {
		pwg.Add(1)
		go progressLine(g.stderr, bc.duration, func() string {
			el := time.Since(start).Seconds()
			return fmt.Sprintf("%s: %d ops, %.0f ops/s, %d errors", bc.mode, st.ops.Load(), float64(st.ops.Load())/max(el, 1e-3), st.errs.Load())
		}, stop, &pwg)
	}
	deadline := start.Add(bc.duration)
	var wg sync.WaitGroup
	for w := range bc.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			value := make([]byte, bc.valueSize)
			for i := range value {
				value[i] = byte(rng.Uint32())
			}
			var lat []time.Duration
			byCode := map[string]int{}
			for time.Now().Before(deadline) {
				key := benchKey(rng.IntN(bc.keys))
				read := bc.mode == "get" || (bc.mode == "mixed" && rng.Float64() < bc.readRatio)
				ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
				t0 := time.Now()
				var err error
				if read {
					_, err = c.Get(ctx, key, client.WithConsistency(cons))
				} else {
					_, err = c.Put(ctx, key, value)
				}
				d := time.Since(t0)
				cancel()
				st.ops.Add(1)
				if err != nil {
					st.errs.Add(1)
					byCode[status.Code(err).String()]++
					continue
				}
				lat = append(lat, d)
			}
			st.merge(lat, byCode)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	pwg.Wait()
	rep := newBenchReport(bc, st, elapsed)
	if bc.jsonOut {
		if err := writeJSON(g.stdout, rep); err != nil {
			return err
		}
	} else {
		rep.print(g.stdout)
	}
	if rep.Errors > 0 {
		return fmt.Errorf("bench: %d of %d operations failed", rep.Errors, rep.Ops)
	}
	return nil
}

// preload writes every key once, with the bench's concurrency.
func preload(c *client.Client, bc *benchConfig, g *globals, show bool) error {
	var next atomic.Int64
	var bar *progressbar.ProgressBar
	if show {
		bar = progressbar.NewOptions(bc.keys, progressbar.OptionSetWriter(g.stderr), progressbar.OptionSetDescription("preload"),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(20), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(g.stderr) }))
	}
	value := make([]byte, bc.valueSize)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range bc.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= bc.keys {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
				_, err := c.Put(ctx, benchKey(i), value)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("bench: preload: %w", err)
					}
					mu.Unlock()
					return
				}
				if bar != nil {
					bar.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// benchReport is the final report (its JSON form is the --json output).
type benchReport struct {
	Mode        string         `json:"mode"`
	Clients     int            `json:"clients"`
	DurationS   float64        `json:"duration_s"`
	ValueSize   int            `json:"value_size"`
	Keys        int            `json:"keys"`
	Consistency string         `json:"consistency,omitempty"`
	Ops         int64          `json:"ops"`
	Errors      int64          `json:"errors"`
	OpsPerSec   float64        `json:"ops_per_sec"`
	LatencyMs   latencyReport  `json:"latency_ms"`
	ErrorsBy    map[string]int `json:"errors_by_code"`
}

type latencyReport struct {
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
	Count int     `json:"count"`
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func newBenchReport(bc *benchConfig, st *benchStats, elapsed time.Duration) *benchReport {
	slices.Sort(st.lat)
	r := &benchReport{Mode: bc.mode, Clients: bc.clients, DurationS: math.Round(elapsed.Seconds()*1000) / 1000,
		ValueSize: bc.valueSize, Keys: bc.keys, Ops: st.ops.Load(), Errors: st.errs.Load(), ErrorsBy: st.byCode}
	if bc.mode != "put" {
		r.Consistency = bc.consistency
	}
	r.OpsPerSec = math.Round(float64(r.Ops)/elapsed.Seconds()*10) / 10
	var sum time.Duration
	for _, d := range st.lat {
		sum += d
	}
	l := &r.LatencyMs
	l.Count = len(st.lat)
	if l.Count > 0 {
		l.Mean = ms(sum / time.Duration(l.Count))
	}
	l.P50, l.P90, l.P99, l.P999 = ms(percentile(st.lat, .5)), ms(percentile(st.lat, .9)), ms(percentile(st.lat, .99)), ms(percentile(st.lat, .999))
	if l.Count > 0 {
		l.Max = ms(st.lat[l.Count-1])
	}
	return r
}

func (r *benchReport) print(w io.Writer) {
	tw := newTable(w)
	what := fmt.Sprintf("%s, %d clients, %d keys, %d-byte values", r.Mode, r.Clients, r.Keys, r.ValueSize)
	if r.Consistency != "" {
		what += ", " + r.Consistency + " reads"
	}
	fmt.Fprintf(tw, "bench\t%s\n", what)
	fmt.Fprintf(tw, "duration\t%.2fs\n", r.DurationS)
	fmt.Fprintf(tw, "operations\t%d (%d errors)\n", r.Ops, r.Errors)
	fmt.Fprintf(tw, "throughput\t%.1f ops/s\n", r.OpsPerSec)
	l := r.LatencyMs
	fmt.Fprintf(tw, "latency\tmean %.3fms  p50 %.3fms  p90 %.3fms  p99 %.3fms  p99.9 %.3fms  max %.3fms\n",
		l.Mean, l.P50, l.P90, l.P99, l.P999, l.Max)
	if len(r.ErrorsBy) > 0 {
		codes := make([]string, 0, len(r.ErrorsBy))
		for c := range r.ErrorsBy {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		var parts []string
		for _, c := range codes {
			parts = append(parts, fmt.Sprintf("%s %d", c, r.ErrorsBy[c]))
		}
		fmt.Fprintf(tw, "errors\t%s\n", strings.Join(parts, ", "))
	}
	tw.Flush()
}
