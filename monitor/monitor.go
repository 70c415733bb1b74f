package monitor

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// readyTimeout bounds /readyz's readiness check.
const readyTimeout = 2 * time.Second

// Options configure a Monitor.
type Options struct {
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Logger receives the HTTP handlers' errors; nil discards them.
	Logger *slog.Logger
}

// Monitor holds a node's metrics registry and serves its HTTP endpoints.
// Create it before the node (its gRPC interceptors go into the node's
// server options), then get the Handler once the node has started.
type Monitor struct {
	opts Options
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics
	// flushSeconds and compactionSeconds time the engine's flushes and
	// compactions (by output level), observed by EventListener's
	// callbacks as they install.
	flushSeconds      prometheus.Histogram
	compactionSeconds *prometheus.HistogramVec
}

// engineJobBuckets span a flush or compaction: 1ms to about 4 minutes.
var engineJobBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)

// New returns a monitor whose registry holds the Go runtime and process
// collectors, the gRPC server metrics and the bridge of raft's and
// memberlist's go-metrics.
func New(opts Options) (*Monitor, error) {
	sink, err := goMetricsSink()
	if err != nil {
		return nil, fmt.Errorf("monitor: go-metrics Prometheus sink: %w", err)
	}
	return newMonitor(opts, sink)
}

// newMonitor returns a monitor that collects the go-metrics bridged by
// goMetrics (tests give one of their own).
func newMonitor(opts Options, goMetrics prometheus.Collector) (*Monitor, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{
		opts: opts,
		reg:  prometheus.NewRegistry(),
		// cairn_grpc_server_started_total, _handled_total{grpc_code},
		// _msg_received_total, _msg_sent_total and
		// cairn_grpc_server_handling_seconds, per service and method.
		grpc: grpcprom.NewServerMetrics(
			grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("cairn")),
			grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("cairn")),
		),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cairn_engine_flush_duration_seconds",
			Help:    "Time a memtable flush took, from the start of its table's write to its installation.",
			Buckets: engineJobBuckets,
		}),
		compactionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cairn_engine_compaction_duration_seconds",
			Help:    "Time a compaction took, from the start of its write to its installation, by the level it wrote (a trivial move, a manifest edit, counts too).",
			Buckets: engineJobBuckets,
		}, []string{"output_level"}),
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc,
		goMetrics,
		m.flushSeconds,
		m.compactionSeconds,
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("monitor: %w", err)
		}
	}
	return m, nil
}

// GRPCServerOptions returns the interceptors that count and time the gRPC
// server's requests (cluster.Config.GRPCServerOptions).
func (m *Monitor) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor()),
	}
}

// EventListener returns the engine event listener that times flushes and
// compactions for the monitor and then calls next's callbacks (next may be
// nil). Set it as cluster.Config.Engine's EventListener before the node
// starts.
func (m *Monitor) EventListener(next *lsm.EventListener) *lsm.EventListener {
	l := &lsm.EventListener{}
	if next != nil {
		*l = *next
	}
	nextFlush, nextCompaction := l.FlushInstalled, l.CompactionInstalled
	l.FlushInstalled = func(info lsm.FlushInfo) {
		m.flushSeconds.Observe(info.Duration.Seconds())
		if nextFlush != nil {
			nextFlush(info)
		}
	}
	l.CompactionInstalled = func(info lsm.CompactionInfo) {
		m.compactionSeconds.WithLabelValues(strconv.Itoa(info.OutputLevel)).Observe(info.Duration.Seconds())
		if nextCompaction != nil {
			nextCompaction(info)
		}
	}
	return l
}

// Registry returns the monitor's registry.
func (m *Monitor) Registry() *prometheus.Registry { return m.reg }

// Handler registers n's collectors (call it once) and returns the HTTP
// handler of the metrics address:
//
//	/                 the status page
//	/metrics          Prometheus metrics
//	/healthz          200 while the node runs (liveness)
//	/readyz           200 if the node is ready (Readiness), else 503 and why
//	/debug/pprof/     net/http/pprof, with Options.Pprof
func (m *Monitor) Handler(n Node) (http.Handler, error) {
	for _, c := range []prometheus.Collector{newEngineCollector(n), newRaftCollector(n)} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("monitor: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(m.opts.Logger.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		st := n.Status()
		if st == nil || st.GetState() == cairnpb.RaftState_SHUTDOWN {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		rd := n.Readiness(ctx)
		if !rd.Ready {
			http.Error(w, "not ready: "+rd.Reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: applied index %d, leader commit index %d\n", rd.Applied, rd.LeaderCommit)
	})
	mux.Handle("GET /{$}", &statusPage{node: n, log: m.opts.Logger})
	if m.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux, nil
}
