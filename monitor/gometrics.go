package monitor

import (
	"sync"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft and memberlist report their metrics (commit and apply
// latency, FSM batch sizes, snapshot timings, gossip) through
// github.com/hashicorp/go-metrics' process-wide sink (raft v1.8.0 and
// memberlist v0.7.0 import it directly; the compat package that chose
// between it and armon/go-metrics is gone from go-metrics v0.7.0). The
// monitor installs go-metrics' Prometheus sink there once per process and
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
