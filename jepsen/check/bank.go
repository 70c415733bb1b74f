package check

import (
	"fmt"

	"github.com/cairnkv/cairn/jepsen/history"
)

// BankResult is the bank workload's part of a Result.
type BankResult struct {
	Accounts  int   `json:"accounts"`
	Total     int64 `json:"total"`
	Transfers int   `json:"transfers"` // acknowledged
	// Reads: successful read-banks operations checked.
	Reads int `json:"reads"`
	// WrongTotal: reads whose balances do not sum to Total; NegativeReads:
	// reads with a negative balance; WrongLength: reads without exactly
	// Accounts balances.
	WrongTotal    int `json:"wrong_total"`
	NegativeReads int `json:"negative_reads"`
	WrongLength   int `json:"wrong_length"`
}

func checkBank(h *history.History, r *Result) {
	b := &BankResult{Accounts: h.Accounts, Total: h.Total}
	r.Bank = b
	if h.Accounts <= 0 {
		r.Status = Unknown
		r.Notes = append(r.Notes, "bank history without an account count (History.Accounts)")
		return
	}
	var lines []string
	line := func(n int, kind, msg string) {
		if n <= maxLines {
			lines = append(lines, msg)
		} else if n == maxLines+1 {
			lines = append(lines, fmt.Sprintf("%s: … more (see the bank section's counts)", kind))
		}
	}
	for _, op := range h.Ops {
		if op.Outcome != history.OK {
			continue
		}
		switch op.F {
		case history.Transfer:
			b.Transfers++
			if op.Amount < 0 || op.From == op.To || op.From < 0 || op.To < 0 || op.From >= h.Accounts || op.To >= h.Accounts {
				r.Notes = append(r.Notes, "odd transfer (the traffic should not issue it): "+describe(op))
			}
			continue
		case history.ReadBanks:
		default:
			continue
		}
		b.Reads++
		if len(op.Balances) != h.Accounts {
			b.WrongLength++
			line(b.WrongLength, "wrong-length", fmt.Sprintf("wrong-length: %s returned %d balances, want %d", describe(op), len(op.Balances), h.Accounts))
		}
		var sum int64
		neg := -1
		for i, v := range op.Balances {
			sum += v
			if v < 0 && neg < 0 {
				neg = i
			}
		}
		if sum != h.Total {
			b.WrongTotal++
			line(b.WrongTotal, "wrong-total", fmt.Sprintf("wrong-total: %s sums to %d, want %d", describe(op), sum, h.Total))
		}
		if neg >= 0 {
			b.NegativeReads++
			line(b.NegativeReads, "negative-balance", fmt.Sprintf("negative-balance: %s has account %d at %d", describe(op), neg, op.Balances[neg]))
		}
	}
	r.Anomalies = append(r.Anomalies, lines...)
	switch {
	case len(lines) > 0:
		r.Status = Invalid
	case b.Reads == 0:
		r.Status = Unknown
		r.Notes = append(r.Notes, "no successful read of the balances: nothing to check")
	default:
		r.Status = Valid
	}
}
