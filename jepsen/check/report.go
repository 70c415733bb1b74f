package check

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnkv/cairn/jepsen/history"
)

// Report file names inside the results directory.
const (
	SummaryFile   = "summary.json"
	HistoryFile   = "history.jsonl"
	FaultsFile    = "faults.json"
	RunFile       = "run.json"
	LinearizeFile = "linearizability.html"
	TimelineFile  = "timeline.png"
)

// runInfo is the History without its operations and faults (run.json), so
// that ReadHistory can rebuild the History from a results directory.
type runInfo struct {
	Workload string `json:"workload"`
	Seed     int64  `json:"seed"`
	Nodes    int    `json:"nodes"`
	Duration int64  `json:"duration_ns"`
	Accounts int    `json:"accounts,omitempty"`
	Total    int64  `json:"total,omitempty"`
}

// WriteReport writes the results of a run into dir (created if missing):
// summary.json (r), history.jsonl (one Op per line), faults.json, run.json
// (the History's header), timeline.png (throughput and latency per second
// with the fault windows shaded) and, for the register workload,
// linearizability.html (porcupine's visualization, faults as annotations).
// It writes every file it can and returns the errors joined.
func WriteReport(dir string, h *history.History, r Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	try := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("jepsen report %s: %w", filepath.Join(dir, name), err))
		}
	}
	try(SummaryFile, writeJSON(filepath.Join(dir, SummaryFile), r))
	faults := h.Faults
	if faults == nil {
		faults = []history.Fault{}
	}
	try(FaultsFile, writeJSON(filepath.Join(dir, FaultsFile), faults))
	try(RunFile, writeJSON(filepath.Join(dir, RunFile), runInfo{
		Workload: h.Workload, Seed: h.Seed, Nodes: h.Nodes, Duration: int64(h.Duration), Accounts: h.Accounts, Total: h.Total,
	}))
	try(HistoryFile, writeHistory(filepath.Join(dir, HistoryFile), h.Ops))
	if h.Workload == "register" {
		try(LinearizeFile, writeVisualization(filepath.Join(dir, LinearizeFile), h, r))
	}
	try(TimelineFile, writeTimeline(filepath.Join(dir, TimelineFile), h))
	return errors.Join(errs...)
}

func writeFile(path string, fill func(w *bufio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeJSON(path string, v any) error {
	return writeFile(path, func(w *bufio.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(v)
	})
}

func writeHistory(path string, ops []history.Op) error {
	return writeFile(path, func(w *bufio.Writer) error {
		e := json.NewEncoder(w)
		for i := range ops {
			if err := e.Encode(&ops[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReadHistory rebuilds the History that WriteReport wrote into dir, so a
// run can be checked again (or with another checker version).
func ReadHistory(dir string) (*history.History, error) {
	var ri runInfo
	if err := readJSON(filepath.Join(dir, RunFile), &ri); err != nil {
		return nil, err
	}
	h := &history.History{Workload: ri.Workload, Seed: ri.Seed, Nodes: ri.Nodes, Duration: durationNS(ri.Duration), Accounts: ri.Accounts, Total: ri.Total}
	if err := readJSON(filepath.Join(dir, FaultsFile), &h.Faults); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, HistoryFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := json.NewDecoder(bufio.NewReader(f))
	for line := 1; d.More(); line++ {
		var op history.Op
		if err := d.Decode(&op); err != nil {
			return nil, fmt.Errorf("%s: operation %d: %w", filepath.Join(dir, HistoryFile), line, err)
		}
		h.Ops = append(h.Ops, op)
	}
	return h, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeVisualization writes porcupine's HTML for the register history,
// with every fault as an annotation on a "nemesis" row.
func writeVisualization(path string, h *history.History, r Result) (err error) {
	var info porcupine.LinearizationInfo
	if r.regInfo != nil {
		info = *r.regInfo
	} else {
		// A Result decoded from JSON: search again.
		ops, _ := regOperations(h)
		ops, _ = pruneUnobserved(ops)
		_, info = porcupine.CheckOperationsVerbose(regModel, ops, DefaultTimeout)
	}
	var ann []porcupine.Annotation
	for _, f := range h.Faults {
		end := f.End
		if end == 0 {
			end = h.Duration
		}
		ann = append(ann, porcupine.Annotation{
			Tag:             "nemesis",
			Start:           int64(f.Start),
			End:             int64(max(end, f.Start)),
			Description:     f.Nemesis,
			Details:         fmt.Sprintf("%s: %s [%s, %s]", f.Nemesis, f.Detail, fmtDur(f.Start), fmtDur(end)),
			BackgroundColor: cssColor(f.Nemesis),
		})
	}
	info.AddAnnotations(ann)
	defer func() {
		// porcupine panics on inconsistent data; report it instead.
		if p := recover(); p != nil {
			err = fmt.Errorf("porcupine visualization: %v", p)
		}
	}()
	return porcupine.VisualizePath(regModel, info, path)
}

func durationNS(n int64) time.Duration { return time.Duration(n) }
