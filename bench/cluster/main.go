// Command cluster measures a 3-node cairn cluster on loopback: it starts
// three in-process nodes (real TCP raft transport, gossip and gRPC, data in a
// temporary directory) and drives them over gRPC.
//
//	go run ./bench/cluster [-duration 5s] [-value-size 256] [-keys 100000]
//
// Phases, each for -duration:
//
//   - put at 1, 16, 64 and 256 concurrent clients, sent to the leader;
//   - put at 64 clients sent round-robin to all nodes (followers forward);
//   - linearizable get at 64 clients (leader; read index per read);
//   - serializable get at 64 clients spread over the three nodes.
//
// Each client sends one request at a time. Keys are uniform random over
// -keys keys of 16 bytes; gets read keys the put phases wrote. It prints one
// line per phase: operations per second and p50/p99/max latency.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	duration  = flag.Duration("duration", 5*time.Second, "length of each phase")
	valueSize = flag.Int("value-size", 256, "value size in bytes")
	numKeys   = flag.Int("keys", 100000, "key space")
	logStore  = flag.String("raft-log-store", cluster.LogStoreWAL, "raft log store: wal (a node's default) or boltdb")
	connsPer  = flag.Int("conns", 4, "gRPC connections per node")
	cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	phases    = flag.String("phases", "put1,put16,put64,put256,putfwd64,lin1,lin64,ser1,ser64", "phases to run")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench/cluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	nodes, err := startCluster(dir)
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			n.Shutdown(context.Background())
		}
	}()
	var leader *cluster.Node
	for _, n := range nodes {
		if n.IsLeader() {
			leader = n
		}
	}
	conns := map[*cluster.Node][]*grpc.ClientConn{}
	for _, n := range nodes {
		for range *connsPer {
			c, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer c.Close()
			conns[n] = append(conns[n], c)
		}
	}
	var all []*grpc.ClientConn
	for _, n := range nodes {
		all = append(all, conns[n]...)
	}
	fmt.Printf("cairn 3-node loopback cluster: %d-byte values, %d keys, %s log store, %v per phase, GOMAXPROCS %d\n",
		*valueSize, *numKeys, *logStore, *duration, runtimeProcs())
	value := make([]byte, *valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var written atomic.Int64 // keys [0, written) exist
	put := func(ctx context.Context, c *grpc.ClientConn, rng *rand.Rand) error {
		k := rng.IntN(*numKeys)
		_, err := cairnpb.NewKVClient(c).Put(ctx, &cairnpb.PutRequest{Key: key(k), Value: value})
		if err == nil {
			for {
				w := written.Load()
				if int64(k) < w || written.CompareAndSwap(w, max(w, int64(k)+1)) {
					break
				}
			}
		}
		return err
	}
	get := func(cons cairnpb.Consistency) func(context.Context, *grpc.ClientConn, *rand.Rand) error {
		return func(ctx context.Context, c *grpc.ClientConn, rng *rand.Rand) error {
			_, err := cairnpb.NewKVClient(c).Get(ctx, &cairnpb.GetRequest{Key: key(rng.IntN(*numKeys)), Consistency: cons})
			return err
		}
	}
	all3 := all
	for _, p := range strings.Split(*phases, ",") {
		switch p {
		case "put1":
			phase("put (leader)", 1, conns[leader], put)
		case "put16":
			phase("put (leader)", 16, conns[leader], put)
		case "put64":
			phase("put (leader)", 64, conns[leader], put)
		case "put256":
			phase("put (leader)", 256, conns[leader], put)
		case "putfwd64":
			phase("put (all nodes)", 64, all3, put)
		case "lin64":
			phase("get linearizable (leader)", 64, conns[leader], get(cairnpb.Consistency_LINEARIZABLE))
		case "lin1":
			phase("get linearizable (leader)", 1, conns[leader], get(cairnpb.Consistency_LINEARIZABLE))
		case "ser64":
			phase("get serializable (all nodes)", 64, all3, get(cairnpb.Consistency_SERIALIZABLE))
		case "ser1":
			phase("get serializable (all nodes)", 1, all3, get(cairnpb.Consistency_SERIALIZABLE))
		default:
			return fmt.Errorf("unknown phase %q", p)
		}
	}
	return nil
}

func key(i int) []byte { return fmt.Appendf(nil, "key-%011d", i) }

func startCluster(dir string) ([]*cluster.Node, error) {
	var nodes []*cluster.Node
	var seed string
	for i := 1; i <= 3; i++ {
		cfg := cluster.Config{
			ID:              fmt.Sprintf("n%d", i),
			DataDir:         filepath.Join(dir, fmt.Sprintf("n%d", i)),
			GRPCAddr:        "127.0.0.1:0",
			RaftAddr:        "127.0.0.1:0",
			GossipAddr:      "127.0.0.1:0",
			BootstrapExpect: 3,
			RaftLogStore:    *logStore,
			GossipProfile:   membership.ProfileLocal,
			Logger:          slog.New(slog.DiscardHandler),
		}
		if seed != "" {
			cfg.Join = []string{seed}
		}
		n, err := cluster.New(cfg, nil)
		if err != nil {
			return nil, err
		}
		if err := n.Start(); err != nil {
			return nil, err
		}
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	// Wait for a leader that serves linearizable reads.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := grpc.NewClient(nodes[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for {
		_, err := cairnpb.NewKVClient(c).Get(ctx, &cairnpb.GetRequest{Key: []byte("warmup")})
		if err == nil {
			return nodes, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no leader: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// phase runs clients concurrent loops of op for the phase duration,
// spreading them over conns, and prints throughput and latencies.
func phase(name string, clients int, conns []*grpc.ClientConn,
	op func(context.Context, *grpc.ClientConn, *rand.Rand) error) {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, clients)
	var errs atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	end := start.Add(*duration)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			c := conns[i%len(conns)]
			l := make([]time.Duration, 0, 1<<14)
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := op(ctx, c, rng)
				cancel()
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				l = append(l, time.Since(t0))
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	fmt.Printf("%-30s clients %3d: %9.0f ops/s  p50 %8v  p99 %8v  max %8v  (%d ops, %d errors)\n",
		name, clients, float64(len(all))/elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond),
		len(all), errs.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Printf("    first error: %v\n", e)
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
