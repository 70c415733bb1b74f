package check

import (
	"fmt"
	"sort"

	"github.com/cairnkv/cairn/jepsen/history"
)

// maxListed bounds the value lists in SetResult and the per-kind anomaly
// lines; the counts are always exact.
const maxListed = 1000

const maxLines = 20

// SetResult is the set workload's part of a Result.
type SetResult struct {
	Attempted    int `json:"attempted"`    // add operations
	Acknowledged int `json:"acknowledged"` // adds with Outcome OK
	// FinalRead describes the read the verdict rests on; FinalReadOK is
	// false when there was none or it failed (the verdict is then unknown).
	FinalRead     string `json:"final_read"`
	FinalReadOK   bool   `json:"final_read_ok"`
	FinalReadSize int    `json:"final_read_size"`

	LostCount          int `json:"lost_count"`           // acknowledged, absent from the final read
	UnexpectedCount    int `json:"unexpected_count"`     // in the final read, never added
	RecoveredCount     int `json:"recovered_count"`      // indeterminate adds present
	NeverReadCount     int `json:"never_read_count"`     // acknowledged after the final read began, absent
	FailedPresentCount int `json:"failed_present_count"` // adds that reported Fail, present
	DuplicateCount     int `json:"duplicate_count"`      // values a read returned twice
	StaleReads         int `json:"stale_reads"`          // earlier reads missing an add acknowledged before they began

	Lost          []int64 `json:"lost"`
	Unexpected    []int64 `json:"unexpected"`
	Recovered     []int64 `json:"recovered"`
	NeverRead     []int64 `json:"never_read"`
	FailedPresent []int64 `json:"failed_present"`
}

func appendCapped(xs []int64, v int64) []int64 {
	if len(xs) < maxListed {
		return append(xs, v)
	}
	return xs
}

func checkSet(h *history.History, r *Result) {
	s := &SetResult{Lost: []int64{}, Unexpected: []int64{}, Recovered: []int64{}, NeverRead: []int64{}, FailedPresent: []int64{}}
	r.Set = s
	adds := map[int64][]history.Op{}
	var lastAddCall history.Op
	var reads []history.Op
	for _, op := range h.Ops {
		switch op.F {
		case history.Add:
			s.Attempted++
			if op.Outcome == history.OK {
				s.Acknowledged++
			}
			adds[op.Value] = append(adds[op.Value], op)
			if op.Call >= lastAddCall.Call {
				lastAddCall = op
			}
		case history.ReadAll:
			reads = append(reads, op)
		}
	}
	sort.SliceStable(reads, func(a, b int) bool { return reads[a].Call < reads[b].Call })
	// Final reads begin after the last add was invoked (the runner reads
	// after the traffic stopped and the cluster healed).
	var final *history.Op
	anyFinal := false
	for i := range reads {
		if s.Attempted > 0 && reads[i].Call <= lastAddCall.Call {
			continue
		}
		anyFinal = true
		if reads[i].Outcome == history.OK {
			final = &reads[i]
		}
	}
	if final == nil {
		r.Status = Unknown
		if anyFinal {
			r.Notes = append(r.Notes, "every final read failed or was indeterminate: cannot tell lost adds")
		} else {
			r.Notes = append(r.Notes, "no read-all after the last add: cannot tell lost adds")
		}
		return
	}
	s.FinalRead = describe(*final)
	s.FinalReadOK = true
	s.FinalReadSize = len(final.Values)
	present := map[int64]bool{}
	var lines []string
	line := func(kind string, n int, msg string) {
		if n <= maxLines {
			lines = append(lines, msg)
		} else if n == maxLines+1 {
			lines = append(lines, fmt.Sprintf("%s: … more (see the set section's counts)", kind))
		}
	}
	for _, v := range final.Values {
		if present[v] {
			s.DuplicateCount++
			line("duplicate", s.DuplicateCount, fmt.Sprintf("duplicate: value %d appears twice in the final read %s", v, s.FinalRead))
			continue
		}
		present[v] = true
	}
	values := make([]int64, 0, len(adds))
	for v := range adds {
		values = append(values, v)
	}
	sort.Slice(values, func(a, b int) bool { return values[a] < values[b] })
	for _, v := range values {
		var ok, info, fail *history.Op
		for i := range adds[v] {
			op := &adds[v][i]
			switch op.Outcome {
			case history.OK:
				ok = op
			case history.Info:
				info = op
			case history.Fail:
				fail = op
			}
		}
		switch {
		case ok != nil && !present[v] && ok.Return >= final.Call:
			s.NeverReadCount++
			s.NeverRead = appendCapped(s.NeverRead, v)
		case ok != nil && !present[v]:
			s.LostCount++
			s.Lost = appendCapped(s.Lost, v)
			line("lost", s.LostCount, fmt.Sprintf("lost: %s was acknowledged but is missing from the final read %s", describe(*ok), s.FinalRead))
		case ok == nil && info != nil && present[v]:
			s.RecoveredCount++
			s.Recovered = appendCapped(s.Recovered, v)
		case ok == nil && info == nil && fail != nil && present[v]:
			s.FailedPresentCount++
			s.FailedPresent = appendCapped(s.FailedPresent, v)
			line("add-failed-but-applied", s.FailedPresentCount, fmt.Sprintf("add-failed-but-applied: %s reported failure but the final read %s contains it", describe(*fail), s.FinalRead))
		}
	}
	unexpected := make([]int64, 0)
	for v := range present {
		if _, ok := adds[v]; !ok {
			unexpected = append(unexpected, v)
		}
	}
	sort.Slice(unexpected, func(a, b int) bool { return unexpected[a] < unexpected[b] })
	for _, v := range unexpected {
		s.UnexpectedCount++
		s.Unexpected = appendCapped(s.Unexpected, v)
		line("unexpected", s.UnexpectedCount, fmt.Sprintf("unexpected: value %d is in the final read %s but was never added", v, s.FinalRead))
	}
	// Earlier successful reads must contain every add acknowledged before
	// they began (reads are linearizable).
	for _, rd := range reads {
		if rd.Outcome != history.OK || rd.Call == final.Call && rd.Process == final.Process {
			continue
		}
		in := map[int64]bool{}
		for _, v := range rd.Values {
			in[v] = true
		}
		var missing []int64
		var first history.Op
		for _, v := range values {
			for _, op := range adds[v] {
				if op.Outcome == history.OK && op.Return < rd.Call && !in[v] {
					if len(missing) == 0 {
						first = op
					}
					missing = append(missing, v)
				}
			}
		}
		if len(missing) > 0 {
			s.StaleReads++
			line("stale-read", s.StaleReads, fmt.Sprintf("stale-read: %s misses %d acknowledged adds that completed before it began, e.g. %s", describe(rd), len(missing), describe(first)))
		}
	}
	r.Anomalies = append(r.Anomalies, lines...)
	if len(lines) == 0 {
		r.Status = Valid
	} else {
		r.Status = Invalid
	}
}
