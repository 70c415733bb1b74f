package check

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/jepsen/history"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// op builds a register op with times in milliseconds.
func rop(p int, f string, call, ret int, out history.Outcome, key string, v int64) history.Op {
	return history.Op{Process: p, F: f, Call: ms(call), Return: ms(ret), Outcome: out, Key: key, Value: v, Found: f == history.Read}
}

func notFound(p, call, ret int, key string) history.Op {
	return history.Op{Process: p, F: history.Read, Call: ms(call), Return: ms(ret), Outcome: history.OK, Key: key}
}

func cas(p, call, ret int, out history.Outcome, key string, expected, v int64) history.Op {
	return history.Op{Process: p, F: history.CAS, Call: ms(call), Return: ms(ret), Outcome: out, Key: key, Expected: expected, Value: v}
}

func regHistory(ops ...history.Op) *history.History {
	return &history.History{Workload: "register", Seed: 1, Nodes: 3, Duration: time.Second, Ops: ops}
}

func hasAnomaly(r Result, kind string) bool {
	for _, a := range r.Anomalies {
		if strings.HasPrefix(a, kind+":") {
			return true
		}
	}
	return false
}

func mustStatus(t *testing.T, r Result, want Status) {
	t.Helper()
	if r.Status != want || r.Valid != (want == Valid) {
		b, _ := json.MarshalIndent(r, "", "  ")
		t.Fatalf("status %s valid=%v, want %s\n%s\n%s", r.Status, r.Valid, want, Verdict(r), b)
	}
}

func TestRegisterHandBuiltValid(t *testing.T) {
	cases := map[string]*history.History{
		"empty": regHistory(),
		"sequential": regHistory(
			notFound(0, 0, 1, "k"),
			rop(0, history.Write, 2, 3, history.OK, "k", 1),
			rop(1, history.Read, 4, 5, history.OK, "k", 1),
			cas(0, 6, 7, history.OK, "k", 1, 2),
			cas(1, 8, 9, history.Fail, "k", 1, 3),
			rop(1, history.Read, 10, 11, history.OK, "k", 2),
		),
		"concurrent read may see either": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 10, history.OK, "k", 2),
			rop(1, history.Read, 3, 4, history.OK, "k", 2),
			rop(2, history.Read, 3, 5, history.OK, "k", 2),
			rop(3, history.Read, 11, 12, history.OK, "k", 2),
		),
		"info write applied much later": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.Info, "k", 2),
			rop(1, history.Read, 5, 6, history.OK, "k", 1),
			rop(1, history.Read, 50, 60, history.OK, "k", 2),
		),
		"info write never applied": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.Info, "k", 2),
			rop(1, history.Read, 50, 60, history.OK, "k", 1),
		),
		"info cas either way": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			cas(0, 2, 3, history.Info, "k", 1, 2),
			rop(1, history.Read, 5, 6, history.OK, "k", 1),
			rop(1, history.Read, 7, 8, history.OK, "k", 2),
		),
		"failed write and rejected cas are no-ops": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.Fail, "k", 9),
			func() history.Op {
				o := cas(0, 4, 5, history.Fail, "k", 1, 8)
				o.Error = "cairn: unavailable: no leader"
				return o
			}(),
			rop(1, history.Read, 6, 7, history.OK, "k", 1),
		),
		"keys are independent": regHistory(
			rop(0, history.Write, 0, 1, history.OK, "a", 1),
			notFound(1, 2, 3, "b"),
			rop(1, history.Read, 2, 3, history.OK, "a", 1),
			rop(0, history.Write, 4, 5, history.OK, "b", 7),
			rop(1, history.Read, 6, 7, history.OK, "b", 7),
		),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(h)
			mustStatus(t, r, Valid)
			if len(r.Anomalies) != 0 {
				t.Fatalf("anomalies on a valid history: %v", r.Anomalies)
			}
		})
	}
}

func TestRegisterAnomalies(t *testing.T) {
	cases := []struct {
		name string
		h    *history.History
		kind string
		key  string
	}{
		{"stale read", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.OK, "k", 2),
			rop(1, history.Read, 4, 5, history.OK, "k", 1),
			rop(1, history.Read, 6, 7, history.OK, "k", 2),
		), "stale-read", "k"},
		{"stale read of the initial state", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			notFound(1, 4, 5, "k"),
			rop(1, history.Read, 6, 7, history.OK, "k", 1),
		), "stale-read", "k"},
		{"lost write", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.OK, "k", 2),
			rop(1, history.Read, 4, 5, history.OK, "k", 1),
			rop(1, history.Read, 6, 7, history.OK, "k", 1),
			rop(2, history.Write, 10, 11, history.OK, "other", 1),
		), "lost-write", "k"},
		{"cas failed but took effect", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			func() history.Op {
				o := cas(0, 2, 3, history.Fail, "k", 1, 2)
				o.Error = "cairn: compare failed"
				return o
			}(),
			rop(1, history.Read, 4, 5, history.OK, "k", 2),
		), "cas-failed-but-applied", "k"},
		{"write failed but took effect", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.Fail, "k", 2),
			rop(1, history.Read, 4, 5, history.OK, "k", 2),
		), "write-failed-but-applied", "k"},
		{"read of a value nobody wrote", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(1, history.Read, 4, 5, history.OK, "k", 42),
		), "unwritten-read", "k"},
		{"read from the future", regHistory(
			rop(1, history.Read, 0, 1, history.OK, "k", 5),
			rop(0, history.Write, 2, 3, history.OK, "k", 5),
		), "future-read", "k"},
		{"successful cas on a stale value", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			rop(0, history.Write, 2, 3, history.OK, "k", 2),
			cas(1, 4, 5, history.OK, "k", 1, 3),
			rop(1, history.Read, 6, 7, history.OK, "k", 3),
			rop(2, history.Read, 1, 9, history.OK, "k", 2),
		), "stale-read", "k"},
		{"failed cas whose comparison should have held", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "k", 1),
			cas(1, 2, 3, history.Fail, "k", 1, 2),
			rop(1, history.Read, 4, 5, history.OK, "k", 1),
		), "not-linearizable", "k"},
		{"violation on one key of two", regHistory(
			rop(0, history.Write, 0, 1, history.OK, "a", 1),
			rop(1, history.Read, 2, 3, history.OK, "a", 1),
			rop(0, history.Write, 0, 1, history.OK, "b", 1),
			rop(0, history.Write, 2, 3, history.OK, "b", 2),
			rop(1, history.Read, 4, 5, history.OK, "b", 1),
			rop(1, history.Read, 6, 7, history.OK, "b", 2),
		), "stale-read", "b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.h)
			mustStatus(t, r, Invalid)
			if !hasAnomaly(r, c.kind) {
				t.Fatalf("want a %s anomaly, got %q", c.kind, r.Anomalies)
			}
			if r.Register.Porcupine != "Illegal" {
				t.Fatalf("porcupine says %s", r.Register.Porcupine)
			}
			if len(r.Register.KeysInvalid) != 1 || r.Register.KeysInvalid[0] != c.key {
				t.Fatalf("keys invalid %v, want [%s]", r.Register.KeysInvalid, c.key)
			}
			for _, a := range r.Anomalies {
				if !strings.Contains(a, "key "+c.key) && !strings.HasPrefix(a, "not-linearizable") {
					t.Fatalf("anomaly does not name key %s: %s", c.key, a)
				}
				if !strings.Contains(a, " p") {
					t.Fatalf("anomaly names no operation: %s", a)
				}
			}
			if v := Verdict(r); !strings.Contains(v, "INVALID") || !strings.Contains(v, c.kind) {
				t.Fatalf("verdict %q", v)
			}
		})
	}
}

// simRegister simulates a linearizable register store: each process runs
// operations one after another; every operation takes effect at one instant
// inside its interval (an indeterminate one at any instant after its call,
// even after the process moved on, or never); outputs are what the register
// held at that instant.
func simRegister(rng *rand.Rand, keys, procs, opsPerProc int, infoRate float64) *history.History {
	return simRegisterMix(rng, keys, procs, opsPerProc, infoRate, 3)
}

// simRegisterMix is simRegister with casTenths of every ten operations a cas.
func simRegisterMix(rng *rand.Rand, keys, procs, opsPerProc int, infoRate float64, casTenths int) *history.History {
	type ev struct {
		at  time.Duration
		idx int
	}
	h := &history.History{Workload: "register", Seed: 7, Nodes: 3}
	var evs []ev
	next := int64(0)
	for p := 0; p < procs; p++ {
		t := time.Duration(rng.IntN(1000)) * time.Microsecond
		for i := 0; i < opsPerProc; i++ {
			call := t
			dur := time.Duration(1+rng.IntN(3000)) * time.Microsecond
			ret := call + dur
			op := history.Op{Process: p, Call: call, Return: ret, Key: fmt.Sprintf("k%d", rng.IntN(keys))}
			switch x := rng.IntN(10); {
			case x < 4:
				op.F = history.Read
			case x < 10-casTenths:
				op.F = history.Write
				next++
				op.Value = next
			default:
				op.F = history.CAS
				next++
				op.Value = next
			}
			at := call + time.Duration(rng.Int64N(int64(dur)+1))
			op.Outcome = history.OK
			switch y := rng.Float64(); {
			case y < infoRate:
				op.Outcome = history.Info
				op.Error = "context deadline exceeded"
				switch rng.IntN(3) {
				case 0: // never applied
					at = -1
				case 1: // applied long after the client gave up
					at = call + time.Duration(rng.Int64N(int64(20*time.Millisecond)))
				}
			case y < 2*infoRate && op.F != history.Read:
				op.Outcome = history.Fail
				op.Error = "cairn: unavailable: not leader"
				at = -1
			}
			h.Ops = append(h.Ops, op)
			if at >= 0 {
				evs = append(evs, ev{at, len(h.Ops) - 1})
			}
			t = ret + time.Duration(rng.IntN(500))*time.Microsecond
		}
	}
	sort.Slice(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	state := map[string]int64{}
	written := map[string][]int64{}
	for _, e := range evs {
		op := &h.Ops[e.idx]
		cur, ok := state[op.Key]
		switch op.F {
		case history.Read:
			op.Found, op.Value = ok, cur
		case history.Write:
			state[op.Key] = op.Value
			written[op.Key] = append(written[op.Key], op.Value)
		case history.CAS:
			// Expect the current value most of the time, else an old one.
			op.Expected = cur
			if ws := written[op.Key]; rng.IntN(3) == 0 && len(ws) > 0 {
				op.Expected = ws[rng.IntN(len(ws))]
			}
			if ok && cur == op.Expected {
				state[op.Key] = op.Value
				written[op.Key] = append(written[op.Key], op.Value)
			} else if op.Outcome == history.OK {
				op.Outcome = history.Fail
				op.Error = "cairn: compare failed"
			}
		}
	}
	// Indeterminate or failed casts that never ran still need an Expected.
	for i := range h.Ops {
		if h.Ops[i].F == history.CAS && h.Ops[i].Expected == 0 && h.Ops[i].Outcome != history.OK {
			h.Ops[i].Expected = h.Ops[i].Value - 1
		}
	}
	for _, op := range h.Ops {
		if op.Outcome != history.Info {
			h.Duration = max(h.Duration, op.Return)
		}
	}
	return h
}

// TestRegisterRandomValid is the property: every history of a linearizable
// register, however the intervals overlap and whatever became of the
// indeterminate operations, is accepted.
func TestRegisterRandomValid(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 15
	}
	for seed := 0; seed < n; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		h := simRegister(rng, 1+rng.IntN(4), 2+rng.IntN(8), 20+rng.IntN(60), 0.05*rng.Float64())
		r := CheckWith(h, Options{Timeout: 30 * time.Second})
		if testing.Verbose() && seed < 3 {
			t.Logf("seed %d: %s", seed, Verdict(r))
		}
		if r.Status == Unknown {
			t.Logf("seed %d: undecided within the time limit: %s", seed, Verdict(r))
			continue
		}
		if r.Status != Valid {
			t.Fatalf("seed %d: linearizable history rejected:\n%s", seed, Verdict(r))
		}
	}
}

// TestRegisterRandomStaleRead injects one stale read into a random valid
// history and expects it found.
func TestRegisterRandomStaleRead(t *testing.T) {
	found := 0
	for seed := 0; seed < 40 && found < 10; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 2))
		h := simRegister(rng, 2, 4, 40, 0)
		// w1 < w2 < r, all on one key, all acknowledged: r returning w1's value is stale.
		var w1, w2, rd = -1, -1, -1
	search:
		for i, a := range h.Ops {
			if a.F != history.Write || a.Outcome != history.OK {
				continue
			}
			for j, b := range h.Ops {
				if b.F != history.Write || b.Outcome != history.OK || b.Key != a.Key || b.Call <= a.Return {
					continue
				}
				for k, c := range h.Ops {
					if c.F == history.Read && c.Outcome == history.OK && c.Key == a.Key && c.Call > b.Return {
						w1, w2, rd = i, j, k
						break search
					}
				}
			}
		}
		if rd < 0 {
			continue
		}
		found++
		h.Ops[rd].Found, h.Ops[rd].Value = true, h.Ops[w1].Value
		r := Check(h)
		mustStatus(t, r, Invalid)
		if !hasAnomaly(r, "stale-read") && !hasAnomaly(r, "lost-write") {
			t.Fatalf("seed %d: injected stale read (w1 %s, w2 %s, read %s) not named: %q", seed,
				describe(h.Ops[w1]), describe(h.Ops[w2]), describe(h.Ops[rd]), r.Anomalies)
		}
	}
	if found < 5 {
		t.Fatalf("only %d histories had a place for a stale read", found)
	}
}

func TestRegisterTimeoutIsUnknown(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	// Many indeterminate operations on one key make the search expensive.
	h := simRegister(rng, 1, 30, 60, 0.3)
	r := CheckWith(h, Options{Timeout: time.Nanosecond})
	mustStatus(t, r, Unknown)
	if !r.Register.TimedOut || r.Register.Porcupine != "Unknown" || len(r.Register.KeysUnknown) != 1 || !strings.Contains(Verdict(r), "UNKNOWN") {
		t.Fatalf("unknown without timed_out: %s", Verdict(r))
	}
}

func TestMalformedHistoryIsUnknown(t *testing.T) {
	h := regHistory(rop(0, history.Write, 5, 1, history.OK, "k", 1))
	mustStatus(t, Check(h), Unknown)
	h = regHistory(history.Op{F: history.Write, Outcome: "maybe"})
	mustStatus(t, Check(h), Unknown)
	h = &history.History{Workload: "queue"}
	mustStatus(t, Check(h), Unknown)
}

// FuzzRegisterSimulation: every simulated linearizable history is accepted.
func FuzzRegisterSimulation(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(i, uint8(3), uint8(5), uint8(40), uint8(5))
	}
	f.Fuzz(func(t *testing.T, seed uint64, keys, procs, n, infoPct uint8) {
		rng := rand.New(rand.NewPCG(seed, 9))
		h := simRegister(rng, 1+int(keys%5), 1+int(procs%10), 1+int(n%80), float64(infoPct%20)/100)
		r := CheckWith(h, Options{Timeout: 20 * time.Second})
		if r.Status == Invalid {
			t.Fatalf("linearizable history rejected:\n%s", Verdict(r))
		}
	})
}

// FuzzCheck: arbitrary histories never panic and never come out valid with
// an anomaly or invalid without one.
func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"workload":"register","ops":[{"process":0,"f":"write","call":1,"return":2,"outcome":"ok","key":"k","value":1},{"process":1,"f":"read","call":3,"return":4,"outcome":"ok","key":"k","value":2,"found":true}]}`))
	f.Add([]byte(`{"workload":"set","ops":[{"f":"add","call":1,"return":2,"outcome":"ok","value":1},{"f":"read-all","call":3,"return":4,"outcome":"ok","values":[2,2]}]}`))
	f.Add([]byte(`{"workload":"bank","accounts":2,"total":10,"ops":[{"f":"read-banks","call":1,"return":2,"outcome":"ok","balances":[-1]}]}`))
	f.Add([]byte(`{"workload":"register","ops":[{"f":"cas","call":1,"return":0,"outcome":"info","key":"k","expected":3,"value":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h history.History
		if json.Unmarshal(b, &h) != nil || len(h.Ops) > 200 {
			return
		}
		r := CheckWith(&h, Options{Timeout: time.Second})
		if r.Valid != (r.Status == Valid) || (r.Status == Invalid) != (len(r.Anomalies) > 0) {
			t.Fatalf("inconsistent result: %s", Verdict(r))
		}
		_ = Verdict(r)
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPruneKeepsVerdict: removing unobserved indeterminate operations never
// changes porcupine's verdict, on valid histories and on corrupted ones.
func TestPruneKeepsVerdict(t *testing.T) {
	pruned, invalid := 0, 0
	for seed := 0; seed < 150; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 10))
		h := simRegisterMix(rng, 1+rng.IntN(2), 2+rng.IntN(4), 5+rng.IntN(20), 0.3*rng.Float64(), rng.IntN(4))
		// Corrupt half of them: a read sees another written value, or an
		// acknowledged operation becomes indeterminate or vice versa.
		if seed%2 == 1 {
			for i := 0; i < 1+rng.IntN(2); i++ {
				op := &h.Ops[rng.IntN(len(h.Ops))]
				switch {
				case op.F == history.Read && op.Outcome == history.OK:
					op.Found, op.Value = true, h.Ops[rng.IntN(len(h.Ops))].Value
				case op.Outcome == history.Info:
					op.Outcome = history.OK
				case op.Outcome == history.Fail && op.F == history.CAS:
					op.Outcome = history.OK
				default:
					op.Outcome = history.Info
				}
			}
		}
		full := CheckWith(h, Options{Timeout: 20 * time.Second, noPrune: true})
		fast := CheckWith(h, Options{Timeout: 20 * time.Second})
		if full.Status == Unknown {
			continue
		}
		if full.Status != fast.Status || !reflect.DeepEqual(full.Register.PerKey, fast.Register.PerKey) {
			t.Fatalf("seed %d: without pruning %s, with %d pruned %s", seed, Verdict(full), fast.Register.Pruned, Verdict(fast))
		}
		pruned += fast.Register.Pruned
		if full.Status == Invalid {
			invalid++
		}
	}
	if pruned < 20 || invalid < 20 {
		t.Fatalf("pruned %d operations, %d invalid histories: the test does not exercise pruning", pruned, invalid)
	}
	t.Logf("pruned %d operations, %d invalid histories", pruned, invalid)
}

// TestPruneMakesHardHistoryDecidable: ten clients on one key with many
// indeterminate writes defeats the search without pruning.
func TestPruneMakesHardHistoryDecidable(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 9))
	h := simRegisterMix(rng, 1, 10, 60, 0.13, 0)
	r := CheckWith(h, Options{Timeout: 50 * time.Second}) // well under 1 s of CPU; the machine may be loaded
	mustStatus(t, r, Valid)
	if r.Register.Pruned == 0 {
		t.Fatalf("nothing pruned: %s", Verdict(r))
	}
}

func TestVerdict(t *testing.T) {
	h := regHistory(
		rop(0, history.Write, 0, 1, history.OK, "k", 1),
		rop(0, history.Write, 2, 3, history.Info, "k", 2),
		rop(1, history.Read, 4, 5, history.Fail, "k", 0),
	)
	h.Faults = []history.Fault{{Nemesis: "kill", Start: ms(1), End: ms(2)}, {Nemesis: "kill", Start: ms(3)}, {Nemesis: "pause", Start: ms(3)}}
	v := Verdict(Check(h))
	for _, want := range []string{"register: VALID", "3 ops (1 ok, 1 fail, 1 info)", "faults: 2 kill, 1 pause", "1 keys checked, 0 with a violation"} {
		if !strings.Contains(v, want) {
			t.Fatalf("verdict lacks %q:\n%s", want, v)
		}
	}
	r := Check(setHistory(add(0, 0, 1, history.OK, 1), readAll(0, 2, 3, history.Fail)))
	if v := Verdict(r); !strings.HasPrefix(v, "set: UNKNOWN") || !strings.Contains(v, "note: ") {
		t.Fatalf("verdict:\n%s", v)
	}
}

// TestRegisterRandomFailedCASApplied makes a later read of a random valid
// history see the value of a cas that reported a failed comparison.
func TestRegisterRandomFailedCASApplied(t *testing.T) {
	done := 0
	for seed := 0; seed < 40 && done < 10; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 12))
		h := simRegister(rng, 2, 4, 40, 0.03)
		c, rd := -1, -1
		for i, op := range h.Ops {
			if op.F == history.CAS && op.Outcome == history.Fail && compareFailed(op) {
				for j, r := range h.Ops {
					if r.F == history.Read && r.Outcome == history.OK && r.Key == op.Key && r.Call > op.Return {
						c, rd = i, j
						break
					}
				}
			}
			if rd >= 0 {
				break
			}
		}
		if rd < 0 {
			continue
		}
		done++
		h.Ops[rd].Found, h.Ops[rd].Value = true, h.Ops[c].Value
		r := Check(h)
		mustStatus(t, r, Invalid)
		if !hasAnomaly(r, "cas-failed-but-applied") {
			t.Fatalf("seed %d: %s then %s: %q", seed, describe(h.Ops[c]), describe(h.Ops[rd]), r.Anomalies)
		}
	}
	if done < 5 {
		t.Fatalf("only %d histories had a failed cas followed by a read", done)
	}
}
