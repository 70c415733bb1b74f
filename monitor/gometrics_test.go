package monitor

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/lsm"
	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// fakeNode is a Node whose answers the test sets.
type fakeNode struct {
	id       string
	status   *cairnpb.StatusResponse
	statuses []cluster.MemberStatus
	// sampled[i], if set, is how long after the call to MemberStatuses
	// statuses[i] was sampled.
	sampled []time.Duration
}

var _ Node = (*fakeNode)(nil)

func (f *fakeNode) ID() string                      { return f.id }
func (f *fakeNode) Status() *cairnpb.StatusResponse { return f.status }
func (f *fakeNode) EngineMetrics() (*lsm.Metrics, error) {
	return nil, errors.New("fake: no engine")
}
func (f *fakeNode) LeaderChanges() (uint64, []cluster.LeaderChange) { return 1, nil }
func (f *fakeNode) Members(context.Context) (*cairnpb.MembersResponse, error) {
	var ms []*cairnpb.Member
	for _, s := range f.statuses {
		ms = append(ms, s.Member)
	}
	return &cairnpb.MembersResponse{Members: ms}, nil
}
func (f *fakeNode) MemberStatuses(context.Context) ([]cluster.MemberStatus, error) {
	now := time.Now()
	out := slices.Clone(f.statuses)
	for i, d := range f.sampled {
		out[i].SampledAt = now.Add(d)
	}
	return out, nil
}
func (f *fakeNode) Readiness(context.Context) cluster.Readiness {
	return cluster.Readiness{Ready: true}
}
func (f *fakeNode) ReconcileActions() map[string]uint64  { return nil }
func (f *fakeNode) RequestCounts() cluster.RequestCounts { return cluster.RequestCounts{} }
func (f *fakeNode) SnapshotSize() (int64, error)         { return 0, nil }

// testBridge returns a go-metrics bridge of its own (not the process-wide
// one) whose sink declares an idle summary, cairn_raft_commitTime: one
// that saw no observation in its window, as every raft timing is on an
// idle node 10s after its last event.
func testBridge(t *testing.T) *goMetricsBridge {
	t.Helper()
	b, err := newGoMetricsBridge(gmprom.PrometheusOpts{
		Registerer: prometheus.NewRegistry(),
		Name:       "test_gometrics_sink",
		SummaryDefinitions: []gmprom.SummaryDefinition{
			{Name: []string{"cairn", "raft", "commitTime"}, Help: "idle"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoMetricsBridge scrapes a monitor's /metrics after raft's go-metrics
// of a new leader went through the bridge (entered follower, candidate,
// leader; an idle commit-time summary; a busy apply-time one): no NaN, the
// state counters under cairn_raft_state_transitions_total{to} beside the
// cairn_raft_state{state} gauge, never as cairn_raft_state_leader, and
// the idle summary with its count and sum but no quantiles.
func TestGoMetricsBridge(t *testing.T) {
	b := testBridge(t)
	m, err := newMonitor(Options{}, b)
	if err != nil {
		t.Fatal(err)
	}
	conf := gometrics.DefaultConfig("cairn")
	conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
	gm, err := gometrics.New(conf, b) // as raft's calls reach the process-wide bridge
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"follower", "candidate", "candidate", "leader"} {
		gm.IncrCounter([]string{"raft", "state", s}, 1)
	}
	gm.IncrCounter([]string{"raft", "transition", "heartbeat_timeout"}, 1)
	gm.AddSample([]string{"raft", "fsm", "apply"}, 1.5)

	n := &fakeNode{id: "n1", status: &cairnpb.StatusResponse{NodeId: "n1", State: cairnpb.RaftState_LEADER, LeaderId: "n1", Term: 2}}
	h, err := m.Handler(n)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	samples := parseSamples(t, body)
	if strings.Contains(body, "NaN") {
		t.Errorf("the scrape has NaN:\n%s", grepLines(body, "NaN"))
	}
	for _, name := range []string{"cairn_raft_state_leader", "cairn_raft_state_follower", "cairn_raft_state_candidate"} {
		if metricNames(samples)[name] {
			t.Errorf("%s is exported: a transition counter that reads as the state (%s)", name, grepLines(body, name))
		}
	}
	for series, want := range map[string]float64{
		`cairn_raft_state{state="leader"}`:                   1,
		`cairn_raft_state{state="follower"}`:                 0,
		`cairn_raft_state{state="candidate"}`:                0,
		`cairn_raft_state_transitions_total{to="leader"}`:    1,
		`cairn_raft_state_transitions_total{to="follower"}`:  1,
		`cairn_raft_state_transitions_total{to="candidate"}`: 2,
		`cairn_raft_transition_heartbeat_timeout`:            1,
		`cairn_raft_commitTime_count`:                        0,
		`cairn_raft_commitTime_sum`:                          0,
		`cairn_raft_fsm_apply_count`:                         1,
		`cairn_raft_fsm_apply{quantile="0.5"}`:               1.5,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %v (exported: %v), want %v", series, got, ok, want)
		}
	}
	if lines := grepLines(body, "cairn_raft_commitTime{"); lines != "" {
		t.Errorf("the idle summary has quantiles:\n%s", lines)
	}
	if !strings.Contains(body, "# TYPE cairn_raft_state_transitions_total counter") || !strings.Contains(body, "# HELP cairn_raft_state_transitions_total Times raft entered a state") {
		t.Errorf("cairn_raft_state_transitions_total is not a counter:\n%s", grepLines(body, "transitions"))
	}
}

// TestFinite: finite drops NaN quantiles and NaN samples and leaves the
// rest alone (label values included).
func TestFinite(t *testing.T) {
	desc := prometheus.NewDesc("s", "h", []string{"peer"}, prometheus.Labels{"c": "1"})
	nan := math.NaN()
	idle := prometheus.MustNewConstSummary(desc, 3, 4.5, map[float64]float64{0.5: nan, 0.99: nan}, "n2")
	m := finite(idle)
	fams := collectOne(t, m)
	if s := fams.GetSummary(); s == nil || len(s.GetQuantile()) != 0 || s.GetSampleCount() != 3 || s.GetSampleSum() != 4.5 ||
		len(fams.GetLabel()) != 2 || fams.GetLabel()[1].GetValue() != "n2" {
		t.Fatalf("idle summary: %v", fams)
	}
	busy := prometheus.MustNewConstSummary(desc, 3, 4.5, map[float64]float64{0.5: 1, 0.99: 2}, "n2")
	if finite(busy) != busy {
		t.Fatal("a summary without NaN was rewritten")
	}
	g := prometheus.NewDesc("g", "h", nil, nil)
	if finite(prometheus.MustNewConstMetric(g, prometheus.GaugeValue, nan)) != nil {
		t.Fatal("a NaN gauge was kept")
	}
	if finite(prometheus.MustNewConstSummary(desc, 1, nan, nil, "n2")) != nil {
		t.Fatal("a summary with a NaN sum was kept")
	}
}

func collectOne(t *testing.T, m prometheus.Metric) *dto.Metric {
	t.Helper()
	pb := &dto.Metric{}
	if err := m.Write(pb); err != nil {
		t.Fatal(err)
	}
	return pb
}

// grepLines returns body's lines that contain s.
func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
