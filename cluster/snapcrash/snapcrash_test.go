// Package snapcrash kills (kill -9) a real cairn node process while it
// receives a snapshot from its leader and while it installs it, and checks
// that the node restarts on its data directory and catches up with every
// acknowledged write.
package snapcrash

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/internal/testnet"
	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// childEnv, when set, makes the test binary run one node with the JSON
// childSpec it holds, until killed.
const childEnv = "CAIRN_SNAPCRASH_CHILD"

var (
	flagRounds = flag.Int("rounds", 2, "kill -9 rounds (alternately during receive and install)")
	flagSeed   = flag.Uint64("seed", 0, "seed of the kill timing (0: random)")
)

type childSpec struct {
	ID, DataDir, GRPCAddr, RaftAddr, GossipAddr string
	Join                                        []string
	Bootstrap                                   bool // a single-node cluster
}

func TestMain(m *testing.M) {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(childMain(s))
	}
	os.Exit(m.Run())
}

func config(s childSpec) cluster.Config {
	return cluster.Config{
		ID: s.ID, DataDir: s.DataDir, GRPCAddr: s.GRPCAddr, RaftAddr: s.RaftAddr, GossipAddr: s.GossipAddr,
		Join:               s.Join,
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		RequestTimeout:     5 * time.Second,
		ShutdownTimeout:    2 * time.Second,
		ReconcileInterval:  100 * time.Millisecond,
		SnapshotInterval:   time.Hour,
		TrailingLogs:       16,
		Policy: membership.Policy{
			FailedGracePeriod: time.Hour, // the killed follower stays a member
			MinQuorum:         3,
			CatchUpThreshold:  256,
			StabilizationTime: 200 * time.Millisecond,
			MaxVoters:         5,
			MaxLastContact:    2 * time.Second,
		},
		GossipProfile: membership.ProfileLocal,
		GossipTune: func(c *memberlist.Config) {
			c.ProbeInterval = 200 * time.Millisecond
			c.ProbeTimeout = 100 * time.Millisecond
			c.GossipInterval = 50 * time.Millisecond
			c.PushPullInterval = time.Second
		},
		Logger: slog.New(slog.DiscardHandler),
	}
}

func childMain(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := config(s)
	if s.Bootstrap {
		cfg.BootstrapExpect = 1
	}
	n, err := cluster.New(cfg, nil)
	if err == nil {
		err = n.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	fmt.Println("started")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	return 0
}

func startChild(t *testing.T, s childSpec) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// exists reports whether any path matches one of the patterns.
func exists(patterns ...string) bool {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return true
		}
	}
	return false
}

// TestKillDuringSnapshotInstall: a follower that can only catch up by
// InstallSnapshot is killed with SIGKILL while its snapshot store receives
// the stream (snapshots/*.tmp exists) or while its FSM installs it
// (fsm/restore-* or fsm/engine.old exists); restarted in process on the
// same directory, it catches up with every acknowledged write.
func TestKillDuringSnapshotInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 rounds")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -seed)", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := 0; round < *flagRounds; round++ {
		phase := []string{"receive", "install"}[round%2]
		t.Run(fmt.Sprintf("%d-%s", round, phase), func(t *testing.T) { killRound(t, rng, phase) })
	}
}

func killRound(t *testing.T, rng *rand.Rand, phase string) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lcfg := config(childSpec{ID: "l", DataDir: filepath.Join(dir, "l"), GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0"})
	lcfg.BootstrapExpect = 1
	leader, err := cluster.New(lcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	defer leader.Shutdown(context.Background())
	if _, err := leader.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(leader.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := cairnpb.NewKVClient(conn)
	value := []byte(strings.Repeat("x", 8<<10))
	const keys = 1500 // ~12 MB: the transfer takes a while
	for i := range keys {
		if _, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte(fmt.Sprintf("k%05d", i)), Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := leader.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}

	spec := childSpec{ID: "f", DataDir: filepath.Join(dir, "f"), GRPCAddr: testnet.Addr(t), RaftAddr: testnet.Addr(t),
		GossipAddr: testnet.Addr(t), Join: []string{leader.GossipAddr()}}
	child := startChild(t, spec)
	var patterns []string
	switch phase {
	case "receive":
		patterns = []string{filepath.Join(spec.DataDir, "snapshots", "*.tmp")}
	default:
		patterns = []string{filepath.Join(spec.DataDir, "fsm", "restore-*"), filepath.Join(spec.DataDir, "fsm", "engine.old")}
	}
	deadline := time.Now().Add(60 * time.Second)
	for !exists(patterns...) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
	if time.Now().After(deadline) {
		t.Logf("never saw %v; killing anyway", patterns)
	}
	time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	// More acknowledged writes while the follower is down.
	for i := range 50 {
		if _, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte(fmt.Sprintf("after%03d", i)), Value: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}

	// The follower restarts on its directory and catches up.
	fcfg := config(spec)
	f, err := cluster.New(fcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatalf("the follower does not restart after kill -9 during the snapshot's %s: %v", phase, err)
	}
	defer f.Shutdown(context.Background())
	for f.AppliedIndex() < leader.AppliedIndex() {
		if ctx.Err() != nil {
			t.Fatalf("the follower is at %d, the leader at %d", f.AppliedIndex(), leader.AppliedIndex())
		}
		time.Sleep(10 * time.Millisecond)
	}
	fconn, err := grpc.NewClient(f.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fconn.Close()
	fkv := cairnpb.NewKVClient(fconn)
	for _, k := range []string{"k00000", fmt.Sprintf("k%05d", keys-1), "after049"} {
		r, err := fkv.Get(ctx, &cairnpb.GetRequest{Key: []byte(k), Consistency: cairnpb.Consistency_SERIALIZABLE})
		if err != nil || r.GetKv() == nil {
			t.Fatalf("follower: %s = %v, %v", k, r, err)
		}
	}
	scan, err := fkv.Scan(ctx, &cairnpb.ScanRequest{Consistency: cairnpb.Consistency_SERIALIZABLE, Limit: 10000, KeysOnly: true})
	if err != nil || len(scan.GetKvs()) != keys+50 {
		t.Fatalf("follower holds %d keys (%v), want %d", len(scan.GetKvs()), err, keys+50)
	}
}
