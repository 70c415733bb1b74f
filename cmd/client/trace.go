package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/trace"
	"github.com/cairnkv/cairn/trace/analyze"
	"github.com/spf13/cobra"
)

func newTraceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Trace a node's block-cache accesses and analyze traces",
		Long: `Trace a node's block-cache accesses and analyze traces: which blocks the
workload reads, how often the cache hits, and how caches of other sizes and
policies would have done (a miss-ratio curve).`,
		Example: `  cairn trace start --node 127.0.0.1:7379 --duration 60s --out node1.trace
  cairn trace analyze node1.trace --sizes 8MiB,32MiB,128MiB --plot mrc.png`,
		Args: usageArgs(cobra.NoArgs),
		RunE: groupRunE,
	}
	cmd.AddCommand(newTraceStartCmd(g), newTraceAnalyzeCmd(g))
	return cmd
}

// openTraceFile opens a trace file, binary or human-readable (a variable
// for tests).
var openTraceFile = trace.OpenFile

// defaultTraceTypes are the block types simulated by default: those of the
// engine's block cache (blob records have a cache of their own).
var defaultTraceTypes = []trace.BlockType{trace.BlockData, trace.BlockIndex, trace.BlockFilter, trace.BlockRangeDel, trace.BlockUncompressionDict}

type traceAnalyzeConfig struct {
	sizes, policies, types string
	plot, csv              string
	liveSize               string
	top                    int
	overhead               int64
	warmup                 int64
}

func newTraceAnalyzeCmd(g *globals) *cobra.Command {
	c := &traceAnalyzeConfig{}
	var typeNames []string
	for _, t := range defaultTraceTypes {
		typeNames = append(typeNames, t.String())
	}
	cmd := &cobra.Command{
		Use:   "analyze FILE",
		Short: "Report a trace's accesses and simulate caches of several sizes on it",
		Long: `Read a block-cache trace (written by 'cairn trace start' or the engine's
StartTrace, binary or human-readable) and print:

  - accesses and the live cache's miss ratio per block type, caller and level;
  - the most accessed blocks (--top);
  - how many blocks were accessed once;
  - the reuse-distance histogram, in distinct blocks and in bytes (the bytes of
    the blocks accessed in between plus the block's own: the smallest LRU cache
    that would have hit), on a log2 scale;
  - the miss ratio of simulated caches of every --sizes under every --policies
    (lru, clock, s3fifo): the miss-ratio curve, also written as CSV (--csv) and
    as a PNG plot (--plot), with the live cache's size marked when
    --live-cache-size is given (and its miss ratio, measured by the records'
    hit flags, as a cross).

The trace is read once, every cache simulated at the same time; the memory is
per distinct block (tens of bytes per block and simulated cache), not per
access. A simulated block costs its size plus --entry-overhead (the engine's
per-block charge) bytes; only blocks of --types go to the simulated caches.
Without --sizes, the sizes are powers of two from 1/256 of the bytes of the
distinct blocks to twice that (which reads the file twice).`,
		Example: `  cairn trace analyze node1.trace
  cairn trace analyze node1.trace --sizes 8MiB,32MiB,128MiB --policies lru,s3fifo --plot mrc.png --csv mrc.csv
  cairn trace analyze node1.trace --sizes 16MiB,64MiB,256MiB --live-cache-size 64MiB --plot mrc.png`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTraceAnalyze(g, c, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.sizes, "sizes", "", "comma-separated simulated cache sizes, e.g. 8MiB,32MiB,128MiB (default: derived from the trace)")
	f.StringVar(&c.policies, "policies", "lru,clock,s3fifo", "comma-separated simulated policies: lru, clock, s3fifo")
	f.StringVar(&c.types, "types", strings.Join(typeNames, ","), "comma-separated block types the simulated caches see (data, index, filter, range-del, uncompression-dict, blob), or all")
	f.StringVar(&c.plot, "plot", "", "write the miss-ratio curve as a PNG plot to this file")
	f.StringVar(&c.csv, "csv", "", "write the miss-ratio curve as CSV to this file (- for stdout)")
	f.StringVar(&c.liveSize, "live-cache-size", "", "the traced node's block-cache size, marked on the plot, e.g. 64MiB")
	f.IntVar(&c.top, "top", 10, "how many of the most accessed blocks to list")
	f.Int64Var(&c.overhead, "entry-overhead", cache.EntryOverhead, "bytes a cache charges per block on top of its size")
	f.Int64Var(&c.warmup, "warmup", 0, "simulated accesses at the start that fill the caches without being counted")
	return cmd
}

func runTraceAnalyze(g *globals, c *traceAnalyzeConfig, path string) error {
	opts := analyze.Options{EntryOverhead: c.overhead, Warmup: c.warmup, Top: c.top}
	var err error
	if opts.Policies, err = analyze.ParsePolicies(c.policies); err != nil {
		return usageError{err}
	}
	if c.top < 0 || c.overhead < 0 || c.warmup < 0 {
		return usagef("--top, --entry-overhead and --warmup must not be negative")
	}
	if c.top == 0 {
		opts.Top = -1 // none (0 means the default for the library)
	}
	if strings.TrimSpace(c.types) != "all" {
		for _, s := range strings.Split(c.types, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			t, err := trace.ParseBlockType(s)
			if err != nil {
				return usagef("--types: %v (want data, index, filter, range-del, uncompression-dict or blob)", err)
			}
			opts.Types = append(opts.Types, t)
		}
		if len(opts.Types) == 0 {
			return usagef("--types: no block type given")
		}
	}
	var live int64
	if c.liveSize != "" {
		if live, err = analyze.ParseSize(c.liveSize); err != nil || live <= 0 {
			return usagef("--live-cache-size: %v", orPositive(err))
		}
	}
	if c.sizes != "" {
		if opts.Sizes, err = analyze.ParseSizes(c.sizes); err != nil {
			return usagef("--sizes: %v", err)
		}
	} else {
		if opts.Sizes, err = autoSizes(path, opts); err != nil {
			return err
		}
	}
	if live > 0 && !slices.Contains(opts.Sizes, live) {
		opts.Sizes = append(opts.Sizes, live)
	}

	r, err := openTraceFile(path)
	if err != nil {
		return err
	}
	if cl, ok := r.(io.Closer); ok {
		defer cl.Close()
	}
	res, err := analyze.Run(r, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}

	if c.csv != "" {
		if err := writeFileWith(g, c.csv, func(w io.Writer) error { return analyze.WriteCSV(w, res.Curve) }); err != nil {
			return err
		}
	}
	if c.plot != "" {
		po := analyze.PlotOptions{Title: "Miss-ratio curve of " + filepath.Base(path), LiveSize: live, LiveMissRatio: -1}
		if live > 0 {
			po.LiveMissRatio = liveMissRatio(res, opts.Types)
		}
		if err := writeFileWith(g, c.plot, func(w io.Writer) error { return analyze.WritePlot(w, res.Curve, po) }); err != nil {
			return err
		}
	}
	if g.output == outJSON {
		return writeTraceJSON(g.stdout, res)
	}
	if c.csv == "-" {
		return nil // stdout holds the CSV
	}
	return analyze.WriteReport(g.stdout, res)
}

func orPositive(err error) error {
	if err != nil {
		return err
	}
	return errors.New("must be positive")
}

// liveMissRatio is the miss ratio the traced cache measured on the blocks
// the simulated caches saw (by the records' hit flags).
func liveMissRatio(res *analyze.Result, types []trace.BlockType) float64 {
	var n analyze.Counter
	for t, c := range res.Stats.ByType {
		if len(types) == 0 || slices.Contains(types, t) {
			n.Accesses += c.Accesses
			n.Misses += c.Misses
		}
	}
	if n.Accesses == 0 {
		return -1
	}
	return n.MissRatio()
}

// autoSizes reads the trace once to find the bytes of the distinct blocks
// the simulated caches would see, and returns powers of two from 1/256 of
// that to twice it (at least 64KiB).
func autoSizes(path string, opts analyze.Options) ([]int64, error) {
	r, err := openTraceFile(path)
	if err != nil {
		return nil, err
	}
	if cl, ok := r.(io.Closer); ok {
		defer cl.Close()
	}
	seen := map[string]bool{}
	var total int64
	for n := 1; ; n++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading record %d: %w", path, n, err)
		}
		if len(opts.Types) > 0 && !slices.Contains(opts.Types, rec.Type) {
			continue
		}
		if !seen[string(rec.BlockKey)] {
			seen[string(rec.BlockKey)] = true
			total += int64(rec.BlockSize) + opts.EntryOverhead
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("%s: no accesses to simulate (see --types)", path)
	}
	var sizes []int64
	s := int64(64 << 10)
	for s*256 < total {
		s *= 2
	}
	for ; s < 2*total; s *= 2 {
		sizes = append(sizes, s)
	}
	return append(sizes, s), nil
}

// writeFileWith writes a file through write ("-": standard output),
// replacing it only once complete.
func writeFileWith(g *globals, path string, write func(io.Writer) error) error {
	if path == "-" {
		return write(g.stdout)
	}
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// traceJSON is the -o json output of trace analyze.
type traceJSON struct {
	Accesses       int64                  `json:"accesses"`
	LiveMisses     int64                  `json:"live_misses"`
	UniqueBlocks   int64                  `json:"unique_blocks"`
	UniqueBytes    int64                  `json:"unique_bytes"`
	AccessedOnce   int64                  `json:"accessed_once"`
	ByType         map[string]counterJSON `json:"by_type"`
	ByCaller       map[string]counterJSON `json:"by_caller"`
	ByLevel        map[string]counterJSON `json:"by_level"`
	ReuseBlocksLog []int64                `json:"reuse_blocks_log2"`
	ReuseBytesLog  []int64                `json:"reuse_bytes_log2"`
	Curve          []pointJSON            `json:"curve"`
}

type counterJSON struct {
	Accesses int64 `json:"accesses"`
	Misses   int64 `json:"live_misses"`
}

type pointJSON struct {
	Size      int64   `json:"size_bytes"`
	Policy    string  `json:"policy"`
	MissRatio float64 `json:"miss_ratio"`
	Accesses  int64   `json:"accesses"`
	Misses    int64   `json:"misses"`
}

func writeTraceJSON(w io.Writer, res *analyze.Result) error {
	st := &res.Stats
	out := traceJSON{
		Accesses: st.Total.Accesses, LiveMisses: st.Total.Misses,
		UniqueBlocks: st.UniqueBlocks, UniqueBytes: st.UniqueBytes, AccessedOnce: st.AccessedOnce,
		ByType: map[string]counterJSON{}, ByCaller: map[string]counterJSON{}, ByLevel: map[string]counterJSON{},
		ReuseBlocksLog: st.ReuseBlocks.Buckets, ReuseBytesLog: st.ReuseBytes.Buckets,
		Curve: []pointJSON{},
	}
	for t, c := range st.ByType {
		out.ByType[t.String()] = counterJSON{c.Accesses, c.Misses}
	}
	for k, c := range st.ByCaller {
		out.ByCaller[k.String()] = counterJSON{c.Accesses, c.Misses}
	}
	for l, c := range st.ByLevel {
		out.ByLevel[fmt.Sprint(l)] = counterJSON{c.Accesses, c.Misses}
	}
	for _, p := range res.Curve {
		out.Curve = append(out.Curve, pointJSON{p.Size, string(p.Policy), p.MissRatio(), p.Accesses, p.Misses})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
