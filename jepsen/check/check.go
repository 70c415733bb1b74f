// Package check decides whether a jepsen history is correct.
//
// Check dispatches on History.Workload:
//
//   - "register": get/put/cas on a few keys. Linearizability is checked with
//     porcupine (github.com/anishathalye/porcupine), one single-key register
//     model partitioned by key. An Info (indeterminate) operation gets return
//     time +infinity (math.MaxInt64), so porcupine may place it anywhere after
//     its invocation, including "never" (after every other operation); an Info
//     read constrains nothing and is dropped. A read that found nothing
//     observed the initial state. A cas with Outcome Fail is a failed
//     comparison (the register held something other than Expected) when its
//     Error is empty or contains "compare failed" (client.ErrCompareFailed);
//     any other failed cas, and every failed write or read, certainly had no
//     effect and is dropped. Porcupine runs with a time limit; when it runs
//     out the verdict is unknown, never valid.
//   - "set": unique adds and final reads of the whole set. Every acknowledged
//     add must be in the final read (else lost), every value in it must have
//     been added (else unexpected); indeterminate adds found are "recovered".
//     A final read that failed makes the verdict unknown.
//   - "bank": transfers and reads of all balances in one transaction. Every
//     successful read must see History.Accounts balances summing to
//     History.Total, none negative.
//
// Anomaly strings start with a kind ("stale-read:", "lost-write:",
// "cas-failed-but-applied:", "lost:", "wrong-total:", ...) followed by the
// operations involved, so they can be grepped and asserted on.
package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnkv/cairn/jepsen/history"
)

// Status is the three-valued verdict.
type Status string

const (
	Valid   Status = "valid"
	Invalid Status = "invalid"
	// Unknown: the checker could not decide (porcupine timed out, the final
	// read failed, nothing was read). Never reported as valid.
	Unknown Status = "unknown"
)

// DefaultTimeout bounds the porcupine search of Check.
const DefaultTimeout = 2 * time.Minute

// Options tune CheckWith.
type Options struct {
	// Timeout for the linearizability search (register); <= 0 means
	// DefaultTimeout.
	Timeout time.Duration

	noPrune bool // tests: search the whole register history
}

// Result is the outcome of a check; it is what summary.json holds.
type Result struct {
	Workload string `json:"workload"`
	// Valid is true only when Status is Valid.
	Valid  bool   `json:"valid"`
	Status Status `json:"status"`
	Seed   int64  `json:"seed"`
	Nodes  int    `json:"nodes,omitempty"`
	// Ops is the number of operations in the history; Counts breaks them
	// down by function and outcome: Counts["write"]["info"].
	Ops    int                                `json:"ops"`
	Counts map[string]map[history.Outcome]int `json:"counts"`
	// Faults counts injected faults by nemesis.
	Faults map[string]int `json:"faults"`
	// Anomalies found, each naming the operations involved.
	Anomalies []string `json:"anomalies"`
	// Notes explain an Unknown status or anything else worth reading.
	Notes []string `json:"notes,omitempty"`

	Register *RegisterResult `json:"register,omitempty"`
	Set      *SetResult      `json:"set,omitempty"`
	Bank     *BankResult     `json:"bank,omitempty"`

	// regInfo is porcupine's linearization (for the HTML visualization);
	// absent when the Result was decoded from JSON.
	regInfo *porcupine.LinearizationInfo
}

// Check checks h with the default options.
func Check(h *history.History) Result {
	return CheckWith(h, Options{})
}

// CheckWith checks h.
func CheckWith(h *history.History, o Options) Result {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if h == nil {
		return Result{Status: Unknown, Counts: map[string]map[history.Outcome]int{}, Faults: map[string]int{},
			Anomalies: []string{}, Notes: []string{"no history"}}
	}
	r := Result{
		Workload:  h.Workload,
		Seed:      h.Seed,
		Nodes:     h.Nodes,
		Ops:       len(h.Ops),
		Counts:    map[string]map[history.Outcome]int{},
		Faults:    map[string]int{},
		Anomalies: []string{},
	}
	for _, op := range h.Ops {
		m := r.Counts[op.F]
		if m == nil {
			m = map[history.Outcome]int{}
			r.Counts[op.F] = m
		}
		m[op.Outcome]++
	}
	for _, f := range h.Faults {
		r.Faults[f.Nemesis]++
	}
	if bad := validateOps(h); len(bad) > 0 {
		r.Status = Unknown
		r.Notes = append(r.Notes, bad...)
		return r
	}
	switch h.Workload {
	case "register":
		checkRegister(h, o, &r)
	case "set":
		checkSet(h, &r)
	case "bank":
		checkBank(h, &r)
	default:
		r.Status = Unknown
		r.Notes = append(r.Notes, fmt.Sprintf("unknown workload %q (want register, set or bank)", h.Workload))
	}
	if len(r.Anomalies) > 0 {
		// An anomaly is proof, whatever else could not be decided.
		r.Status = Invalid
	}
	r.Valid = r.Status == Valid
	return r
}

// validateOps reports malformed operations (bad outcome, return before
// call, a function foreign to the workload) rather than checking nonsense.
func validateOps(h *history.History) []string {
	fs := map[string][]string{
		"register": {history.Read, history.Write, history.CAS},
		"set":      {history.Add, history.ReadAll},
		"bank":     {history.Transfer, history.ReadBanks},
	}[h.Workload]
	var bad []string
	for i, op := range h.Ops {
		if len(bad) >= 10 {
			bad = append(bad, "…")
			break
		}
		switch op.Outcome {
		case history.OK, history.Fail, history.Info:
		default:
			bad = append(bad, fmt.Sprintf("malformed history: op %d has outcome %q", i, op.Outcome))
			continue
		}
		if op.Outcome != history.Info && op.Return < op.Call {
			bad = append(bad, fmt.Sprintf("malformed history: op %d (%s) returns at %v before its call at %v", i, describe(op), op.Return, op.Call))
		}
		if fs != nil && !contains(fs, op.F) {
			bad = append(bad, fmt.Sprintf("malformed history: op %d has function %q, not one of %s's %v", i, op.F, h.Workload, fs))
		}
	}
	return bad
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// describe names one operation for anomaly messages, e.g.
// "p3 write k1=5 [1.200s,1.350s] ok".
func describe(op history.Op) string {
	var what string
	switch op.F {
	case history.Read:
		if op.Outcome != history.OK {
			what = fmt.Sprintf("read %s", op.Key)
		} else if op.Found {
			what = fmt.Sprintf("read %s→%d", op.Key, op.Value)
		} else {
			what = fmt.Sprintf("read %s→not-found", op.Key)
		}
	case history.Write:
		what = fmt.Sprintf("write %s=%d", op.Key, op.Value)
	case history.CAS:
		what = fmt.Sprintf("cas %s %d→%d", op.Key, op.Expected, op.Value)
	case history.Add:
		what = fmt.Sprintf("add %d", op.Value)
	case history.ReadAll:
		what = fmt.Sprintf("read-all (%d values)", len(op.Values))
	case history.Transfer:
		what = fmt.Sprintf("transfer %d from %d to %d", op.Amount, op.From, op.To)
	case history.ReadBanks:
		what = fmt.Sprintf("read-banks %v", op.Balances)
	default:
		what = op.F
	}
	ret := fmtDur(op.Return)
	if op.Outcome == history.Info {
		ret = "∞"
	}
	s := fmt.Sprintf("p%d %s [%s,%s] %s", op.Process, what, fmtDur(op.Call), ret, op.Outcome)
	if op.Node != "" {
		s += " via " + op.Node
	}
	if op.Error != "" && op.Outcome != history.OK {
		s += " (" + op.Error + ")"
	}
	return s
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// Verdict is the short text the CLI prints.
func Verdict(r Result) string {
	var b strings.Builder
	word := map[Status]string{Valid: "VALID", Invalid: "INVALID", Unknown: "UNKNOWN"}[r.Status]
	if word == "" {
		word = "UNKNOWN"
	}
	fmt.Fprintf(&b, "%s: %s — %d ops", r.Workload, word, r.Ops)
	var ok, fail, info int
	for _, m := range r.Counts {
		ok += m[history.OK]
		fail += m[history.Fail]
		info += m[history.Info]
	}
	fmt.Fprintf(&b, " (%d ok, %d fail, %d info)", ok, fail, info)
	if len(r.Faults) > 0 {
		names := make([]string, 0, len(r.Faults))
		for n := range r.Faults {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%d %s", r.Faults[n], n)
		}
		fmt.Fprintf(&b, ", faults: %s", strings.Join(parts, ", "))
	} else {
		b.WriteString(", no faults")
	}
	switch {
	case r.Register != nil:
		fmt.Fprintf(&b, "\n  register: %d keys checked, %d with a violation, %d undecided (porcupine %s in %s)",
			r.Register.KeysChecked, len(r.Register.KeysInvalid), len(r.Register.KeysUnknown), r.Register.Porcupine, r.Register.CheckTime)
	case r.Set != nil:
		s := r.Set
		fmt.Fprintf(&b, "\n  set: %d acknowledged, %d lost, %d unexpected, %d recovered, %d never read",
			s.Acknowledged, s.LostCount, s.UnexpectedCount, s.RecoveredCount, s.NeverReadCount)
	case r.Bank != nil:
		k := r.Bank
		fmt.Fprintf(&b, "\n  bank: %d reads, %d with a wrong total, %d with a negative balance",
			k.Reads, k.WrongTotal, k.NegativeReads)
	}
	const maxShown = 5
	for i, a := range r.Anomalies {
		if i == maxShown {
			fmt.Fprintf(&b, "\n  … and %d more anomalies (summary.json)", len(r.Anomalies)-maxShown)
			break
		}
		b.WriteString("\n  " + a)
	}
	for _, n := range r.Notes {
		b.WriteString("\n  note: " + n)
	}
	return b.String()
}
