package monitor

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var verbose = flag.Bool("cluster.log", false, "log the test nodes' output")

// The tests share one 3-node cluster, each node with a monitor served by
// an httptest server, started on first use and stopped by TestMain.
var shared struct {
	once  sync.Once
	dir   string
	nodes []*cluster.Node
	srvs  []*httptest.Server
	err   error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	stopShared()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func nodeConfig(dir, id string) cluster.Config {
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return cluster.Config{
		ID: id, DataDir: filepath.Join(dir, id),
		GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		BootstrapExpect:  3,
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		RequestTimeout: 5 * time.Second, LeaderWaitTimeout: 2 * time.Second, ShutdownTimeout: 2 * time.Second,
		ReconcileInterval: 100 * time.Millisecond,
		Policy: membership.Policy{FailedGracePeriod: time.Minute, MinQuorum: 3, CatchUpThreshold: 256,
			StabilizationTime: 200 * time.Millisecond, MaxVoters: 5, MaxLastContact: 2 * time.Second},
		GossipProfile: membership.ProfileLocal,
		GossipTune: func(c *memberlist.Config) {
			c.ProbeInterval, c.ProbeTimeout, c.GossipInterval, c.SuspicionMult = 200*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond, 2
		},
		Logger: logger,
	}
}

// testCluster returns the shared cluster's nodes and their monitors' URLs,
// starting it if needed, once every node is ready.
func testCluster(t *testing.T) ([]*cluster.Node, []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	shared.once.Do(func() { shared.err = startShared() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	var urls []string
	for _, s := range shared.srvs {
		urls = append(urls, s.URL)
	}
	return shared.nodes, urls
}

func startShared() error {
	var err error
	if shared.dir, err = os.MkdirTemp("", "cairn-monitor-test"); err != nil {
		return err
	}
	var seed string
	for i := 1; i <= 3; i++ {
		cfg := nodeConfig(shared.dir, fmt.Sprintf("n%d", i))
		if seed != "" {
			cfg.Join = []string{seed}
		}
		mon, err := New(Options{Logger: cfg.Logger})
		if err != nil {
			return err
		}
		cfg.GRPCServerOptions = mon.GRPCServerOptions()
		cfg.Engine = &lsm.Options{EventListener: mon.EventListener(nil)}
		n, err := cluster.New(cfg, nil)
		if err != nil {
			return err
		}
		if err := n.Start(); err != nil {
			return err
		}
		shared.nodes = append(shared.nodes, n)
		if seed == "" {
			seed = n.GossipAddr()
		}
		h, err := mon.Handler(n)
		if err != nil {
			return err
		}
		shared.srvs = append(shared.srvs, httptest.NewServer(h))
	}
	// Ready means a leader, known to all, and every node caught up.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range shared.nodes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r := n.Readiness(ctx)
			cancel()
			if r.Ready {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after 30s: %s", n.ID(), r.Reason)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func stopShared() {
	for _, s := range shared.srvs {
		s.Close()
	}
	var wg sync.WaitGroup
	for _, n := range shared.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n.Shutdown(ctx)
		}()
	}
	wg.Wait()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

func leaderIndex(t *testing.T, nodes []*cluster.Node) int {
	t.Helper()
	for i, n := range nodes {
		if n.IsLeader() {
			return i
		}
	}
	t.Fatal("no leader")
	return -1
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape returns the samples of a /metrics page by series (name and
// labels as printed). A NaN sample fails the test: nothing cairn exports
// is NaN.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, body := httpGet(t, url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	return parseSamples(t, body)
}

// parseSamples parses a /metrics page in the text format into its samples
// by series, failing the test on a NaN sample.
func parseSamples(t *testing.T, body string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		if math.IsNaN(v) {
			t.Errorf("NaN sample: %s", line)
		}
		samples[line[:i]] = v
	}
	return samples
}

// metricNames returns the metric names among the series.
func metricNames(samples map[string]float64) map[string]bool {
	names := map[string]bool{}
	for s := range samples {
		name, _, _ := strings.Cut(s, "{")
		names[name] = true
	}
	return names
}

// sum adds the samples of series whose name is name and whose labels
// include every one of labels (`k="v"`).
func sum(samples map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for s, v := range samples {
		n, rest, _ := strings.Cut(s, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

func TestMetricsScrape(t *testing.T) {
	nodes, urls := testCluster(t)
	li := leaderIndex(t, nodes)
	before := scrape(t, urls[li])
	for _, name := range []string{
		// engine (lsm.Metrics)
		"cairn_engine_level_files", "cairn_engine_level_size_bytes", "cairn_engine_level_score",
		"cairn_engine_compaction_read_bytes_total", "cairn_engine_compaction_written_bytes_total",
		"cairn_engine_write_amplification_ratio", "cairn_engine_write_stalls_total", "cairn_engine_write_stall_seconds_total",
		"cairn_engine_memtable_bytes", "cairn_engine_cache_capacity_bytes", "cairn_engine_cache_hits_total",
		"cairn_engine_cache_misses_total", "cairn_engine_bloom_filter_checked_total", "cairn_engine_bloom_filter_useful_total",
		"cairn_engine_wal_syncs_total", "cairn_engine_wal_written_bytes_total", "cairn_engine_blob_bytes",
		"cairn_engine_blob_gc_read_bytes_total", "cairn_engine_writes_total", "cairn_engine_background_error",
		"cairn_engine_compaction_pending_bytes", "cairn_engine_flush_duration_seconds_count",
		// raft, from Status and the leader observer
		"cairn_raft_state", "cairn_raft_term", "cairn_raft_commit_index", "cairn_raft_applied_index",
		"cairn_raft_last_leader_contact_seconds", "cairn_raft_leader_changes_total", "cairn_raft_has_leader",
		"cairn_node_ready", "cairn_members", "cairn_raft_servers", "cairn_fsm_duplicate_requests_total",
		"cairn_raft_snapshot_bytes",
		// raft's go-metrics, bridged (a summary idle for its window has
		// no quantiles, but a count and a sum)
		"cairn_raft_commitTime_count", "cairn_raft_fsm_applyBatchNum_count", "cairn_raft_state_transitions_total",
		// gRPC server interceptors
		"cairn_grpc_server_handled_total", "cairn_grpc_server_handling_seconds_bucket",
		// runtime and process
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !metricNames(before)[name] {
			t.Errorf("missing metric %s", name)
		}
	}
	if v := before[`cairn_raft_state{state="leader"}`]; v != 1 {
		t.Errorf(`cairn_raft_state{state="leader"} = %v on the leader`, v)
	}
	// raft's counts of entries into a state are not the state: a new
	// leader entered follower, candidate and leader once each.
	if v := before[`cairn_raft_state_transitions_total{to="leader"}`]; v < 1 {
		t.Errorf(`cairn_raft_state_transitions_total{to="leader"} = %v on the leader`, v)
	}
	for i, u := range urls {
		names := metricNames(scrape(t, u))
		for _, name := range []string{"cairn_raft_state_leader", "cairn_raft_state_follower", "cairn_raft_state_candidate"} {
			if names[name] {
				t.Errorf("%s exports %s, a transition counter that reads as the state", nodes[i].ID(), name)
			}
		}
	}
	if v := sum(before, "cairn_members", `status="alive"`, `suffrage="voter"`); v != 3 {
		t.Errorf("alive voters = %v, want 3", v)
	}
	if v := before["cairn_raft_leader_changes_total"]; v < 1 {
		t.Errorf("leader changes = %v, want at least the first election", v)
	}

	// Writes through a follower move the leader's engine and raft
	// figures, and both nodes' gRPC counters.
	fi := (li + 1) % len(nodes)
	fBefore := scrape(t, urls[fi])
	conn, err := grpc.NewClient(nodes[fi].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := cairnpb.NewKVClient(conn)
	const puts = 20
	for i := range puts {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: fmt.Appendf(nil, "metrics-%d", i), Value: []byte("v")})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	after := scrape(t, urls[li])
	for _, c := range []struct {
		series string
		min    float64
	}{
		{"cairn_engine_writes_total", puts},
		{"cairn_engine_ingested_bytes_total", 1},
		{"cairn_raft_applied_index", puts},
		{"cairn_raft_commit_index", puts},
	} {
		if got := after[c.series] - before[c.series]; got < c.min {
			t.Errorf("%s rose by %v after %d puts, want at least %v", c.series, got, puts, c.min)
		}
	}
	fAfter := scrape(t, urls[fi])
	if got := sum(fAfter, "cairn_grpc_server_handled_total", `grpc_method="Put"`, `grpc_code="OK"`); got < puts {
		t.Errorf("follower's handled Put = %v, want at least %d", got, puts)
	}
	if got := fAfter[`cairn_grpc_forwarded_total{method="Put"}`] - fBefore[`cairn_grpc_forwarded_total{method="Put"}`]; got != puts {
		t.Errorf("follower's forwarded Put rose by %v, want %d", got, puts)
	}
	if got := sum(fAfter, "cairn_grpc_server_handling_seconds_count", `grpc_method="Put"`); got < puts {
		t.Errorf("follower's Put latency count = %v, want at least %d", got, puts)
	}

	// A snapshot flushes the leader's engine (through the listener the
	// monitor put on it) and leaves a snapshot of the writes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := nodes[li].Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	snapped := scrape(t, urls[li])
	if got := snapped["cairn_engine_flush_duration_seconds_count"] - after["cairn_engine_flush_duration_seconds_count"]; got < 1 {
		t.Errorf("flush duration count rose by %v after a snapshot's flush", got)
	}
	if got := snapped["cairn_raft_snapshot_bytes"]; got <= 0 {
		t.Errorf("snapshot bytes %v after a snapshot", got)
	}

	// Health endpoints: every node is live and ready.
	for i, u := range urls {
		if code, body := httpGet(t, u+"/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz: %d %s", nodes[i].ID(), code, body)
		}
		if code, body := httpGet(t, u+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "ready") {
			t.Errorf("%s /readyz: %d %s", nodes[i].ID(), code, body)
		}
	}
	// pprof is off unless asked for.
	if code, _ := httpGet(t, urls[li]+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without Pprof: %d, want 404", code)
	}
	mon, err := New(Options{Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := mon.Handler(nodes[li])
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, body := httpGet(t, srv.URL+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine with Pprof: %d %.200s", code, body)
	}
}

// TestEngineEventHistograms: the monitor's event listener times the
// engine's flushes and compactions (by output level) and still calls the
// listener it wraps.
func TestEngineEventHistograms(t *testing.T) {
	mon, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wrapped int
	l := mon.EventListener(&lsm.EventListener{CompactionInstalled: func(lsm.CompactionInfo) { wrapped++ }})
	l.FlushInstalled(lsm.FlushInfo{Duration: 30 * time.Millisecond})
	l.FlushInstalled(lsm.FlushInfo{Duration: 10 * time.Millisecond})
	l.CompactionInstalled(lsm.CompactionInfo{OutputLevel: 6, Duration: 2 * time.Second})
	if wrapped != 1 {
		t.Fatalf("wrapped listener called %d times, want 1", wrapped)
	}
	fams, err := mon.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{} // name{labels} -> count, sum
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil && strings.HasPrefix(f.GetName(), "cairn_engine_") {
				key := f.GetName()
				for _, lp := range m.GetLabel() {
					key += "{" + lp.GetName() + "=" + lp.GetValue() + "}"
				}
				got[key] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
			}
		}
	}
	for key, want := range map[string][2]float64{
		"cairn_engine_flush_duration_seconds":                      {2, 0.04},
		"cairn_engine_compaction_duration_seconds{output_level=6}": {1, 2},
	} {
		g := got[key]
		if g[0] != want[0] || g[1] < want[1]-1e-9 || g[1] > want[1]+1e-9 {
			t.Errorf("%s: count %v sum %v, want count %v sum %v (all: %v)", key, g[0], g[1], want[0], want[1], got)
		}
	}
}
