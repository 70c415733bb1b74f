package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/internal/testnet"
)

// serving is a cairn-node running in this process (run in a goroutine).
type serving struct {
	grpcAddr, gossipAddr string
	cancel               context.CancelFunc
	done                 chan int
	stderr               *syncBuffer
	stopped              bool
}

var servingLine = regexp.MustCompile(`serving gRPC on (127\.0\.0\.1:\d+) \(raft 127\.\d+\.\d+\.\d+:\d+, gossip (127\.0\.0\.1:\d+), data .*\)\n`)

// serve starts cairn-node with args and waits until it serves.
func serve(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	var stdout syncBuffer
	args = append([]string{"--log-level", "error", "--grpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}, args...)
	go func() { s.done <- run(ctx, args, &stdout, s.stderr) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(stdout.String()); m != nil {
			s.grpcAddr, s.gossipAddr = m[1], m[2]
			break
		}
		select {
		case code := <-s.done:
			cancel()
			t.Fatalf("cairn-node %v exited with %d: %s", args, code, s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("cairn-node %v: no serving line; stderr %q", args, s.stderr.String())
		}
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *serving) stop(t *testing.T) {
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Errorf("cairn-node did not stop")
	}
}

func newClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: endpoints, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestoreClusterFromBackup follows README's "Restore a cluster from a
// backup": back up a running cluster, restore the backup into a new data
// directory, start a node there, read every key, write new ones, and join
// two more nodes, which catch up (from the restored snapshot).
func TestRestoreClusterFromBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	dir := t.TempDir()
	ctx := context.Background()

	const keys = 300
	backup, info := makeBackup(t, dir, keys)

	// Restore into a new directory.
	raftAddr := testnet.Addr(t)
	newDir := filepath.Join(dir, "r1")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"restore", "--from", backup, "--data-dir", newDir, "--id", "r1", "--raft-addr", raftAddr}, &stdout, &stderr); code != 0 {
		t.Fatalf("restore exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), fmt.Sprintf("at raft index %d", info.AppliedIndex)) {
		t.Fatalf("restore output %q; want the backup's index %d", stdout.String(), info.AppliedIndex)
	}
	// Without --raft-log-store, restore lays down the log store a node
	// picks for a new data directory: raft-wal, not raft-boltdb.
	if _, err := os.Stat(filepath.Join(newDir, "raft", "raft.db")); !os.IsNotExist(err) {
		t.Fatalf("restore made a raft-boltdb log (raft/raft.db: %v); want raft-wal, the default", err)
	}
	if _, err := os.Stat(filepath.Join(newDir, "raft", "wal")); err != nil {
		t.Fatalf("restore made no raft-wal log: %v", err)
	}
	// Restoring again into it is refused.
	stderr.Reset()
	if code := run(ctx, []string{"restore", "--from", backup, "--data-dir", newDir, "--id", "r1"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "already holds a node's state") {
		t.Fatalf("second restore: exit %d, %q", code, stderr.String())
	}

	r1 := serve(t, "--id", "r1", "--data-dir", newDir, "--raft-addr", raftAddr)
	rc := newClient(t, r1.grpcAddr)
	for i := range keys {
		kv, err := rc.Get(ctx, []byte(fmt.Sprintf("k%04d", i)))
		if err != nil || string(kv.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("restored k%04d = %v, %v", i, kv, err)
		}
	}
	for i := range 50 {
		if _, err := rc.Put(ctx, []byte(fmt.Sprintf("new%03d", i)), []byte("after")); err != nil {
			t.Fatalf("write after restore: %v", err)
		}
	}

	// Two more nodes join and catch up.
	var joined []*serving
	for _, id := range []string{"r2", "r3"} {
		joined = append(joined, serve(t, "--id", id, "--data-dir", filepath.Join(dir, id), "--raft-addr", testnet.Addr(t), "--join", r1.gossipAddr))
	}
	for _, j := range joined {
		waitUntil(t, 90*time.Second, "a joined node to hold every key", func() bool {
			for _, k := range []string{"k0000", fmt.Sprintf("k%04d", keys-1), "new049"} {
				if _, err := rc.Get(ctx, []byte(k), client.WithSerializable(), client.WithEndpoint(j.grpcAddr)); err != nil {
					return false
				}
			}
			return true
		})
	}
	if _, err := rc.Put(ctx, []byte("last"), []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreInterruptedRefusesStart: a data directory a restore did not
// finish refuses to start, and restoring again into it succeeds.
func TestRestoreInterruptedRefusesStart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	backup, _ := makeBackup(t, dir, 1)

	// A truncated backup fails and leaves the directory marked.
	b, _ := os.ReadFile(backup)
	bad := filepath.Join(dir, "bad.snap")
	os.WriteFile(bad, b[:len(b)-3], 0o644)
	newDir := filepath.Join(dir, "r1")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"restore", "--from", bad, "--data-dir", newDir, "--id", "r1"}, &stdout, &stderr); code == 0 {
		t.Fatal("restore of a truncated backup succeeded")
	}
	stderr.Reset()
	code := run(ctx, []string{"--id", "r1", "--data-dir", newDir, "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "did not finish") {
		t.Fatalf("start after a failed restore: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(ctx, []string{"restore", "--from", backup, "--data-dir", newDir, "--id", "r1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("restore again: exit %d: %s", code, stderr.String())
	}
}

// makeBackup runs a node, writes keys k0000.. into it, and backs it up.
func makeBackup(t *testing.T, dir string, keys int) (string, *client.BackupInfo) {
	t.Helper()
	ctx := context.Background()
	orig := serve(t, "--id", "o1", "--data-dir", filepath.Join(dir, "orig"), "--raft-addr", "127.0.0.1:0")
	defer orig.stop(t)
	c := newClient(t, orig.grpcAddr)
	for i := range keys {
		if _, err := c.Put(ctx, []byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(dir, "backup.snap")
	f, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Backup(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return backup, info
}

// TestRestoreInitialCluster: the same backup restored into three
// directories with one --initial-cluster starts a three-voter cluster
// holding the backup.
func TestRestoreInitialCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	dir := t.TempDir()
	ctx := context.Background()
	backup, _ := makeBackup(t, dir, 50)
	ids := []string{"m1", "m2", "m3"}
	addrs := map[string]string{}
	var initial []string
	for _, id := range ids {
		addrs[id] = testnet.Addr(t)
		initial = append(initial, id+"="+addrs[id])
	}
	for _, id := range ids {
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"restore", "--from", backup, "--data-dir", filepath.Join(dir, id), "--id", id,
			"--initial-cluster", strings.Join(initial, ",")}, &stdout, &stderr); code != 0 {
			t.Fatalf("restore %s: exit %d: %s", id, code, stderr.String())
		}
	}
	var nodes []*serving
	for _, id := range ids {
		nodes = append(nodes, serve(t, "--id", id, "--data-dir", filepath.Join(dir, id), "--raft-addr", addrs[id]))
	}
	c := newClient(t, nodes[0].grpcAddr, nodes[1].grpcAddr, nodes[2].grpcAddr)
	for i := range 50 {
		kv, err := c.Get(ctx, []byte(fmt.Sprintf("k%04d", i)))
		if err != nil || string(kv.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%04d = %v, %v", i, kv, err)
		}
	}
	if _, err := c.Put(ctx, []byte("new"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitUntil(t, 30*time.Second, "every node to apply the new write", func() bool {
			_, err := c.Get(ctx, []byte("new"), client.WithSerializable(), client.WithEndpoint(n.grpcAddr))
			return err == nil
		})
	}
}
