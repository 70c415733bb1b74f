package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
)

// arg decodes a key or value argument: as it is, or hex with --hex.
func (g *globals) arg(what, s string) ([]byte, error) {
	if !g.hex {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, usagef("%s %q is not hex (--hex is set)", what, s)
	}
	return b, nil
}

// key decodes a key argument, which must not be empty.
func (g *globals) key(s string) ([]byte, error) {
	k, err := g.arg("key", s)
	if err == nil && len(k) == 0 {
		err = usagef("empty key (keys are 1 to %d bytes)", cairnpb.MaxKeySize)
	}
	return k, err
}

func newPutCmd(g *globals) *cobra.Command {
	var prevKV bool
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Set a key's value (VALUE - reads it from stdin)",
		Long: `Set a key's value. With VALUE "-" the value is read from stdin, byte for
byte (binary values are fine). Prints OK, or with -o json the key's new
version and raft indexes.`,
		Example: `  cairn put greeting hello
  cairn put config.json - < config.json
  cairn --hex put 00ff 0a0b
  cairn put counter 1 --prev-kv -o json`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := g.key(args[0])
			if err != nil {
				return err
			}
			var value []byte
			if args[1] == "-" {
				if value, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return fmt.Errorf("reading the value from stdin: %w", err)
				}
			} else if value, err = g.arg("value", args[1]); err != nil {
				return err
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				var opts []client.Option
				if prevKV {
					opts = append(opts, client.WithPrevKV())
				}
				res, err := c.Put(ctx, key, value, opts...)
				if err != nil {
					return err
				}
				if g.output == outJSON {
					out := map[string]any{"version": res.Version, "create_index": res.CreateIndex,
						"mod_index": res.ModIndex, "node": res.NodeID}
					if res.PrevKV != nil {
						out["prev_kv"] = g.kvJSON(res.PrevKV)
					}
					return writeJSON(g.stdout, out)
				}
				g.printf("OK\n")
				if res.PrevKV != nil {
					g.printf("previous value: %s\n", g.bytesText(res.PrevKV.Value))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&prevKV, "prev-kv", false, "also print the previous value")
	return cmd
}

// consistencyFlag adds --consistency to cmd.
func consistencyFlag(cmd *cobra.Command, s *string) {
	cmd.Flags().StringVar(s, "consistency", "linearizable", "read consistency: linearizable (sees every acknowledged write) or serializable (any node's local state, may be stale)")
	cmd.RegisterFlagCompletionFunc("consistency", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return []string{"linearizable", "serializable"}, cobra.ShellCompDirectiveNoFileComp
	})
}

func parseConsistency(s string) (client.Option, error) {
	c, err := client.ParseConsistency(s)
	if err != nil {
		return client.Option{}, usageError{err}
	}
	return client.WithConsistency(c), nil
}

func newGetCmd(g *globals) *cobra.Command {
	var consistency string
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print a key's value (exit code 1 if it does not exist)",
		Long: `Print a key's value: escaped for the terminal by default (see 'cairn --help'),
with its version and raft indexes with -o json, or its exact bytes with
-o raw. A missing key exits with code 1, like grep finding nothing.`,
		Example: `  cairn get greeting
  cairn get greeting -o json
  cairn get photo.jpg -o raw > photo.jpg
  cairn get greeting --consistency serializable`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := g.key(args[0])
			if err != nil {
				return err
			}
			cons, err := parseConsistency(consistency)
			if err != nil {
				return err
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				kv, err := c.Get(ctx, key, cons)
				if err != nil {
					return err
				}
				switch g.output {
				case outJSON:
					return writeJSON(g.stdout, g.kvJSON(kv))
				case outRaw:
					_, err := g.stdout.Write(kv.Value)
					return err
				}
				g.printf("%s\n", g.bytesText(kv.Value))
				return nil
			})
		},
	}
	consistencyFlag(cmd, &consistency)
	return cmd
}

func newDelCmd(g *globals) *cobra.Command {
	var isRange, isPrefix bool
	cmd := &cobra.Command{
		Use:   "del KEY | del --range START END | del --prefix PREFIX",
		Short: "Delete a key, a range of keys or the keys with a prefix",
		Long: `Delete one key (prints how many keys it deleted: 1 or 0), the keys in
[START, END) with --range (END "" means no upper bound), or the keys with a
prefix with --prefix.`,
		Example: `  cairn del greeting
  cairn del --range user/000 user/500
  cairn del --prefix tmp/`,
		Aliases: []string{"delete", "rm"},
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			switch {
			case isRange && isPrefix:
				return errors.New("--range and --prefix exclude each other")
			case isRange:
				return cobra.ExactArgs(2)(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			var keys [][]byte
			for _, a := range args {
				k, err := g.arg("key", a)
				if err == nil && !isRange && len(k) == 0 {
					err = usagef("empty key")
				}
				if err != nil {
					return err
				}
				keys = append(keys, k)
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				switch {
				case isRange:
					if len(keys[0]) == 0 {
						keys[0] = []byte{0}
					}
					_, err := c.DeleteRange(ctx, keys[0], keys[1])
					return g.okOrErr(err)
				case isPrefix:
					if len(keys[0]) == 0 {
						return usagef("empty prefix (to delete every key: del --range \"\" \"\")")
					}
					_, err := c.DeleteRange(ctx, nil, nil, client.WithPrefix(keys[0]))
					return g.okOrErr(err)
				}
				res, err := c.Delete(ctx, keys[0])
				if err != nil {
					return err
				}
				n := 0
				if res.Deleted {
					n = 1
				}
				if g.output == outJSON {
					return writeJSON(g.stdout, map[string]any{"deleted": n})
				}
				g.printf("%d\n", n)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&isRange, "range", false, "delete the keys in [START, END)")
	cmd.Flags().BoolVar(&isPrefix, "prefix", false, "delete the keys with prefix KEY")
	return cmd
}

// okOrErr prints OK for a write without a result.
func (g *globals) okOrErr(err error) error {
	if err != nil {
		return err
	}
	if g.output == outJSON {
		return writeJSON(g.stdout, map[string]any{"ok": true})
	}
	g.printf("OK\n")
	return nil
}

func newScanCmd(g *globals) *cobra.Command {
	var (
		prefix      string
		limit       int
		reverse     bool
		keysOnly    bool
		consistency string
		pageSize    int
	)
	cmd := &cobra.Command{
		Use:   "scan [--prefix P | START [END]]",
		Short: "List keys and values in order",
		Long: `List the keys with a prefix (--prefix), or in [START, END) (no END: to the
last key; no arguments: every key), in key order or --reverse, as a table
(KEY, VALUE, VERSION, MOD_INDEX) or with -o json as a JSON array. Pages are
fetched as needed: a scan of any size runs in bounded memory. --timeout
bounds each page's request, not the whole scan.`,
		Example: `  cairn scan --prefix user/
  cairn scan user/100 user/200 --limit 10
  cairn scan --reverse --limit 1
  cairn scan --prefix user/ --keys-only -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []client.Option
			cons, err := parseConsistency(consistency)
			if err != nil {
				return err
			}
			opts = append(opts, cons)
			if limit < 0 {
				return usagef("--limit %d < 0", limit)
			}
			if limit > 0 {
				opts = append(opts, client.WithLimit(limit))
			}
			if reverse {
				opts = append(opts, client.WithReverse())
			}
			if keysOnly {
				opts = append(opts, client.WithKeysOnly())
			}
			if pageSize < 0 {
				return usagef("--page-size %d < 0", pageSize)
			}
			if pageSize > 0 {
				opts = append(opts, client.WithPageSize(pageSize))
			}
			// --timeout bounds each page: a long scan runs as long as
			// its pages keep coming.
			opts = append(opts, client.WithPageTimeout(g.timeout))
			var start, end []byte
			if cmd.Flags().Changed("prefix") {
				p, err := g.arg("prefix", prefix)
				if err != nil {
					return err
				}
				opts = append(opts, client.WithPrefix(p))
			}
			if len(args) > 0 {
				if start, err = g.arg("start", args[0]); err != nil {
					return err
				}
			}
			if len(args) > 1 {
				if end, err = g.arg("end", args[1]); err != nil {
					return err
				}
			}
			return g.withClient(func(c *client.Client) error {
				it := c.Scan(context.Background(), start, end, opts...)
				defer it.Close()
				return g.printScan(it, keysOnly)
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "list the keys with this prefix")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many keys (0: all)")
	cmd.Flags().BoolVar(&reverse, "reverse", false, "list in descending key order")
	cmd.Flags().BoolVar(&keysOnly, "keys-only", false, "omit the values")
	cmd.Flags().IntVar(&pageSize, "page-size", 0, fmt.Sprintf("keys per request (0: %d, at most %d)", cairnpb.DefaultScanLimit, cairnpb.MaxScanLimit))
	consistencyFlag(cmd, &consistency)
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("prefix") && len(args) > 0 {
			return usagef("--prefix and START/END exclude each other")
		}
		return usageArgs(cobra.MaximumNArgs(2))(cmd, args)
	}
	return cmd
}

// printScan prints a scan as it goes: a table flushed every scanFlushRows
// rows, or a JSON array written element by element.
func (g *globals) printScan(it *client.ScanIterator, keysOnly bool) error {
	const scanFlushRows = 1000
	if g.output == outJSON {
		n := 0
		g.printf("[")
		for it.Next() {
			b, err := jsonLine(g.kvJSON(it.KeyValue()))
			if err != nil {
				return err
			}
			if n > 0 {
				g.printf(",")
			}
			g.printf("\n  %s", b)
			n++
		}
		if n > 0 {
			g.printf("\n")
		}
		g.printf("]\n")
		return it.Err()
	}
	tw := newTable(g.stdout)
	if keysOnly {
		fmt.Fprintln(tw, "KEY\tVERSION\tMOD_INDEX")
	} else {
		fmt.Fprintln(tw, "KEY\tVALUE\tVERSION\tMOD_INDEX")
	}
	n := 0
	for it.Next() {
		kv := it.KeyValue()
		if keysOnly {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", g.bytesText(kv.Key), kv.Version, kv.ModIndex)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", g.bytesText(kv.Key), g.bytesText(kv.Value), kv.Version, kv.ModIndex)
		}
		if n++; n%scanFlushRows == 0 {
			tw.Flush()
		}
	}
	tw.Flush()
	return it.Err()
}

func newCasCmd(g *globals) *cobra.Command {
	var ifAbsent bool
	cmd := &cobra.Command{
		Use:   "cas KEY OLD NEW | cas --if-absent KEY NEW",
		Short: "Compare and swap: set KEY to NEW if its value is OLD",
		Long: `Set KEY to NEW only if its current value is OLD (or, with --if-absent, only
if KEY does not exist), atomically. Prints OK; if the key held something
else, says so and exits with code 1.`,
		Example: `  cairn cas config/mode slow fast
  cairn cas --if-absent locks/job worker-1`,
		Args: func(cmd *cobra.Command, args []string) error {
			n := 3
			if ifAbsent {
				n = 2
			}
			return usageArgs(cobra.ExactArgs(n))(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := g.key(args[0])
			if err != nil {
				return err
			}
			var old []byte
			if !ifAbsent {
				if old, err = g.arg("old value", args[1]); err != nil {
					return err
				}
			}
			nv, err := g.arg("new value", args[len(args)-1])
			if err != nil {
				return err
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				return g.okOrErr(c.CompareAndSwap(ctx, key, old, nv))
			})
		},
	}
	cmd.Flags().BoolVar(&ifAbsent, "if-absent", false, "set KEY only if it does not exist")
	return cmd
}
