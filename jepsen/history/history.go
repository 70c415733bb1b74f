// Package history is the record of a jepsen run that the traffic side
// writes and the checkers read: every client operation with its invocation
// and completion times and outcome, and every fault the nemesis injected.
package history

import "time"

// Outcome is what a client learned about an operation.
type Outcome string

const (
	// OK: the operation took effect (for reads: returned this value).
	OK Outcome = "ok"
	// Fail: the operation certainly did not take effect (e.g. a cas whose
	// comparison failed, or an error the server guarantees is before apply).
	Fail Outcome = "fail"
	// Info: indeterminate. A timeout or lost connection: the operation may
	// have taken effect, or may still take effect later. Checkers treat its
	// return time as +infinity.
	Info Outcome = "info"
)

// Function names per workload.
const (
	// register
	Read  = "read"  // Key → Value, Found
	Write = "write" // Key, Value
	CAS   = "cas"   // Key, Expected → Value (new); Fail when the comparison failed
	// set
	Add     = "add"      // Value (unique)
	ReadAll = "read-all" // → Values
	// bank
	Transfer  = "transfer"   // From, To, Amount
	ReadBanks = "read-banks" // → Balances (all accounts, one transaction)
)

// Op is one client operation. Times are offsets from the run's start.
type Op struct {
	Process int           `json:"process"` // client id; one operation at a time per process
	F       string        `json:"f"`
	Call    time.Duration `json:"call"`
	Return  time.Duration `json:"return"` // meaningless when Outcome is Info
	Outcome Outcome       `json:"outcome"`
	Error   string        `json:"error,omitempty"`
	Node    string        `json:"node,omitempty"` // the member the client sent it to, when known

	Key      string  `json:"key,omitempty"`
	Value    int64   `json:"value,omitempty"`
	Found    bool    `json:"found,omitempty"`
	Expected int64   `json:"expected,omitempty"`
	Values   []int64 `json:"values,omitempty"`

	From     int     `json:"from,omitempty"`
	To       int     `json:"to,omitempty"`
	Amount   int64   `json:"amount,omitempty"`
	Balances []int64 `json:"balances,omitempty"`
}

// Fault is one nemesis action, from injection to heal.
type Fault struct {
	Nemesis string        `json:"nemesis"` // kill, pause, partition, membership, restart
	Detail  string        `json:"detail"`  // e.g. "isolate leader n2", "kill n3"
	Start   time.Duration `json:"start"`
	End     time.Duration `json:"end"` // 0 while not healed
}

// History is a whole run.
type History struct {
	Workload string        `json:"workload"`
	Seed     int64         `json:"seed"`
	Nodes    int           `json:"nodes"`
	Duration time.Duration `json:"duration"`
	Ops      []Op          `json:"ops"`
	Faults   []Fault       `json:"faults"`
	// Bank: the number of accounts and the total every read must see.
	Accounts int   `json:"accounts,omitempty"`
	Total    int64 `json:"total,omitempty"`
}
