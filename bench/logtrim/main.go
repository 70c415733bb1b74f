// Command logtrim measures how raft log compaction affects writes: it runs
// one node (or three) in-process with a small snapshot threshold, writes
// steadily through the gRPC API so that the log between two snapshots holds
// about -log-size bytes, and reports put latencies, the longest log
// compaction and the longest log append, for each log store:
//
//	go run ./bench/logtrim [-stores bolt-batched,boltdb,wal] [-nodes 1]
//	    [-value-size 64KiB] [-log-size 256MiB] [-compactions 3] [-clients 8]
//
// Stores:
//
//   - bolt-unbatched: raft-boltdb opened as cluster opened it before log
//     compaction was batched (NoFreelistSync, map freelist), passed to the
//     node as Deps: DeleteRange is one bbolt transaction;
//   - bolt-batched: the same under the batched trim cluster used until
//     2026-12-02 (batched.go): DeleteRange runs in short transactions;
//   - boltdb: cluster's raft-boltdb-format log, cluster/boltlog, which
//     trims inside the appends' transactions;
//   - wal: raft-wal (the default for a new data directory).
//
// Raft's own timers (hashicorp/go-metrics, captured with an in-process
// sink) give "compactLogs" (the DeleteRange after a snapshot; for boltdb,
// whose DeleteRange only records the range, a compaction lasts from that
// call until the store's first index passed the range),
// "leader.dispatchLog" (the leader's log append, one group commit) and
// "rpc.appendEntries.storeLogs" (a follower's append). A put "overlaps" a
// compaction when the two intervals intersect.
//
// Every node's bare log store is wrapped in a meter (meter.go), under
// the batched trim, which measures for each append how long it waited
// while a DeleteRange (one batch of a batched trim, or bolt-unbatched's
// whole range) held the store's write lock: the wait attributable to log
// compaction, which the [ops] goal bounds at 50 ms, separated from disk
// latency. For boltdb it is the wait for a background trim transaction
// plus the time the append's own transaction spent deleting. The second
// table reports it, with the transactions that only trimmed (each a bbolt
// commit: two fsyncs) against the appends' own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/boltlog"
	"github.com/cairnkv/cairn/cluster/membership"
	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var (
	stores      = flag.String("stores", "bolt-batched,boltdb,wal", "log stores to measure, in order (also bolt-unbatched)")
	numNodes    = flag.Int("nodes", 1, "nodes: 1 or 3")
	valueSizeF  = flag.String("value-size", "64KiB", "value size")
	logSizeF    = flag.String("log-size", "256MiB", "log bytes between two snapshots (sets the snapshot threshold)")
	trailing    = flag.Uint64("trailing-logs", 1024, "raft TrailingLogs")
	compactions = flag.Int("compactions", 3, "stop after this many log compactions that deleted entries (on any node)")
	clients     = flag.Int("clients", 8, "concurrent writers, one put in flight each")
	numKeys     = flag.Int("keys", 2048, "key space (overwrites keep the engine's live data at keys × value size)")
	maxDuration = flag.Duration("max-duration", 15*time.Minute, "stop a store's run after this long in any case")
	dirFlag     = flag.String("dir", "", "parent of the temporary data directories (default: the system's)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench/logtrim: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	valueSize, err := parseSize(*valueSizeF)
	if err != nil {
		return err
	}
	logSize, err := parseSize(*logSizeF)
	if err != nil {
		return err
	}
	if *numNodes != 1 && *numNodes != 3 {
		return fmt.Errorf("-nodes %d: use 1 or 3", *numNodes)
	}
	sink := newSink()
	mc := metrics.DefaultConfig("")
	mc.EnableHostname = false
	mc.EnableRuntimeMetrics = false
	mc.EnableServiceLabel = false
	if _, err := metrics.NewGlobal(mc, sink); err != nil {
		return err
	}
	threshold := uint64(max(logSize/valueSize, 1))
	fmt.Printf("logtrim: %d node(s), %d-byte values, snapshot threshold %d entries (%s of log), trailing logs %d, %d clients, GOMAXPROCS %d\n",
		*numNodes, valueSize, threshold, *logSizeF, *trailing, *clients, runtime.GOMAXPROCS(0))
	fmt.Println("put max and append max are split: during a log compaction (trim) / outside any; all times in ms")
	fmt.Printf("%-15s %7s %6s %7s %7s %8s | %8s %8s | %5s %8s %8s | %8s %8s\n",
		"store", "puts", "MB/s", "put p50", "p99", "p99.9", "max trim", "max else",
		"trims", "trim max", "trim avg", "app trim", "app else")
	var results []*result
	for _, store := range strings.Split(*stores, ",") {
		r, err := measure(store, int(valueSize), threshold, sink)
		if err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
		r.print(store)
		r.store = store
		results = append(results, r)
	}
	fmt.Println()
	fmt.Println("append wait attributable to log compaction (time an append waited while a DeleteRange held the store's write lock), ms;")
	fmt.Println(`"during" = appends overlapping a compaction (raft's compactLogs window); a delete is one DeleteRange call (one batch)`)
	fmt.Println(`or boltdb background trim; "trim tx" = transactions that only trimmed (a commit each), "in app" = entries deleted inside appends`)
	fmt.Printf("%-15s %8s %7s | %9s %8s %8s %8s %6s | %8s %8s %8s | %7s %8s\n",
		"store", "appends", "during", "wait max", "p99 dur", "p99.9 d", "p99 all", ">50ms",
		"deletes", "del p99", "del max", "trim tx", "in app")
	for _, r := range results {
		r.printWait()
	}
	return nil
}

// printWait prints the meters' figures.
func (r *result) printWait() {
	var during, all []time.Duration
	var maxWait time.Duration
	over := 0
	for _, a := range r.metered {
		all = append(all, a.trimWait)
		if overlaps(window{a.start, a.start.Add(a.total)}, r.trims) {
			during = append(during, a.trimWait)
		}
		maxWait = max(maxWait, a.trimWait)
		if a.trimWait > 50*time.Millisecond {
			over++
		}
	}
	var holds []time.Duration
	for _, d := range r.deletes {
		holds = append(holds, d.end.Sub(d.start))
	}
	trimmed := 0
	var txTrim, txPlain []time.Duration // boltlog: append transactions with and without trim work
	for _, a := range r.metered {
		trimmed += a.trimmed
		switch {
		case a.innerStart.IsZero():
		case a.trimmed > 0:
			txTrim = append(txTrim, a.txTime)
		default:
			txPlain = append(txPlain, a.txTime)
		}
	}
	fmt.Printf("%-15s %8d %7d | %9.1f %8.1f %8.1f %8.1f %6d | %8d %8.1f %8.1f | %7d %8d\n",
		r.store, len(all), len(during), ms(maxWait), ms(quantile(during, 0.99)), ms(quantile(during, 0.999)),
		ms(quantile(all, 0.99)), over, len(holds), ms(quantile(holds, 0.99)), ms(quantile(holds, 1)),
		r.trimCommits, trimmed)
	if len(txTrim)+len(txPlain) > 0 {
		fmt.Printf("%-15s append transactions (lock held, commit included), ms: %d that trimmed: p50 %.1f p99 %.1f max %.1f; %d that did not: p50 %.1f p99 %.1f max %.1f\n",
			"", len(txTrim), ms(quantile(txTrim, 0.5)), ms(quantile(txTrim, 0.99)), ms(quantile(txTrim, 1)),
			len(txPlain), ms(quantile(txPlain, 0.5)), ms(quantile(txPlain, 0.99)), ms(quantile(txPlain, 1)))
	}
}

// quantile returns the q-quantile of ds (sorting it); 0 if empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// result is one store's run.
type result struct {
	store       string
	metered     []appendSample // every node's appends, from the meters
	deletes     []window       // every node's DeleteRange calls (and boltlog's background trims)
	trimCommits int            // transactions that only trimmed
	puts        []putSample
	elapsed     time.Duration
	valueSize   int
	trims       []window // compactLogs that deleted entries
	appends     []window // log appends (leader and followers)
}

type putSample struct {
	start time.Time
	lat   time.Duration
}

type window struct{ start, end time.Time }

func (r *result) print(store string) {
	lats := make([]time.Duration, len(r.puts))
	var putOvl, putBase time.Duration
	for i, p := range r.puts {
		lats[i] = p.lat
		if overlaps(window{p.start, p.start.Add(p.lat)}, r.trims) {
			putOvl = max(putOvl, p.lat)
		} else {
			putBase = max(putBase, p.lat)
		}
	}
	var appOvl, appBase time.Duration
	for _, a := range r.appends {
		if overlaps(a, r.trims) {
			appOvl = max(appOvl, a.end.Sub(a.start))
		} else {
			appBase = max(appBase, a.end.Sub(a.start))
		}
	}
	slices.Sort(lats)
	q := func(f float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return ms(lats[min(len(lats)-1, int(f*float64(len(lats))))])
	}
	var trimMax, trimSum time.Duration
	for _, w := range r.trims {
		d := w.end.Sub(w.start)
		trimMax = max(trimMax, d)
		trimSum += d
	}
	trimAvg := time.Duration(0)
	if len(r.trims) > 0 {
		trimAvg = trimSum / time.Duration(len(r.trims))
	}
	mbps := float64(len(r.puts)*r.valueSize) / r.elapsed.Seconds() / (1 << 20)
	fmt.Printf("%-15s %7d %6.1f %7.1f %7.1f %8.1f | %8.1f %8.1f | %5d %8.1f %8.1f | %8.1f %8.1f\n",
		store, len(r.puts), mbps, q(0.5), q(0.99), q(0.999), ms(putOvl), ms(putBase),
		len(r.trims), ms(trimMax), ms(trimAvg), ms(appOvl), ms(appBase))
}

// overlaps reports whether w intersects one of ws.
func overlaps(w window, ws []window) bool {
	for _, x := range ws {
		if w.start.Before(x.end) && w.end.After(x.start) {
			return true
		}
	}
	return false
}

func measure(store string, valueSize int, threshold uint64, sink *sink) (*result, error) {
	dir, err := os.MkdirTemp(*dirFlag, "cairn-logtrim-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	nodes, closers, meters, err := startNodes(dir, store, threshold)
	defer func() {
		for _, n := range nodes {
			n.Shutdown(context.Background())
		}
		for _, c := range closers {
			c()
		}
	}()
	if err != nil {
		return nil, err
	}
	var leader *cluster.Node
	for _, n := range nodes {
		if n.IsLeader() {
			leader = n
		}
	}
	if leader == nil {
		return nil, errors.New("no leader")
	}
	conn, err := grpc.NewClient(leader.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(valueSize+(1<<20))))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	kv := cairnpb.NewKVClient(conn)

	sink.reset()
	for _, m := range meters {
		m.reset()
	}
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var stop atomic.Bool
	var retries atomic.Int64
	var wg sync.WaitGroup
	samples := make([][]putSample, *clients)
	errs := make([]error, *clients)
	start := time.Now()
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for !stop.Load() {
				k := fmt.Appendf(nil, "key-%08d", rng.IntN(*numKeys))
				t0 := time.Now()
				// A put that fails with Unavailable (a leader change: the
				// node forwards to the next leader) is retried; its
				// latency counts from the first attempt.
				for attempt := 0; ; attempt++ {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: k, Value: value})
					cancel()
					if err == nil {
						break
					}
					if status.Code(err) != codes.Unavailable || attempt == 20 {
						errs[i] = err
						stop.Store(true)
						return
					}
					retries.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
				samples[i] = append(samples[i], putSample{t0, time.Since(t0)})
			}
		}()
	}
	deadline := time.After(*maxDuration)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
wait:
	for !stop.Load() {
		select {
		case <-deadline:
			fmt.Fprintf(os.Stderr, "%s: -max-duration reached\n", store)
			break wait
		case <-tick.C:
		}
		n := len(compactionWindows(sink, meters))
		if n >= *compactions {
			break
		}
		if time.Since(lastReport) > 30*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(os.Stderr, "%s: %v, %d compactions\n", store, time.Since(start).Round(time.Second), n)
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if n := retries.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d puts retried after Unavailable (leader changes)\n", store, n)
	}
	r := &result{elapsed: elapsed, valueSize: valueSize, trims: compactionWindows(sink, meters)}
	for _, s := range samples {
		r.puts = append(r.puts, s...)
	}
	r.appends = sink.appends()
	for _, m := range meters {
		apps, dels, commits := m.samples()
		r.metered = append(r.metered, apps...)
		r.deletes = append(r.deletes, dels...)
		r.trimCommits += commits
	}
	return r, nil
}

// compactionWindows returns the log compactions so far: raft's
// compactLogs timer, or for boltlog (whose DeleteRange returns at once)
// the meters' windows from the DeleteRange until the range was deleted.
func compactionWindows(sink *sink, meters []*meter) []window {
	if len(meters) == 0 || !meters[0].observed {
		return sink.trims()
	}
	var ws []window
	for _, m := range meters {
		ws = append(ws, m.compactions()...)
	}
	slices.SortFunc(ws, func(a, b window) int { return a.start.Compare(b.start) })
	return ws
}

// startNodes starts the nodes and waits until the leader serves; closers
// close the log stores, which the bench opens itself to meter them.
func startNodes(dir, store string, threshold uint64) ([]*cluster.Node, []func(), []*meter, error) {
	var nodes []*cluster.Node
	var closers []func()
	var meters []*meter
	var seed string
	for i := 1; i <= *numNodes; i++ {
		cfg := cluster.Config{
			ID:                fmt.Sprintf("n%d", i),
			DataDir:           filepath.Join(dir, fmt.Sprintf("n%d", i)),
			GRPCAddr:          "127.0.0.1:0",
			RaftAddr:          "127.0.0.1:0",
			GossipAddr:        "127.0.0.1:0",
			BootstrapExpect:   *numNodes,
			GossipProfile:     membership.ProfileLocal,
			Logger:            slog.New(slog.DiscardHandler),
			SnapshotThreshold: threshold,
			SnapshotInterval:  500 * time.Millisecond,
			TrailingLogs:      *trailing,
			MaxValueSize:      64 << 20,
			RequestTimeout:    60 * time.Second,
		}
		if seed != "" {
			cfg.Join = []string{seed}
		}
		raftDir := filepath.Join(cfg.DataDir, "raft")
		if err := os.MkdirAll(raftDir, 0o755); err != nil {
			return nodes, closers, meters, err
		}
		m := &meter{}
		deps := &cluster.Deps{}
		switch store {
		case "bolt-unbatched", "bolt-batched":
			s, err := raftboltdb.New(raftboltdb.Options{
				Path:        filepath.Join(raftDir, "raft.db"),
				BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
			})
			if err != nil {
				return nodes, closers, meters, err
			}
			closers = append(closers, func() { s.Close() })
			m.LogStore = s
			deps.LogStore, deps.StableStore = m, s
			if store == "bolt-batched" {
				deps.LogStore = newTrimBatchingStore(m)
			}
		case cluster.LogStoreBoltDB, cluster.LogStoreWAL:
			ls, ss, c, err := cluster.OpenRaftLogStore(store, raftDir, func(s raft.LogStore) raft.LogStore {
				if b, ok := s.(*boltlog.Store); ok {
					m.observe(b)
				}
				m.LogStore = s
				return m
			})
			if err != nil {
				return nodes, closers, meters, err
			}
			closers = append(closers, func() { c.Close() })
			deps.LogStore, deps.StableStore = ls, ss
		default:
			return nodes, closers, meters, fmt.Errorf("unknown store %q", store)
		}
		meters = append(meters, m)
		n, err := cluster.New(cfg, deps)
		if err != nil {
			return nodes, closers, meters, err
		}
		if err := n.Start(); err != nil {
			return nodes, closers, meters, err
		}
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := grpc.NewClient(nodes[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nodes, closers, meters, err
	}
	defer c.Close()
	for {
		_, err := cairnpb.NewKVClient(c).Get(ctx, &cairnpb.GetRequest{Key: []byte("warmup")})
		if err == nil {
			return nodes, closers, meters, nil
		}
		if ctx.Err() != nil {
			return nodes, closers, meters, fmt.Errorf("no leader: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sink is a go-metrics sink that keeps the time windows of raft's log
// compactions and log appends.
type sink struct {
	mu struct {
		sync.Mutex
		trims   []window
		appends []window // leader dispatchLog and follower storeLogs
	}
}

func newSink() *sink {
	s := &sink{}
	s.reset()
	return s
}

func (s *sink) reset() {
	s.mu.Lock()
	s.mu.trims, s.mu.appends = nil, nil
	s.mu.Unlock()
}

func (s *sink) trims() []window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mu.trims)
}

func (s *sink) appends() []window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mu.appends)
}

func (s *sink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *sink) AddSampleWithLabels(key []string, val float32, _ []metrics.Label) {
	k := strings.Join(key, ".")
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// compactLogs is timed from its start; a call that found nothing to
	// delete takes microseconds and is not a compaction.
	d := time.Duration(float64(val) * float64(time.Millisecond))
	switch k {
	case "raft.compactLogs":
		if val >= 0.5 {
			s.mu.trims = append(s.mu.trims, window{now.Add(-d), now})
		}
	case "raft.leader.dispatchLog", "raft.rpc.appendEntries.storeLogs":
		s.mu.appends = append(s.mu.appends, window{now.Add(-d), now})
	}
}

func (s *sink) SetGauge([]string, float32)                               {}
func (s *sink) SetGaugeWithLabels([]string, float32, []metrics.Label)    {}
func (s *sink) EmitKey([]string, float32)                                {}
func (s *sink) IncrCounter([]string, float32)                            {}
func (s *sink) IncrCounterWithLabels([]string, float32, []metrics.Label) {}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional KiB, MiB or GiB", s)
	}
	return n * mult, nil
}
