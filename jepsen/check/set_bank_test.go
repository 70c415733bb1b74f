package check

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cairnkv/cairn/jepsen/history"
)

func add(p, call, ret int, out history.Outcome, v int64) history.Op {
	return history.Op{Process: p, F: history.Add, Call: ms(call), Return: ms(ret), Outcome: out, Value: v}
}

func readAll(p, call, ret int, out history.Outcome, vs ...int64) history.Op {
	return history.Op{Process: p, F: history.ReadAll, Call: ms(call), Return: ms(ret), Outcome: out, Values: vs}
}

func setHistory(ops ...history.Op) *history.History {
	return &history.History{Workload: "set", Seed: 2, Nodes: 3, Duration: time.Second, Ops: ops}
}

// simSet simulates a correct set: acknowledged adds are applied, failed ones
// not, indeterminate ones either; a mid-run read sees what was applied
// before an instant inside its interval; the final read sees everything.
func simSet(rng *rand.Rand, procs, n int, infoRate float64) *history.History {
	h := &history.History{Workload: "set", Seed: 3, Nodes: 5}
	type applied struct {
		at time.Duration
		v  int64
	}
	var app []applied
	v := int64(0)
	var end time.Duration
	for p := 0; p < procs; p++ {
		t := time.Duration(rng.IntN(1000)) * time.Microsecond
		for i := 0; i < n; i++ {
			dur := time.Duration(1+rng.IntN(2000)) * time.Microsecond
			if rng.IntN(20) == 0 {
				h.Ops = append(h.Ops, history.Op{Process: p, F: history.ReadAll, Call: t, Return: t + dur, Outcome: history.OK})
			} else {
				v++
				op := history.Op{Process: p, F: history.Add, Call: t, Return: t + dur, Outcome: history.OK, Value: v}
				at := t + time.Duration(rng.Int64N(int64(dur)+1))
				switch y := rng.Float64(); {
				case y < infoRate:
					op.Outcome = history.Info
					if rng.IntN(2) == 0 {
						at = -1
					} else {
						at = t + time.Duration(rng.Int64N(int64(5*time.Millisecond)))
					}
				case y < 2*infoRate:
					op.Outcome = history.Fail
					at = -1
				}
				if at >= 0 {
					app = append(app, applied{at, v})
				}
				h.Ops = append(h.Ops, op)
			}
			t += dur + time.Duration(rng.IntN(300))*time.Microsecond
		}
		end = max(end, t)
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.F != history.ReadAll {
			continue
		}
		at := op.Call + time.Duration(rng.Int64N(int64(op.Return-op.Call)+1))
		for _, a := range app {
			if a.at <= at {
				op.Values = append(op.Values, a.v)
			}
		}
	}
	final := history.Op{Process: 0, F: history.ReadAll, Call: end + 10*time.Millisecond, Return: end + 11*time.Millisecond, Outcome: history.OK}
	for _, a := range app {
		final.Values = append(final.Values, a.v)
	}
	rng.Shuffle(len(final.Values), func(i, j int) { final.Values[i], final.Values[j] = final.Values[j], final.Values[i] })
	h.Ops = append(h.Ops, final)
	h.Duration = final.Return
	return h
}

func TestSetValid(t *testing.T) {
	h := setHistory(
		add(0, 0, 1, history.OK, 1),
		add(1, 0, 2, history.Info, 2),
		add(2, 0, 2, history.Info, 3),
		add(0, 2, 3, history.Fail, 4),
		readAll(1, 3, 4, history.OK, 1, 2),
		add(1, 5, 6, history.OK, 5),
		readAll(0, 10, 11, history.Fail),
		readAll(0, 12, 13, history.OK, 1, 2, 5),
	)
	r := Check(h)
	mustStatus(t, r, Valid)
	s := r.Set
	if s.Acknowledged != 2 || s.Attempted != 5 || s.RecoveredCount != 1 || s.Recovered[0] != 2 || s.LostCount != 0 || s.FinalReadSize != 3 {
		t.Fatalf("set details %+v", s)
	}
	for seed := 0; seed < 30; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 4))
		h := simSet(rng, 1+rng.IntN(6), 20+rng.IntN(100), 0.1*rng.Float64())
		r := Check(h)
		mustStatus(t, r, Valid)
		if r.Set.Acknowledged == 0 {
			t.Fatalf("seed %d: no acknowledged adds", seed)
		}
	}
}

func TestSetAnomalies(t *testing.T) {
	cases := []struct {
		name  string
		h     *history.History
		kind  string
		check func(*SetResult) bool
	}{
		{"lost element", setHistory(
			add(0, 0, 1, history.OK, 1),
			add(1, 0, 1, history.OK, 2),
			readAll(0, 5, 6, history.OK, 2),
		), "lost", func(s *SetResult) bool { return s.LostCount == 1 && s.Lost[0] == 1 }},
		{"unexpected element", setHistory(
			add(0, 0, 1, history.OK, 1),
			readAll(0, 5, 6, history.OK, 1, 99),
		), "unexpected", func(s *SetResult) bool { return s.UnexpectedCount == 1 && s.Unexpected[0] == 99 }},
		{"failed add present", setHistory(
			add(0, 0, 1, history.Fail, 1),
			readAll(0, 5, 6, history.OK, 1),
		), "add-failed-but-applied", func(s *SetResult) bool { return s.FailedPresentCount == 1 }},
		{"duplicate", setHistory(
			add(0, 0, 1, history.OK, 1),
			readAll(0, 5, 6, history.OK, 1, 1),
		), "duplicate", func(s *SetResult) bool { return s.DuplicateCount == 1 }},
		{"stale mid-run read", setHistory(
			add(0, 0, 1, history.OK, 1),
			readAll(1, 2, 3, history.OK),
			add(0, 4, 5, history.OK, 2),
			readAll(0, 8, 9, history.OK, 1, 2),
		), "stale-read", func(s *SetResult) bool { return s.StaleReads == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.h)
			mustStatus(t, r, Invalid)
			if !hasAnomaly(r, c.kind) || !c.check(r.Set) {
				t.Fatalf("want %s: %q %+v", c.kind, r.Anomalies, r.Set)
			}
		})
	}
	// A random valid history with one acknowledged element removed from the final read.
	for seed := 0; seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 5))
		h := simSet(rng, 4, 50, 0.05)
		final := &h.Ops[len(h.Ops)-1]
		acked := map[int64]bool{}
		for _, op := range h.Ops {
			if op.F == history.Add && op.Outcome == history.OK {
				acked[op.Value] = true
			}
		}
		i := rng.IntN(len(final.Values))
		for !acked[final.Values[i]] {
			i = (i + 1) % len(final.Values)
		}
		gone := final.Values[i]
		final.Values = append(final.Values[:i:i], final.Values[i+1:]...)
		r := Check(h)
		mustStatus(t, r, Invalid)
		if r.Set.LostCount != 1 || r.Set.Lost[0] != gone || !hasAnomaly(r, "lost") {
			t.Fatalf("seed %d: removed %d, got %+v %q", seed, gone, r.Set, r.Anomalies)
		}
	}
}

func TestSetUnknownAndNeverRead(t *testing.T) {
	// The final read failed: unknown, even though an earlier read was fine.
	r := Check(setHistory(
		add(0, 0, 1, history.OK, 1),
		readAll(1, 2, 3, history.OK, 1),
		add(0, 4, 5, history.OK, 2),
		readAll(0, 8, 9, history.Info),
	))
	mustStatus(t, r, Unknown)
	mustStatus(t, Check(setHistory(add(0, 0, 1, history.OK, 1))), Unknown)
	// An add acknowledged after the final read began is never-read, not lost.
	r = Check(setHistory(
		add(0, 0, 1, history.OK, 1),
		add(1, 2, 20, history.OK, 2),
		readAll(0, 5, 6, history.OK, 1),
	))
	mustStatus(t, r, Valid)
	if r.Set.NeverReadCount != 1 || r.Set.NeverRead[0] != 2 {
		t.Fatalf("%+v", r.Set)
	}
}

func bankHistory(accounts int, total int64, ops ...history.Op) *history.History {
	return &history.History{Workload: "bank", Seed: 4, Nodes: 3, Duration: time.Second, Accounts: accounts, Total: total, Ops: ops}
}

func readBanks(p, call, ret int, out history.Outcome, bs ...int64) history.Op {
	return history.Op{Process: p, F: history.ReadBanks, Call: ms(call), Return: ms(ret), Outcome: out, Balances: bs}
}

func transfer(p, call, ret int, out history.Outcome, from, to int, amount int64) history.Op {
	return history.Op{Process: p, F: history.Transfer, Call: ms(call), Return: ms(ret), Outcome: out, From: from, To: to, Amount: amount}
}

// simBank simulates a serializable bank: transfers that would overdraw are
// refused; reads see the balances at an instant inside their interval.
func simBank(rng *rand.Rand, accounts, procs, n int) *history.History {
	const each = 100
	h := bankHistory(accounts, int64(accounts*each))
	type ev struct {
		at  time.Duration
		idx int
	}
	var evs []ev
	for p := 0; p < procs; p++ {
		t := time.Duration(0)
		for i := 0; i < n; i++ {
			dur := time.Duration(1+rng.IntN(2000)) * time.Microsecond
			var op history.Op
			if rng.IntN(3) == 0 {
				op = history.Op{Process: p, F: history.ReadBanks, Call: t, Return: t + dur, Outcome: history.OK}
			} else {
				from := rng.IntN(accounts)
				op = history.Op{Process: p, F: history.Transfer, Call: t, Return: t + dur, Outcome: history.OK,
					From: from, To: (from + 1 + rng.IntN(accounts-1)) % accounts, Amount: 1 + rng.Int64N(30)}
			}
			h.Ops = append(h.Ops, op)
			evs = append(evs, ev{t + time.Duration(rng.Int64N(int64(dur)+1)), len(h.Ops) - 1})
			t += dur
		}
	}
	sort.Slice(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	bal := make([]int64, accounts)
	for i := range bal {
		bal[i] = each
	}
	for _, e := range evs {
		op := &h.Ops[e.idx]
		if op.F == history.ReadBanks {
			op.Balances = append([]int64(nil), bal...)
		} else if bal[op.From] >= op.Amount {
			bal[op.From] -= op.Amount
			bal[op.To] += op.Amount
		} else {
			op.Outcome = history.Fail
			op.Error = "insufficient funds"
		}
	}
	return h
}

func TestBankValid(t *testing.T) {
	for seed := 0; seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 6))
		h := simBank(rng, 2+rng.IntN(6), 1+rng.IntN(5), 50)
		r := Check(h)
		mustStatus(t, r, Valid)
		if r.Bank.Reads == 0 || r.Bank.Transfers == 0 {
			t.Fatalf("seed %d: %+v", seed, r.Bank)
		}
	}
	// Failed and indeterminate reads are not checked.
	r := Check(bankHistory(2, 20,
		transfer(0, 0, 1, history.OK, 0, 1, 5),
		readBanks(1, 2, 3, history.OK, 5, 15),
		readBanks(1, 4, 5, history.Info, 0, 0),
		readBanks(1, 6, 7, history.Fail, 1),
	))
	mustStatus(t, r, Valid)
}

func TestBankAnomalies(t *testing.T) {
	cases := []struct {
		name string
		h    *history.History
		kind string
	}{
		{"wrong total", bankHistory(3, 30,
			transfer(0, 0, 1, history.OK, 0, 1, 5),
			readBanks(1, 2, 3, history.OK, 5, 15, 11),
		), "wrong-total"},
		{"negative balance", bankHistory(2, 20,
			readBanks(1, 2, 3, history.OK, -5, 25),
		), "negative-balance"},
		{"wrong number of accounts", bankHistory(3, 20,
			readBanks(1, 2, 3, history.OK, 5, 15),
		), "wrong-length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.h)
			mustStatus(t, r, Invalid)
			if !hasAnomaly(r, c.kind) {
				t.Fatalf("want %s: %q", c.kind, r.Anomalies)
			}
		})
	}
	// Random valid histories with one read perturbed.
	for seed := 0; seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		h := simBank(rng, 4, 3, 40)
		for i := range h.Ops {
			if h.Ops[i].F == history.ReadBanks {
				h.Ops[i].Balances[rng.IntN(4)] += 1 + rng.Int64N(5)
				break
			}
		}
		r := Check(h)
		mustStatus(t, r, Invalid)
		if r.Bank.WrongTotal != 1 || !hasAnomaly(r, "wrong-total") {
			t.Fatalf("seed %d: %+v %q", seed, r.Bank, r.Anomalies)
		}
	}
	mustStatus(t, Check(bankHistory(2, 20, transfer(0, 0, 1, history.OK, 0, 1, 5))), Unknown)
	mustStatus(t, Check(bankHistory(0, 20, readBanks(1, 2, 3, history.OK, 5, 15))), Unknown)
}
