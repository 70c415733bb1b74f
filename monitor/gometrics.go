package monitor

import (
	"sync"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft and memberlist report their metrics (commit and apply
// latency, FSM batch sizes, snapshot timings, gossip) through go-metrics'
// process-wide sink, through the compat package, which is armon/go-metrics
// unless built with the hashicorpmetrics tag. The monitor installs
// go-metrics' Prometheus sink there once per process, through the same
// compat package so that it reaches the sink raft and memberlist use, and
// registers it as a collector in each monitor's registry. Their names keep
// go-metrics' form under the cairn_ prefix (cairn_raft_commitTime,
// cairn_raft_fsm_applyBatchNum, cairn_memberlist_gossip...); timings are
// summaries in milliseconds, as go-metrics measures them.
var (
	sinkOnce sync.Once
	sink     *gmprom.PrometheusSink
	sinkErr  error
)

// goMetricsSink returns the process-wide go-metrics sink, installing it on
// first use.
func goMetricsSink() (*gmprom.PrometheusSink, error) {
	sinkOnce.Do(func() {
		sink, sinkErr = gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			// Registered by each monitor instead of the default registry.
			Registerer: prometheus.NewRegistry(),
			// Never expire: a counter that vanished after a quiet minute
			// would break rate().
			Expiration: 0,
			Name:       "cairn_gometrics_sink",
		})
		if sinkErr != nil {
			return
		}
		cfg := gometrics.DefaultConfig("cairn")
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false // the Go collector reports the runtime
		cfg.EnableServiceLabel = false
		_, sinkErr = gometrics.NewGlobal(cfg, sink)
	})
	return sink, sinkErr
}
