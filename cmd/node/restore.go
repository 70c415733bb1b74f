package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cairnkv/cairn/cluster"
)

const restoreUsage = "usage: cairn-node restore --from BACKUP --data-dir DIR --id ID [--raft-addr ADDR] [--initial-cluster ID=ADDR,...]"

// runRestore seeds a data directory from a backup file (physical restore;
// see cluster.SeedFromBackup and README "Restore a cluster from a
// backup"): the node started on it afterwards is the first member of a
// new cluster holding the backup's data.
func runRestore(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-node restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "backup file (`cairn snapshot save`)")
	dataDir := fs.String("data-dir", "", "data directory of the new node (must not hold a node's state)")
	id := fs.String("id", "", "ID of the new node")
	raftAddr := fs.String("raft-addr", cluster.DefaultRaftAddr, "raft address the new node will advertise (its --advertise-raft-addr, else --raft-addr)")
	initial := fs.String("initial-cluster", "", "voters of the new cluster as ID=RAFT-ADDR,... (default: this node alone); restore each of them from the same backup")
	logStore := fs.String("raft-log-store", cluster.LogStoreWAL, "raft log store the node will use: wal or boltdb (the node's default for a new data directory is wal)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s\n\nFlags:\n", restoreUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return flag.ErrHelp
		}
		return &exitError{2, err}
	}
	switch {
	case fs.NArg() > 0:
		return &exitError{2, fmt.Errorf("restore: unexpected argument %q", fs.Arg(0))}
	case *from == "" || *dataDir == "" || *id == "":
		return &exitError{2, errors.New("restore: --from, --data-dir and --id are required")}
	case *logStore != cluster.LogStoreBoltDB && *logStore != cluster.LogStoreWAL:
		return &exitError{2, fmt.Errorf("restore: unknown raft log store %q", *logStore)}
	}
	servers := []cluster.SeedServer{{ID: *id, RaftAddr: *raftAddr}}
	if *initial != "" {
		servers = nil
		for _, part := range strings.Split(*initial, ",") {
			sid, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || sid == "" || addr == "" {
				return &exitError{2, fmt.Errorf("restore: --initial-cluster: %q is not ID=RAFT-ADDR", part)}
			}
			servers = append(servers, cluster.SeedServer{ID: sid, RaftAddr: addr})
		}
	}
	f, err := os.Open(*from)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	res, err := cluster.SeedFromBackup(cluster.SeedConfig{
		DataDir: *dataDir, ID: *id, Servers: servers, RaftLogStore: *logStore, Backup: f,
	})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(stdout, "restored %s into %s: %d files, %d bytes, at raft index %d term %d; start the node with --id %s --data-dir %s\n",
		*from, *dataDir, res.Files, res.Bytes, res.AppliedIndex, res.AppliedTerm, *id, *dataDir)
	return nil
}
