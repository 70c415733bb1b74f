package check

import (
	"bufio"
	"encoding/json"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/jepsen/history"
)

func withFaults(h *history.History) *history.History {
	h.Faults = []history.Fault{
		{Nemesis: "partition", Detail: "isolate leader n1", Start: h.Duration / 5, End: h.Duration / 3},
		{Nemesis: "kill", Detail: "kill n2", Start: h.Duration / 2, End: h.Duration * 3 / 5},
		{Nemesis: "pause", Detail: "pause n3", Start: h.Duration * 4 / 5}, // never healed
	}
	return h
}

func checkReportDir(t *testing.T, dir string, h *history.History, r Result) {
	t.Helper()
	var got Result
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != r.Status || got.Valid != r.Valid || got.Ops != len(h.Ops) || got.Workload != h.Workload ||
		!reflect.DeepEqual(got.Counts, r.Counts) || !reflect.DeepEqual(got.Anomalies, r.Anomalies) {
		t.Fatalf("summary.json does not hold the result:\n%s", b)
	}
	f, err := os.Open(filepath.Join(dir, HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for s := bufio.NewScanner(f); s.Scan(); lines++ {
		var op history.Op
		if err := json.Unmarshal(s.Bytes(), &op); err != nil {
			t.Fatalf("history.jsonl line %d: %v", lines+1, err)
		}
		if !reflect.DeepEqual(op, h.Ops[lines]) {
			t.Fatalf("history.jsonl line %d: %+v, want %+v", lines+1, op, h.Ops[lines])
		}
	}
	if lines != len(h.Ops) {
		t.Fatalf("history.jsonl has %d lines, want %d", lines, len(h.Ops))
	}
	var faults []history.Fault
	b, _ = os.ReadFile(filepath.Join(dir, FaultsFile))
	if err := json.Unmarshal(b, &faults); err != nil || len(faults) != len(h.Faults) {
		t.Fatalf("faults.json: %v %s", err, b)
	}
	pf, err := os.Open(filepath.Join(dir, TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatalf("timeline.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 300 {
		t.Fatalf("timeline.png is %v", b)
	}
	// The directory rebuilds the history, which checks the same.
	h2, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(h2.Faults) == 0 && len(h.Faults) == 0 {
		h2.Faults = h.Faults // nil and empty both read back as empty
	}
	if !reflect.DeepEqual(h, h2) {
		t.Fatalf("ReadHistory differs")
	}
	if r2 := Check(h2); r2.Status != r.Status || !reflect.DeepEqual(r2.Anomalies, r.Anomalies) {
		t.Fatalf("re-check: %s, first check: %s", Verdict(r2), Verdict(r))
	}
}

func TestWriteReportRegister(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	h := simRegister(rng, 3, 6, 200, 0.05)
	// Stretch the run to tens of seconds, so the timeline has many buckets.
	for i := range h.Ops {
		h.Ops[i].Call *= 100
		h.Ops[i].Return *= 100
	}
	h.Duration *= 100
	h = withFaults(h)
	// One stale read, so the visualization has something to show.
	for i := range h.Ops {
		if h.Ops[i].F == history.Read && h.Ops[i].Outcome == history.OK && h.Ops[i].Found {
			h.Ops[i].Value = -1
			break
		}
	}
	r := Check(h)
	mustStatus(t, r, Invalid)
	dir := filepath.Join(t.TempDir(), "run")
	if err := WriteReport(dir, h, r); err != nil {
		t.Fatal(err)
	}
	checkReportDir(t, dir, h, r)
	html, err := os.ReadFile(filepath.Join(dir, LinearizeFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<html", "isolate leader n1", "put(k"} {
		if !strings.Contains(string(html), want) {
			t.Fatalf("linearizability.html lacks %q", want)
		}
	}
	if dst := os.Getenv("JEPSEN_REPORT_KEEP"); dst != "" {
		_ = os.CopyFS(dst, os.DirFS(dir))
	}
	// A Result decoded from summary.json (no porcupine info) still gets
	// its visualization.
	var decoded Result
	b, _ := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "again")
	if err := WriteReport(dir2, h, decoded); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir2, LinearizeFile)); err != nil || st.Size() < 1000 {
		t.Fatalf("visualization from a decoded result: %v", err)
	}
}

func TestWriteReportSetAndBank(t *testing.T) {
	for _, h := range []*history.History{
		withFaults(simSet(rand.New(rand.NewPCG(12, 1)), 4, 60, 0.05)),
		withFaults(simBank(rand.New(rand.NewPCG(13, 1)), 5, 4, 60)),
		{Workload: "bank", Accounts: 2, Total: 10}, // no operations at all
	} {
		t.Run(h.Workload, func(t *testing.T) {
			if h.Workload == "bank" && h.Ops != nil {
				h.Duration = time.Duration(0)
				for _, op := range h.Ops {
					h.Duration = max(h.Duration, op.Return)
				}
				h = withFaults(h)
			}
			r := Check(h)
			dir := t.TempDir()
			if err := WriteReport(dir, h, r); err != nil {
				t.Fatal(err)
			}
			checkReportDir(t, dir, h, r)
			if _, err := os.Stat(filepath.Join(dir, LinearizeFile)); !os.IsNotExist(err) {
				t.Fatalf("visualization for %s: %v", h.Workload, err)
			}
		})
	}
}
