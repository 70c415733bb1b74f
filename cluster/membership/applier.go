package membership

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Raft is the part of *raft.Raft the Applier uses.
type Raft interface {
	AddNonvoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	DemoteVoter(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
}

var _ Raft = (*raft.Raft)(nil)

// Applier applies Reconcile's actions to raft.
type Applier struct {
	Raft Raft
	// Timeout bounds the enqueueing of each change (raft's timeout
	// argument); zero waits without bound.
	Timeout time.Duration
}

// Apply applies actions in order, each as a compare-and-set on the
// configuration: the first must apply to the configuration at configIndex
// (the index GetConfiguration reported for the configuration Reconcile
// saw), each later one to the configuration the previous one made. So if the
// configuration changed under the decision (an operator's RemoveMember, a
// new leader) raft refuses the change and Apply stops; the next round decides
// again. It returns how many actions were applied and the first error.
//
// UpdateAddress is raft's AddNonvoter with the new address, which changes
// the address of an existing server without touching its suffrage.
func (a *Applier) Apply(configIndex uint64, actions []Action) (int, error) {
	index := configIndex
	for i, act := range actions {
		var f raft.IndexFuture
		switch act.Kind {
		case AddNonvoter, UpdateAddress:
			f = a.Raft.AddNonvoter(act.ID, act.Addr, index, a.Timeout)
		case PromoteVoter:
			f = a.Raft.AddVoter(act.ID, act.Addr, index, a.Timeout)
		case DemoteVoter:
			f = a.Raft.DemoteVoter(act.ID, index, a.Timeout)
		case RemoveServer:
			f = a.Raft.RemoveServer(act.ID, index, a.Timeout)
		default:
			return i, fmt.Errorf("membership: apply %v: unknown action kind", act)
		}
		if err := f.Error(); err != nil {
			return i, fmt.Errorf("membership: apply %v: %w", act, err)
		}
		index = f.Index()
	}
	return len(actions), nil
}
