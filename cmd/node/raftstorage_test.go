package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// TestRaftStorageFlags: the raft snapshot and log store flags reach
// cluster.Config (the cluster package tests that Config reaches raft), from
// the command line or the config file, with raft's defaults when unset.
func TestRaftStorageFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RaftLogStore != "" || cfg.SnapshotThreshold != 8192 || cfg.SnapshotInterval != 2*time.Minute ||
		cfg.TrailingLogs != 10240 || cfg.SnapshotRetain != 2 {
		t.Fatalf("defaults: store %q threshold %d interval %v trailing %d retain %d", cfg.RaftLogStore,
			cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs, cfg.SnapshotRetain)
	}
	if cfg.TrailingLogBytes != 64<<20 || cfg.SnapshotThresholdBytes != 128<<20 || cfg.RaftWALSegmentSize != 16<<20 {
		t.Fatalf("defaults: trailing bytes %d, threshold bytes %d, segment size %d",
			cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes, cfg.RaftWALSegmentSize)
	}

	name := filepath.Join(t.TempDir(), "node.json")
	writeFile(t, name, `{"raft-snapshot-retain": 4, "raft-snapshot-interval": "30s", "raft-log-store": "boltdb",
		"raft-trailing-bytes": "8MiB", "raft-wal-segment-size": 4194304}`)
	o, err = parseFlags([]string{"--config", name, "--raft-snapshot-threshold", "1000", "--raft-trailing-logs=200",
		"--raft-snapshot-interval", "10s", "--raft-snapshot-threshold-bytes", "1GiB", "--raft-wal-segment-size", "2MiB"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = o.clusterConfig(&stderr); err != nil {
		t.Fatal(err)
	}
	if cfg.RaftLogStore != cluster.LogStoreBoltDB || cfg.SnapshotThreshold != 1000 || cfg.SnapshotInterval != 10*time.Second ||
		cfg.TrailingLogs != 200 || cfg.SnapshotRetain != 4 {
		t.Fatalf("set: store %q threshold %d interval %v trailing %d retain %d", cfg.RaftLogStore,
			cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs, cfg.SnapshotRetain)
	}
	if cfg.TrailingLogBytes != 8<<20 || cfg.SnapshotThresholdBytes != 1<<30 || cfg.RaftWALSegmentSize != 2<<20 {
		t.Fatalf("set: trailing bytes %d, threshold bytes %d, segment size %d",
			cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes, cfg.RaftWALSegmentSize)
	}
	// 0 turns a byte bound off: the entry bounds alone, as before.
	o, err = parseFlags([]string{"--raft-trailing-bytes", "0", "--raft-snapshot-threshold-bytes=0"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = o.clusterConfig(&stderr); err != nil || cfg.Validate() != nil {
		t.Fatalf("byte bounds off: %v, %v", err, cfg.Validate())
	}
	if cfg.TrailingLogBytes != -1 || cfg.SnapshotThresholdBytes != -1 {
		t.Fatalf("byte bounds off: trailing bytes %d, threshold bytes %d; want -1 -1", cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes)
	}

	// Bad values fail with one line naming the flag, exit code 2.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--raft-snapshot-retain", "0"}, "--raft-snapshot-retain 0: must keep at least 1 snapshot"},
		{[]string{"--raft-snapshot-retain", "-3"}, "--raft-snapshot-retain -3"},
		{[]string{"--raft-snapshot-threshold", "0"}, "--raft-snapshot-threshold 0"},
		{[]string{"--raft-snapshot-threshold", "-1"}, "raft-snapshot-threshold"},
		{[]string{"--raft-trailing-logs", "0"}, "--raft-trailing-logs 0"},
		{[]string{"--raft-snapshot-interval", "1ms"}, "--raft-snapshot-interval 1ms: must be at least 5ms"},
		{[]string{"--raft-snapshot-interval", "soon"}, "raft-snapshot-interval"},
		{[]string{"--raft-log-store", "sqlite"}, `--raft-log-store "sqlite"`},
		{[]string{"--raft-trailing-bytes", "-1"}, "raft-trailing-bytes"},
		{[]string{"--raft-trailing-bytes", "lots"}, "raft-trailing-bytes"},
		{[]string{"--raft-snapshot-threshold-bytes", "-64MiB"}, "raft-snapshot-threshold-bytes"},
		{[]string{"--raft-wal-segment-size", "-1"}, "raft-wal-segment-size"},
		{[]string{"--raft-wal-segment-size", "0"}, "--raft-wal-segment-size 0: must be 1MiB to 1GiB"},
		{[]string{"--raft-wal-segment-size", "64KiB"}, "--raft-wal-segment-size 65536: must be 1MiB to 1GiB"},
		{[]string{"--raft-wal-segment-size", "2GiB"}, "--raft-wal-segment-size 2147483648: must be 1MiB to 1GiB"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--data-dir", filepath.Join(t.TempDir(), "d")}, c.args...)
		code := run(context.Background(), args, &stdout, &stderr)
		out := stderr.String()
		if code != 2 || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, out, c.want)
		}
	}

	// --help documents them.
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, &help, &help)
	for _, f := range []string{"-raft-log-store", "-raft-snapshot-threshold", "-raft-snapshot-interval", "-raft-trailing-logs", "-raft-snapshot-retain",
		"-raft-trailing-bytes", "-raft-snapshot-threshold-bytes", "-raft-wal-segment-size"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
