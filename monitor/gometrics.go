package monitor

import (
	"math"
	"slices"
	"sync"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// hashicorp/raft and memberlist report their metrics (commit and apply
// latency, FSM batch sizes, snapshot timings, gossip) through
// github.com/hashicorp/go-metrics' process-wide sink (raft v1.8.0 and
// memberlist v0.7.0 import it directly; the compat package that chose
// between it and armon/go-metrics is gone from go-metrics v0.7.0). The
// monitor installs a bridge there once per process, go-metrics' Prometheus
// sink behind goMetricsBridge, and registers the bridge as a collector in
// each monitor's registry. Names keep go-metrics' form under the cairn_
// prefix (cairn_raft_commitTime, cairn_raft_fsm_applyBatchNum,
// cairn_memberlist_gossip...); timings are summaries in milliseconds, as
// go-metrics measures them. Two things are changed on the way:
//
//   - raft's counters of entries into a state (raft.state.leader,
//     raft.state.follower, raft.state.candidate) become one counter,
//     cairn_raft_state_transitions_total{to}. Under their own names,
//     cairn_raft_state_leader and its siblings sat beside the
//     cairn_raft_state{state} gauge and all read 1 on a new leader (it had
//     been a follower and a candidate once each): they read as the state.
//   - A summary that saw no observation in its window (go-metrics' sink
//     keeps 10s) has no quantiles, where the sink would export NaN: NaN
//     makes an alert's comparison false without saying why and breaks
//     dashboards that plot the quantiles directly. Its _sum and _count are
//     kept, so rate(_sum)/rate(_count) still gives the mean. Quantiles are
//     kept, not turned into histogram buckets: the sink feeds one summary
//     type with milliseconds, entry counts and bytes, and no one bucket
//     layout fits those, while dashboards built on the quantile series
//     keep working whenever there is traffic. Any other NaN sample the sink
//     might hold is dropped too: nothing the bridge exports is NaN.
var (
	sinkOnce sync.Once
	sink     *goMetricsBridge
	sinkErr  error
)

// goMetricsSink returns the process-wide go-metrics bridge, installing it
// on first use.
func goMetricsSink() (*goMetricsBridge, error) {
	sinkOnce.Do(func() {
		sink, sinkErr = newGoMetricsBridge(gmprom.PrometheusOpts{
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

// transitionsKey is go-metrics' key of cairn_raft_state_transitions_total.
var transitionsKey = []string{"cairn", "raft", "state", "transitions", "total"}

// newGoMetricsBridge returns a bridge over a Prometheus sink made with
// opts, the transition counters declared (so that each is 0 until raft
// first enters its state, with a help text).
func newGoMetricsBridge(opts gmprom.PrometheusOpts) (*goMetricsBridge, error) {
	for _, s := range raftStates {
		opts.CounterDefinitions = append(opts.CounterDefinitions, gmprom.CounterDefinition{
			Name:        transitionsKey,
			ConstLabels: []gometrics.Label{{Name: "to", Value: s}},
			Help:        "Times raft entered a state (to=leader, follower, candidate; each time this node stands for election counts one to candidate). Not the current state: that is cairn_raft_state.",
		})
	}
	ps, err := gmprom.NewPrometheusSinkFrom(opts)
	if err != nil {
		return nil, err
	}
	return &goMetricsBridge{PrometheusSink: ps}, nil
}

// goMetricsBridge is go-metrics' Prometheus sink with raft's state
// counters renamed (as go-metrics hands them over) and NaN kept out of
// what it collects. It is a gometrics.MetricSink and a
// prometheus.Collector.
type goMetricsBridge struct {
	*gmprom.PrometheusSink
}

var (
	_ gometrics.MetricSink               = (*goMetricsBridge)(nil)
	_ gometrics.PrecisionGaugeMetricSink = (*goMetricsBridge)(nil)
	_ prometheus.Collector               = (*goMetricsBridge)(nil)
)

// raftStates are the states raft counts entries into (raft.state.<state>).
var raftStates = []string{"leader", "follower", "candidate"}

// IncrCounter implements gometrics.MetricSink.
func (b *goMetricsBridge) IncrCounter(key []string, val float32) {
	b.IncrCounterWithLabels(key, val, nil)
}

// IncrCounterWithLabels implements gometrics.MetricSink.
func (b *goMetricsBridge) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	key, labels = renameCounter(key, labels)
	b.PrometheusSink.IncrCounterWithLabels(key, val, labels)
}

// renameCounter maps go-metrics' key of raft's state counters,
// cairn.raft.state.<state>, to cairn.raft.state.transitions.total with a
// label to=<state>; other keys are returned as they are.
func renameCounter(key []string, labels []gometrics.Label) ([]string, []gometrics.Label) {
	if len(key) == 4 && key[0] == "cairn" && key[1] == "raft" && key[2] == "state" && slices.Contains(raftStates, key[3]) {
		return transitionsKey, append(slices.Clip(labels), gometrics.Label{Name: "to", Value: key[3]})
	}
	return key, labels
}

// Collect implements prometheus.Collector: the sink's metrics, each
// summary without its NaN quantiles and no sample whose value is NaN.
func (b *goMetricsBridge) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric)
	go func() {
		defer close(in)
		b.PrometheusSink.Collect(in)
	}()
	for m := range in {
		if m = finite(m); m != nil {
			ch <- m
		}
	}
}

// finite returns m without NaN: a summary without its NaN quantiles, nil
// for a sample (or a summary's sum) that is NaN, m itself if it has none.
func finite(m prometheus.Metric) prometheus.Metric {
	pb := &dto.Metric{}
	if err := m.Write(pb); err != nil {
		return m // the registry reports it
	}
	switch {
	case pb.Gauge != nil && math.IsNaN(pb.Gauge.GetValue()),
		pb.Counter != nil && math.IsNaN(pb.Counter.GetValue()),
		pb.Untyped != nil && math.IsNaN(pb.Untyped.GetValue()),
		pb.Summary != nil && math.IsNaN(pb.Summary.GetSampleSum()):
		return nil
	case pb.Summary != nil:
		q := pb.Summary.Quantile
		kept := slices.DeleteFunc(slices.Clone(q), func(q *dto.Quantile) bool { return math.IsNaN(q.GetValue()) })
		if len(kept) == len(q) {
			return m
		}
		pb.Summary.Quantile = kept
		return written{desc: m.Desc(), pb: pb}
	}
	return m
}

// written is a metric already written out, as finite changed it.
type written struct {
	desc *prometheus.Desc
	pb   *dto.Metric
}

func (w written) Desc() *prometheus.Desc { return w.desc }

func (w written) Write(out *dto.Metric) error {
	proto.Reset(out)
	proto.Merge(out, w.pb)
	return nil
}
