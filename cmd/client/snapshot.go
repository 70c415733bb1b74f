package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/fsm"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

const restoreHelp = `To restore a backup FILE:

  cairn snapshot status FILE     checks it (every file's checksum) and
                                 prints its raft index and size;
  cairn snapshot restore FILE    writes every key of the backup into the
                                 cluster at --endpoints (start an empty one
                                 with 'cairn-node' first): a logical
                                 restore, keys get new versions and indexes;
  cairn snapshot restore FILE --extract DIR
                                 only installs the backup as a state machine
                                 directory DIR (DIR/engine opens with the
                                 engine library, lsm.Open), without a cluster;
                                 a node does not start on it;
  cairn-node restore --from FILE --data-dir DIR --id ID --raft-addr ADDR
                                 seeds a new node's data directory from the
                                 backup, keeping keys, versions and raft
                                 indexes: the physical restore of a cluster
                                 (README, "Restore a cluster from a backup").

The file is a raft snapshot stream of cairn's state machine (the format a
node's own snapshots use, described in package client), so any tool that
reads one reads the other.`

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, check and restore backups; make a node take a raft snapshot",
		Long:  "Save, check and restore backups; make a node take a raft snapshot.\n\n" + restoreHelp,
		Example: `  cairn snapshot save backup.cairn
  cairn snapshot status backup.cairn
  cairn snapshot restore backup.cairn --endpoints 127.0.0.1:7379
  cairn snapshot take --endpoints 10.0.0.2:7379`,
		Args: usageArgs(cobra.NoArgs),
		RunE: groupRunE,
	}
	cmd.AddCommand(newSaveCmd(g, "snapshot save", "Save a consistent copy of a node's data to FILE (with a progress bar)", false),
		newSnapshotTakeCmd(g), newSnapshotStatusCmd(g), newSnapshotRestoreCmd(g))
	return cmd
}

func newBackupCmd(g *globals) *cobra.Command {
	return newSaveCmd(g, "backup", "Back up a consistent copy of the leader's data to FILE", true)
}

// snapshotTakeTimeout bounds `snapshot take` unless --timeout is set: a
// snapshot of a large state machine takes longer than one request's
// default timeout (about 10s at 2 GiB).
const snapshotTakeTimeout = 10 * time.Minute

// newSaveCmd makes `snapshot save` and `backup`, which do the same. path
// is the command's path below cairn ("snapshot save").
func newSaveCmd(g *globals, path, short string, printRestore bool) *cobra.Command {
	var endpoint, progress string
	name := path[strings.LastIndexByte(path, ' ')+1:]
	cmd := &cobra.Command{
		Use:   name + " FILE",
		Short: short,
		Long: short + `. The copy is a checkpoint of one node's state machine at
one raft index (the leader's, unless --endpoint names another node); it is
written to FILE.part and renamed to FILE once complete and verified.

` + restoreHelp,
		Example: `  cairn ` + path + ` cairn-$(date +%F).backup
  cairn ` + path + ` node2.backup --endpoint 10.0.0.2:7379`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			show, err := g.showProgress(progress)
			if err != nil {
				return err
			}
			path := args[0]
			return g.withClient(func(c *client.Client) error {
				// A backup may take long: --timeout bounds it only if set.
				ctx, cancel := g.longCtx(24 * time.Hour)
				defer cancel()
				info, err := saveBackup(ctx, c, path, endpoint, show, g.stderr)
				if err != nil {
					return err
				}
				if g.output == outJSON {
					return writeJSON(g.stdout, map[string]any{"file": path, "node": info.NodeID,
						"applied_index": info.AppliedIndex, "applied_term": info.AppliedTerm,
						"files": len(info.Files), "bytes": info.Bytes})
				}
				g.printf("saved a backup of %s at raft index %d (%d files, %s) to %s\n",
					info.NodeID, info.AppliedIndex, len(info.Files), humanBytes(uint64(info.Bytes)), path)
				if printRestore {
					g.printf("restore it with: cairn snapshot restore %s (see 'cairn backup --help')\n", path)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "copy this node (a gRPC address) instead of the leader")
	cmd.Flags().StringVar(&progress, "progress", "auto", "show a progress bar on stderr: auto (if a terminal), always or never")
	return cmd
}

// showProgress decides whether to draw progress bars.
func (g *globals) showProgress(mode string) (bool, error) {
	switch mode {
	case "always", "true":
		return true, nil
	case "never", "false":
		return false, nil
	case "auto", "":
		f, ok := g.stderr.(*os.File)
		return ok && term.IsTerminal(int(f.Fd())), nil
	}
	return false, usagef("--progress %q: want auto, always or never", mode)
}

// saveBackup streams a backup into path.part, syncs it and renames it to
// path.
func saveBackup(ctx context.Context, c *client.Client, path, endpoint string, show bool, stderr io.Writer) (*client.BackupInfo, error) {
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var bar *progressbar.ProgressBar
	opts := []client.Option{}
	if endpoint != "" {
		opts = append(opts, client.WithEndpoint(endpoint))
	}
	if show {
		opts = append(opts, client.WithProgress(func(p client.BackupProgress) {
			if bar == nil {
				bar = progressbar.NewOptions64(int64(p.TotalBytes),
					progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription("backup"),
					progressbar.OptionShowBytes(true),
					progressbar.OptionUseIECUnits(true),
					progressbar.OptionShowCount(),
					progressbar.OptionSetWidth(30),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(stderr) }),
				)
			}
			bar.Set64(int64(p.Bytes))
		}))
	}
	info, err := c.Backup(ctx, f, opts...)
	if bar != nil {
		if err == nil {
			bar.Finish()
		} else {
			bar.Exit()
		}
	}
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	ok = true
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return info, nil
}

func newSnapshotTakeCmd(g *globals) *cobra.Command {
	var endpoint string
	cmd := &cobra.Command{
		Use:   "take",
		Short: "Make a node take a raft snapshot now (compacting its raft log)",
		Long: `Make a node take a raft snapshot now (compacting its raft log) and print the
raft index and term it covers. A snapshot of a large state machine takes a
while (about 10s at 2 GiB): unless --timeout is set, the command waits up to
10 minutes.`,
		Example: `  cairn snapshot take
  cairn snapshot take --endpoint 10.0.0.2:7379`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *client.Client) error {
				var opts []client.Option
				if endpoint != "" {
					opts = append(opts, client.WithEndpoint(endpoint))
				}
				// A node that does not answer fails within --timeout,
				// not after the snapshot's own, long, bound.
				sctx, scancel := g.ctx()
				_, err := c.Status(sctx, opts...)
				scancel()
				if err != nil {
					return err
				}
				ctx, cancel := g.longCtx(snapshotTakeTimeout)
				defer cancel()
				index, term, err := c.Snapshot(ctx, opts...)
				if err != nil {
					return err
				}
				if g.output == outJSON {
					return writeJSON(g.stdout, map[string]any{"index": index, "term": term})
				}
				g.printf("snapshot at raft index %d, term %d\n", index, term)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the node (a gRPC address; default: any)")
	return cmd
}

func newSnapshotStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "status FILE",
		Short:   "Check a backup file and describe it",
		Example: `  cairn snapshot status backup.cairn`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			info, err := client.VerifyBackup(f)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if g.output == outJSON {
				files := make([]map[string]any, 0, len(info.Files))
				for _, fi := range info.Files {
					files = append(files, map[string]any{"name": fi.Name, "size": fi.Size, "crc32c": fmt.Sprintf("%08x", fi.CRC32C)})
				}
				return writeJSON(g.stdout, map[string]any{"applied_index": info.AppliedIndex, "applied_term": info.AppliedTerm,
					"bytes": info.Bytes, "files": files})
			}
			tw := newTable(g.stdout)
			fmt.Fprintf(tw, "applied index\t%d\n", info.AppliedIndex)
			fmt.Fprintf(tw, "applied term\t%d\n", info.AppliedTerm)
			fmt.Fprintf(tw, "files\t%d\n", len(info.Files))
			fmt.Fprintf(tw, "size\t%s\n", humanBytes(uint64(info.Bytes)))
			fmt.Fprintf(tw, "checksums\tOK\n")
			return tw.Flush()
		},
	}
}

func newSnapshotRestoreCmd(g *globals) *cobra.Command {
	var extract string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Write every key of a backup into the cluster (or --extract it)",
		Long: `Restore a backup. Without --extract, every key of the backup is written into
the cluster at --endpoints, in transactions of up to 128 keys (a logical
restore: keys get new versions and raft indexes; keys already in the cluster
are overwritten, others are left alone). With --extract DIR, the backup is
only installed as a state machine directory DIR, checked, without writing to
a cluster.

` + restoreHelp,
		Example: `  cairn snapshot restore backup.cairn --endpoints 127.0.0.1:7379
  cairn snapshot restore backup.cairn --extract ./restored`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := extract
			if dir == "" {
				tmp, err := os.MkdirTemp("", "cairn-restore-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			} else if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
				return fmt.Errorf("--extract %s: directory not empty", dir)
			}
			m, err := installBackup(args[0], dir)
			if err != nil {
				return err
			}
			defer m.Close()
			if extract != "" {
				g.printf("installed the backup at raft index %d in %s (engine: %s)\n", m.AppliedIndex(), dir, filepath.Join(dir, "engine"))
				return nil
			}
			return g.withClient(func(c *client.Client) error {
				n, err := loadInto(c, m, g.timeout)
				if err != nil {
					return fmt.Errorf("restore: after %d keys: %w", n, err)
				}
				if g.output == outJSON {
					return writeJSON(g.stdout, map[string]any{"keys": n, "backup_index": m.AppliedIndex()})
				}
				g.printf("restored %d keys from the backup at raft index %d\n", n, m.AppliedIndex())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&extract, "extract", "", "only install the backup as a state machine in this (empty) directory")
	return cmd
}

// installBackup installs the backup file as a state machine in dir, with
// the state machine's own restore (which checks every checksum and that
// the engine opens at the manifest's index).
func installBackup(path, dir string) (*fsm.FSM, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := fsm.New(dir, nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := m.Restore(f); err != nil { // Restore closes f
		m.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// loadInto writes every key of m into the cluster, in transactions of at
// most MaxTxnOps puts and about 1 MiB.
func loadInto(c *client.Client, m *fsm.FSM, timeout time.Duration) (int, error) {
	const batchBytes = 1 << 20
	var ops []client.Op
	size, n := 0, 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
		n += len(ops)
		ops, size = ops[:0], 0
		return nil
	}
	req := &cairnpb.ScanRequest{Start: nil, Limit: cairnpb.DefaultScanLimit}
	for {
		page, err := m.Scan(req)
		if err != nil {
			return n, err
		}
		for _, kv := range page.GetKvs() {
			if len(ops) == cairnpb.MaxTxnOps || (len(ops) > 0 && size+len(kv.GetKey())+len(kv.GetValue()) > batchBytes) {
				if err := flush(); err != nil {
					return n, err
				}
			}
			ops = append(ops, client.OpPut(kv.GetKey(), kv.GetValue()))
			size += len(kv.GetKey()) + len(kv.GetValue())
		}
		if len(page.GetNextPageToken()) == 0 {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	if err := flush(); err != nil {
		return n, err
	}
	if n == 0 && m.AppliedIndex() == 0 {
		return 0, errors.New("the backup is empty")
	}
	return n, nil
}
