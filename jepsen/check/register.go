package check

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnkv/cairn/jepsen/history"
)

// RegisterResult is the register workload's part of a Result.
type RegisterResult struct {
	// KeysChecked: keys with at least one operation porcupine had to place.
	KeysChecked int `json:"keys_checked"`
	// KeysInvalid: keys with a proven violation; KeysUnknown: keys the
	// search did not finish within the time limit.
	KeysInvalid []string `json:"keys_invalid"`
	KeysUnknown []string `json:"keys_unknown"`
	// PerKey: "ok", "illegal" or "unknown" for every checked key.
	PerKey map[string]string `json:"per_key"`
	// Porcupine is the overall porcupine.CheckResult: Ok, Illegal, Unknown.
	Porcupine string `json:"porcupine"`
	TimedOut  bool   `json:"timed_out"`
	Timeout   string `json:"timeout"`
	CheckTime string `json:"check_time"`
	// Dropped: operations that constrain nothing (failed writes and reads,
	// indeterminate reads, casts rejected before apply).
	Dropped int `json:"dropped"`
	// Pruned: indeterminate writes and casts nobody observed, removed
	// before the search because they cannot change the verdict (see
	// pruneUnobserved).
	Pruned int `json:"pruned"`
}

// regState is the value of one register; Set is false before any write (a
// read that found nothing observed it).
type regState struct {
	Set bool
	V   int64
}

type regInput struct {
	Key      string
	F        string
	Value    int64
	Expected int64
	Idx      int // index in History.Ops
}

type regOutput struct {
	Outcome history.Outcome
	Found   bool
	Value   int64
}

// compareFailed says whether a failed cas is a failed comparison (which
// observed the register) rather than a rejection before apply.
func compareFailed(op history.Op) bool {
	return op.Error == "" || strings.Contains(op.Error, "compare failed")
}

// regModel is the single-register model, partitioned by key. Partitions come
// in sorted key order.
var regModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range ops {
			k := op.Input.(regInput).Key
			by[k] = append(by[k], op)
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, len(keys))
		for i, k := range keys {
			out[i] = by[k]
		}
		return out
	},
	Init: func() interface{} { return regState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s := state.(regState)
		in := input.(regInput)
		out := output.(regOutput)
		switch in.F {
		case history.Read:
			if out.Found {
				return s.Set && s.V == out.Value, s
			}
			return !s.Set, s
		case history.Write:
			return true, regState{Set: true, V: in.Value}
		case history.CAS:
			match := s.Set && s.V == in.Expected
			switch out.Outcome {
			case history.OK:
				return match, regState{Set: true, V: in.Value}
			case history.Fail:
				return !match, s
			default: // Info: applied iff it matched where it is placed
				if match {
					return true, regState{Set: true, V: in.Value}
				}
				return true, s
			}
		}
		return false, s
	},
	Hash: func(state interface{}) uint64 {
		s := state.(regState)
		if !s.Set {
			return 0
		}
		return uint64(s.V)*0x9e3779b97f4a7c15 + 1
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(regInput)
		out := output.(regOutput)
		switch in.F {
		case history.Read:
			if out.Found {
				return fmt.Sprintf("get(%s) → %d", in.Key, out.Value)
			}
			return fmt.Sprintf("get(%s) → not found", in.Key)
		case history.Write:
			return fmt.Sprintf("put(%s, %d) %s", in.Key, in.Value, out.Outcome)
		case history.CAS:
			return fmt.Sprintf("cas(%s, %d → %d) %s", in.Key, in.Expected, in.Value, out.Outcome)
		}
		return in.F
	},
	DescribeState: func(state interface{}) string {
		s := state.(regState)
		if !s.Set {
			return "∅"
		}
		return fmt.Sprint(s.V)
	},
	DescribeOperationMetadata: func(info interface{}) string {
		if s, ok := info.(string); ok {
			return s
		}
		return ""
	},
}

// regOperations turns the history into porcupine operations: Info ops return
// at +∞, processes get a fresh client id after an Info op (the process moved
// on while the old operation may still be in flight), and operations that
// constrain nothing are dropped.
func regOperations(h *history.History) (ops []porcupine.Operation, dropped int) {
	idx := make([]int, len(h.Ops))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return h.Ops[idx[a]].Call < h.Ops[idx[b]].Call })
	client := map[int]int{}
	next := 0
	for _, i := range idx {
		op := h.Ops[i]
		c, ok := client[op.Process]
		if !ok {
			c = next
			next++
			client[op.Process] = c
		}
		if op.Outcome == history.Info {
			client[op.Process] = next
			next++
		}
		switch {
		case op.Outcome == history.Fail && op.F != history.CAS,
			op.Outcome == history.Fail && !compareFailed(op),
			op.F == history.Read && op.Outcome == history.Info:
			dropped++
			continue
		}
		ret := int64(op.Return)
		if op.Outcome == history.Info {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{
			ClientId: c,
			Input:    regInput{Key: op.Key, F: op.F, Value: op.Value, Expected: op.Expected, Idx: i},
			Call:     int64(op.Call),
			Output:   regOutput{Outcome: op.Outcome, Found: op.Found, Value: op.Value},
			Return:   ret,
			Metadata: describe(op),
		})
	}
	return ops, dropped
}

// pruneUnobserved removes indeterminate writes and casts whose value no
// operation observed, when that cannot change the verdict. The search cost
// of porcupine grows exponentially with the indeterminate operations pending
// on a key (each may or may not have happened, anywhere after its call);
// most of them never took effect, and nobody saw their value.
//
// An Info write or cas w of value v on key k is removed when no read of k
// returned v, no cas on k expected v, and no cas on k that failed its
// comparison returned at or after w's call. The history is linearizable
// with w iff it is without w:
//   - without ⇒ with: place w last (its return is +∞).
//   - with ⇒ without: take a linearization and delete w. Only the operations
//     between w and the next change of the register saw v; none is a read
//     (nobody read v), an acknowledged cas (none expected v) or a failed one
//     (none returned after w's call, so none is placed after w); an Info cas
//     there (expecting something other than v) was a no-op and moves to the
//     end, where it is legal whatever it does.
//
// Removing one such operation leaves the conditions of the others intact,
// so all are removed at once.
//
// Then, an Info write or cas that is the only operation that could have
// produced its value v, and whose v was observed (by a read returning it or
// an acknowledged cas expecting it), took effect before the first of those
// observers returned: its return time becomes that instant instead of +∞.
// Every linearization of the history already places it there, so the
// verdict is the same, and the search no longer carries it to the end.
func pruneUnobserved(ops []porcupine.Operation) (kept []porcupine.Operation, pruned int) {
	type keyInfo struct {
		observed      map[int64]bool
		lastFailedCAS int64
		haveFailedCAS bool
	}
	keys := map[string]*keyInfo{}
	for _, op := range ops {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		k := keys[in.Key]
		if k == nil {
			k = &keyInfo{observed: map[int64]bool{}}
			keys[in.Key] = k
		}
		switch {
		case in.F == history.Read && out.Found:
			k.observed[out.Value] = true
		case in.F == history.CAS:
			k.observed[in.Expected] = true
			if out.Outcome == history.Fail && (!k.haveFailedCAS || op.Return > k.lastFailedCAS) {
				k.lastFailedCAS, k.haveFailedCAS = op.Return, true
			}
		}
	}
	kept = ops[:0:0]
	for _, op := range ops {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		k := keys[in.Key]
		if out.Outcome == history.Info && (in.F == history.Write || in.F == history.CAS) &&
			!k.observed[in.Value] && (!k.haveFailedCAS || k.lastFailedCAS < op.Call) {
			pruned++
			continue
		}
		kept = append(kept, op)
	}
	// Bound the return of observed indeterminate producers.
	type kv struct {
		key string
		v   int64
	}
	producers := map[kv]int{}
	firstSeen := map[kv]int64{}
	for _, op := range kept {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		switch {
		case in.F == history.Write, in.F == history.CAS && out.Outcome != history.Fail:
			producers[kv{in.Key, in.Value}]++
		}
		var seen kv
		switch {
		case in.F == history.Read && out.Outcome == history.OK && out.Found:
			seen = kv{in.Key, out.Value}
		case in.F == history.CAS && out.Outcome == history.OK:
			seen = kv{in.Key, in.Expected}
		default:
			continue
		}
		if t, ok := firstSeen[seen]; !ok || op.Return < t {
			firstSeen[seen] = op.Return
		}
	}
	for i := range kept {
		op := &kept[i]
		in, out := op.Input.(regInput), op.Output.(regOutput)
		if out.Outcome != history.Info || in.F == history.Read {
			continue
		}
		k := kv{in.Key, in.Value}
		if t, ok := firstSeen[k]; ok && producers[k] == 1 {
			op.Return = max(op.Call, t)
		}
	}
	return kept, pruned
}

func checkRegister(h *history.History, o Options, r *Result) {
	ops, dropped := regOperations(h)
	pruned := 0
	if !o.noPrune {
		ops, pruned = pruneUnobserved(ops)
	}
	parts := regModel.Partition(ops)
	keys := make([]string, len(parts))
	for i, p := range parts {
		keys[i] = p[0].Input.(regInput).Key
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(regModel, ops, o.Timeout)
	took := time.Since(start)
	// Illegal is found even when another key's search was cut short.
	timedOut := res == porcupine.Unknown || (res == porcupine.Illegal && took >= o.Timeout)
	rr := &RegisterResult{
		KeysChecked: len(keys),
		KeysInvalid: []string{},
		KeysUnknown: []string{},
		PerKey:      map[string]string{},
		Porcupine:   string(res),
		TimedOut:    timedOut,
		Timeout:     o.Timeout.String(),
		CheckTime:   took.Round(time.Millisecond).String(),
		Dropped:     dropped,
		Pruned:      pruned,
	}
	r.Register = rr
	r.regInfo = &info
	partials := info.PartialLinearizations()
	for i, k := range keys {
		longest := 0
		if i < len(partials) {
			for _, p := range partials[i] {
				longest = max(longest, len(p))
			}
		}
		switch {
		case longest == len(parts[i]):
			rr.PerKey[k] = "ok"
		case timedOut:
			rr.PerKey[k] = "unknown"
			rr.KeysUnknown = append(rr.KeysUnknown, k)
		default:
			rr.PerKey[k] = "illegal"
			rr.KeysInvalid = append(rr.KeysInvalid, k)
		}
		if rr.PerKey[k] == "ok" {
			continue
		}
		found := explainRegister(h, parts[i])
		if rr.PerKey[k] == "unknown" && len(found) > 0 {
			// The explanations are proofs by themselves.
			rr.PerKey[k] = "illegal"
			rr.KeysUnknown = rr.KeysUnknown[:len(rr.KeysUnknown)-1]
			rr.KeysInvalid = append(rr.KeysInvalid, k)
		}
		r.Anomalies = append(r.Anomalies, found...)
		if rr.PerKey[k] == "illegal" && !timedOut {
			r.Anomalies = append(r.Anomalies, porcupineAnomaly(h, k, parts[i], partials[i], longest))
		}
	}
	switch {
	case res == porcupine.Illegal || len(rr.KeysInvalid) > 0:
		r.Status = Invalid
		if len(rr.KeysInvalid) == 0 {
			// Illegal found, but the time limit hit before we could tell which key.
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("not-linearizable: porcupine found a violation on one of keys %v (the search timed out on the others)", rr.KeysUnknown))
		}
	case timedOut:
		r.Status = Unknown
		r.Notes = append(r.Notes, fmt.Sprintf("porcupine did not finish within %s; keys undecided: %v", o.Timeout, rr.KeysUnknown))
	default:
		r.Status = Valid
	}
}

// porcupineAnomaly names the operations of key k that porcupine could not
// place after its longest linearizable prefix.
func porcupineAnomaly(h *history.History, k string, part []porcupine.Operation, partials [][]int, longest int) string {
	in := map[int]bool{}
	for _, p := range partials {
		if len(p) == longest {
			for _, id := range p {
				in[id] = true
			}
			break
		}
	}
	var rest []porcupine.Operation
	for id, op := range part {
		if !in[id] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(a, b int) bool { return rest[a].Return < rest[b].Return })
	var names []string
	for i, op := range rest {
		if i == 3 {
			names = append(names, fmt.Sprintf("… %d more", len(rest)-3))
			break
		}
		names = append(names, describe(h.Ops[op.Input.(regInput).Idx]))
	}
	return fmt.Sprintf("not-linearizable: key %s: no linearization of its %d operations; the longest linearizable prefix has %d; not placeable after it: %s",
		k, len(part), longest, strings.Join(names, "; "))
}

// explainRegister looks, in one key's operations, for violations that are
// certain by themselves (they hold whatever porcupine says):
//   - unwritten-read: a read saw a value no operation wrote;
//   - cas-failed-but-applied / write-failed-but-applied: the only writer of
//     a value read later reported Fail;
//   - future-read: a read returned before any writer of its value began;
//   - stale-read / lost-write: a read began after an acknowledged write w
//     completed, yet saw a value all of whose writers completed before w
//     began (or saw nothing); lost-write when w's value is never read at all.
//
// They assume, as the traffic generates, that values are unique per key.
func explainRegister(h *history.History, part []porcupine.Operation) []string {
	type obs struct {
		op       history.Op
		found    bool
		v        int64
		observes bool
	}
	var ops []history.Op
	for _, p := range part {
		ops = append(ops, h.Ops[p.Input.(regInput).Idx])
	}
	// Include failed writes/casts (dropped from porcupine's history) as
	// candidates for "failed but applied".
	key := ops[0].Key
	for _, op := range h.Ops {
		if op.Key == key && op.Outcome == history.Fail && (op.F == history.Write || (op.F == history.CAS && !compareFailed(op))) {
			ops = append(ops, op)
		}
	}
	writers := map[int64][]history.Op{} // value → ops that may have written it
	failed := map[int64][]history.Op{}  // value → ops that reported Fail
	seen := map[int64]bool{}            // values observed by a read or a successful cas
	for _, op := range ops {
		switch {
		case op.F == history.Write && op.Outcome != history.Fail,
			op.F == history.CAS && op.Outcome != history.Fail:
			writers[op.Value] = append(writers[op.Value], op)
		case op.F == history.Write || op.F == history.CAS:
			failed[op.Value] = append(failed[op.Value], op)
		}
		if op.Outcome == history.OK && ((op.F == history.Read && op.Found) || op.F == history.CAS) {
			if op.F == history.Read {
				seen[op.Value] = true
			} else {
				seen[op.Expected] = true
			}
		}
	}
	// The reads: OK reads, and OK casts (which observed Expected).
	var reads []obs
	for _, op := range ops {
		if op.Outcome != history.OK {
			continue
		}
		switch op.F {
		case history.Read:
			reads = append(reads, obs{op: op, found: op.Found, v: op.Value})
		case history.CAS:
			reads = append(reads, obs{op: op, found: true, v: op.Expected})
		}
	}
	sort.SliceStable(reads, func(a, b int) bool { return reads[a].op.Call < reads[b].op.Call })
	// Acknowledged writes, by return time.
	var acked []history.Op
	for _, op := range ops {
		if op.Outcome == history.OK && (op.F == history.Write || op.F == history.CAS) {
			acked = append(acked, op)
		}
	}
	sort.SliceStable(acked, func(a, b int) bool { return acked[a].Return < acked[b].Return })
	// latest[i]: the index in acked[:i+1] of the write invoked last.
	latest := make([]int, len(acked))
	for i := range acked {
		latest[i] = i
		if i > 0 && acked[latest[i-1]].Call > acked[i].Call {
			latest[i] = latest[i-1]
		}
	}

	const maxPerKey = 5
	var out []string
	add := func(s string) bool {
		out = append(out, s)
		return len(out) < maxPerKey
	}
	for _, rd := range reads {
		what := "read"
		if rd.op.F == history.CAS {
			what = "cas (which compared)"
		}
		if rd.found && len(writers[rd.v]) == 0 {
			if f := failed[rd.v]; len(f) > 0 {
				kind := "write-failed-but-applied"
				if f[0].F == history.CAS {
					kind = "cas-failed-but-applied"
				}
				if !add(fmt.Sprintf("%s: key %s: %s reported failure but %s %s saw its value %d", kind, key, describe(f[0]), what, describe(rd.op), rd.v)) {
					return out
				}
				continue
			}
			if !add(fmt.Sprintf("unwritten-read: key %s: %s %s saw %d, which no operation wrote", key, what, describe(rd.op), rd.v)) {
				return out
			}
			continue
		}
		if rd.found {
			future := true
			for _, w := range writers[rd.v] {
				if w.Call <= rd.op.Return {
					future = false
				}
			}
			if future {
				if !add(fmt.Sprintf("future-read: key %s: %s %s saw %d before %s began", key, what, describe(rd.op), rd.v, describe(writers[rd.v][0]))) {
					return out
				}
				continue
			}
		}
		// The latest acknowledged write w that completed before the read
		// began and strictly follows every writer of the observed value.
		// The acknowledged write that completed before the read began and
		// began last (it is the likeliest to strictly follow the writers of
		// what the read saw).
		var stale *history.Op
		if i := sort.Search(len(acked), func(i int) bool { return acked[i].Return >= rd.op.Call }) - 1; i >= 0 {
			w := &acked[latest[i]]
			older := true
			if rd.found {
				for _, u := range writers[rd.v] {
					if u.Outcome != history.OK || u.Return >= w.Call {
						older = false // includes w itself having written the value
					}
				}
			}
			if older {
				stale = w
			}
		}
		if stale == nil {
			continue
		}
		saw := "nothing (the initial state)"
		if rd.found {
			saw = fmt.Sprintf("older value %d", rd.v)
		}
		kind := "stale-read"
		tail := ""
		if !seen[stale.Value] {
			kind = "lost-write"
			tail = fmt.Sprintf("; no operation ever observed %d", stale.Value)
		}
		if !add(fmt.Sprintf("%s: key %s: %s %s began after %s completed, yet saw %s%s", kind, key, what, describe(rd.op), describe(*stale), saw, tail)) {
			return out
		}
	}
	return out
}
