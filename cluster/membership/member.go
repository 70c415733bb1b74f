package membership

import (
	"strconv"
	"time"
)

// State is a member's gossip state as seen by the local node.
type State uint8

const (
	// StateAlive: the member answers probes.
	StateAlive State = iota
	// StateSuspect: the member missed probes and may be failing. Discovery
	// cannot observe this state with memberlist v0.7.0 (memberlist raises no
	// event for it and does not export it); Reconcile accepts it from other
	// sources and treats it as "not failed, not ready".
	StateSuspect
	// StateDead: the member failed (memberlist declared it dead).
	StateDead
	// StateLeft: the member left gracefully (Discovery.Leave).
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	default:
		return "state(" + strconv.Itoa(int(s)) + ")"
	}
}

// Member is one node as the local node sees it.
type Member struct {
	Meta
	// Addr is the member's gossip host:port.
	Addr string
	// State is the member's gossip state.
	State State
	// StateChangedAt is when the local node saw State begin.
	StateChangedAt time.Time
	// Leaving is set once the member announced a graceful leave; its State
	// becomes StateLeft when it goes. Reconcile does not add a leaving member.
	Leaving bool
}
