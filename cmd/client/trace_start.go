package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/trace"
)

// newTraceStartCmd makes `cairn trace start`.
func newTraceStartCmd(g *globals) *cobra.Command {
	var (
		node, out, maxSize string
		duration           time.Duration
		sampling           uint64
	)
	cmd := &cobra.Command{
		Use:   "start --node ADDR --duration D --out FILE",
		Short: "Trace a node's block-cache accesses for a while and save the trace to FILE",
		Long: `Trace a node's block-cache accesses for a while and save the trace to FILE.

The node (--node, its gRPC address) records every lookup in its engine's block
and blob caches for --duration and streams the binary trace back; 'cairn trace
analyze FILE' reads it. --sampling N traces 1 in N blocks (all accesses of a
sampled block); --max-size stops the trace before FILE exceeds that size
(default: the node's limit, 1 GiB). Only one trace runs on a node at a time:
a second one is refused.`,
		Example: `  cairn trace start --node 127.0.0.1:7379 --duration 60s --out node1.trace
  cairn trace start --node 10.0.0.2:7379 --duration 10m --sampling 10 --max-size 256MiB --out node2.trace`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if node == "" || out == "" {
				return usagef("--node and --out are required")
			}
			if duration <= 0 {
				return usagef("--duration must be positive")
			}
			limit, err := parseTraceMaxSize(maxSize)
			if err != nil {
				return usageError{err}
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			var n int64
			err = g.withClient(func(c *client.Client) error {
				// The call lasts --duration: --timeout bounds it only
				// if set.
				ctx, cancel := g.longCtx(duration + time.Minute)
				defer cancel()
				n, err = c.Trace(ctx, node, client.TraceOptions{Duration: duration, SamplingFrequency: sampling, MaxSizeBytes: limit}, f)
				return err
			})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				if n > 0 {
					return fmt.Errorf("%w (%s of trace saved to %s)", err, humanBytes(uint64(n)), out)
				}
				os.Remove(out)
				return err
			}
			records, err := countTraceRecords(out)
			if err != nil {
				return fmt.Errorf("the trace saved to %s does not read back: %w", out, err)
			}
			if g.output == outJSON {
				return writeJSON(g.stdout, map[string]any{"file": out, "node": node, "bytes": n, "records": records})
			}
			g.printf("traced %s for %v: %d records (%s) saved to %s\n", node, duration, records, humanBytes(uint64(n)), out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&node, "node", "", "gRPC address of the node to trace (required)")
	fl.DurationVar(&duration, "duration", 60*time.Second, "how long to trace")
	fl.StringVar(&out, "out", "", "file to write the trace to (required)")
	fl.Uint64Var(&sampling, "sampling", 0, "trace 1 in N blocks (0 or 1: every access)")
	fl.StringVar(&maxSize, "max-size", "", "stop before the trace exceeds this size (bytes, or with a KiB/MiB/GiB suffix)")
	return cmd
}

// countTraceRecords reads the trace at path through and counts its records.
func countTraceRecords(path string) (int64, error) {
	rr, err := trace.OpenFile(path)
	if err != nil {
		return 0, err
	}
	defer rr.(*trace.File).Close()
	var n int64
	for {
		if _, err := rr.Next(); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		n++
	}
}

// parseTraceMaxSize parses a byte count with an optional binary suffix
// (KiB, MiB, GiB; K, M, G mean the same). "" is 0 (the node's limit).
func parseTraceMaxSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("--max-size %q: want a byte count such as 1048576 or 256MiB", s)
	}
	return v * mult, nil
}
