package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/raft"
)

// What an operator's tools read from a node: the engine's metrics, the
// leader changes this node saw, the members, and every member's Status.
// The monitor package turns them into Prometheus metrics and the status
// page; nothing here keeps counters of its own that the engine or raft
// already keep.

// maxLeaderChanges is how many leader changes LeaderChanges remembers.
const maxLeaderChanges = 32

// LeaderChange is one change of leader as this node saw it.
type LeaderChange struct {
	Time time.Time
	// LeaderID is the new leader; empty when the node lost track of the
	// leader (an election is under way, or it is cut off).
	LeaderID string
	// Term is this node's raft term when it saw the change.
	Term uint64
}

// leaderWatch follows raft's leader observations.
type leaderWatch struct {
	// changes counts observations of a (new) leader since Start.
	changes atomic.Uint64
	mu      struct {
		sync.Mutex
		recent []LeaderChange // oldest first, at most maxLeaderChanges
	}
}

// watchLeaders records raft's leader observations until the node stops.
// Started by Start once raft exists.
func (n *Node) watchLeaders() {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	// A leader that made contact before the observer was registered
	// (a restarted follower hears from it within milliseconds).
	if _, id := n.raft.LeaderWithID(); id != "" {
		n.leaders.record(LeaderChange{Time: time.Now(), LeaderID: string(id), Term: n.raft.CurrentTerm()})
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-ch:
			lo := o.Data.(raft.LeaderObservation)
			n.leaders.record(LeaderChange{Time: time.Now(), LeaderID: string(lo.LeaderID), Term: n.raft.CurrentTerm()})
		}
	}
}

// record notes c, unless it repeats the last change (the same leader in
// the same term, seen both by watchLeaders' first look and by raft).
func (w *leaderWatch) record(c LeaderChange) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k := len(w.mu.recent); k > 0 && w.mu.recent[k-1].LeaderID == c.LeaderID && w.mu.recent[k-1].Term == c.Term {
		return
	}
	if c.LeaderID != "" {
		w.changes.Add(1)
	}
	if len(w.mu.recent) == maxLeaderChanges {
		w.mu.recent = slices.Delete(w.mu.recent, 0, 1)
	}
	w.mu.recent = append(w.mu.recent, c)
}

// LeaderChanges returns how many times this node saw a leader elected
// since it started (each new leader or new term of a leader counts), and
// the most recent changes, newest first (losing the leader included).
func (n *Node) LeaderChanges() (total uint64, recent []LeaderChange) {
	w := &n.leaders
	w.mu.Lock()
	recent = slices.Clone(w.mu.recent)
	w.mu.Unlock()
	slices.Reverse(recent)
	return w.changes.Load(), recent
}

// SnapshotSize returns the size in bytes of the newest snapshot raft's
// snapshot store retains (0 if it has none): for cairn's store, the length
// of its stream, the manifest's head and the files it lists. Until the
// snapshot is first opened (sent or restored), cairn's store has not
// summed its new files and estimates the head with zero checksums, a few
// bytes off.
func (n *Node) SnapshotSize() (int64, error) {
	if n.fsm == nil {
		return 0, ErrNotStarted
	}
	snaps, err := n.fsm.snaps.List()
	if err != nil {
		return 0, fmt.Errorf("cluster: listing snapshots: %w", err)
	}
	if len(snaps) == 0 {
		return 0, nil
	}
	return snaps[0].Size, nil
}

// EngineMetrics returns the storage engine's metrics (read when called).
func (n *Node) EngineMetrics() (*lsm.Metrics, error) {
	if n.fsm == nil {
		return nil, ErrNotStarted
	}
	return n.fsm.Metrics()
}

// Members returns the cluster's members as the Cluster.Members RPC does:
// the raft configuration joined with this node's gossip view.
func (n *Node) Members(ctx context.Context) (*cairnpb.MembersResponse, error) {
	if n.raft == nil {
		return nil, ErrNotStarted
	}
	return (&clusterService{n: n}).Members(ctx, nil)
}

// MemberStatus is one member's Status as this node could get it.
type MemberStatus struct {
	Member *cairnpb.Member
	// Status is the member's answer to Cluster.Status; nil if Err.
	Status *cairnpb.StatusResponse
	Err    error
	// SampledAt is when this node had the Status: for another member, when
	// its answer arrived (the member read its indexes between the question
	// and then); for this node, when it read its own, after every other
	// answer arrived. Zero if Err. Each member reports its own indexes at
	// its own moment, so a follower sampled after the leader may show a
	// commit index above the leader's.
	SampledAt time.Time
	// Replication is this node's own record of the member's replication,
	// set when this node leads and its raft has had an answer from the
	// member in the current term (nil otherwise, and on this node's own
	// entry). Unlike Status it is the leader's to vouch for, and it is read
	// for every member at one moment.
	Replication *Replication
}

// Replication is what a leader's raft saw of one follower in its term, from
// the follower's answers to its AppendEntries and InstallSnapshot calls
// (replprogress.go).
type Replication struct {
	Term uint64
	// MatchIndex is the highest log index the follower acknowledged
	// holding in Term (0: it has answered only heartbeats so far).
	MatchIndex uint64
	// Since is how long before this view was read the follower last
	// answered an AppendEntries of Term (heartbeats included).
	Since time.Duration
}

// MemberStatuses asks every member for its Status (the others over gRPC,
// all at once, each bounded by ctx), in the order of Members. This node
// reads its own Status last, once every other answer arrived, and, if it
// leads, its record of every follower's replication just before: a
// leader's commit index is then at or above the commit index each
// follower reported in this term (a follower's comes from the leader's),
// unless the leader has not yet committed an entry of its term.
func (n *Node) MemberStatuses(ctx context.Context) ([]MemberStatus, error) {
	mr, err := n.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MemberStatus, len(mr.GetMembers()))
	self := -1
	var wg sync.WaitGroup
	for i, m := range mr.GetMembers() {
		out[i].Member = m
		if m.GetId() == n.cfg.ID {
			self = i
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Status, out[i].Err = n.peerStatus(ctx, m.GetId(), m.GetGrpcAddr())
			if out[i].Err == nil {
				out[i].SampledAt = time.Now()
			}
		}()
	}
	wg.Wait()
	if n.raft.State() == raft.Leader {
		term, now := n.raft.CurrentTerm(), n.cfg.Now()
		for i := range out {
			if i == self {
				continue
			}
			p := n.repl.get(raft.ServerID(out[i].Member.GetId()), term)
			if p.contact.IsZero() {
				continue
			}
			out[i].Replication = &Replication{Term: term, MatchIndex: p.match, Since: max(now.Sub(p.contact), 0)}
		}
	}
	if self >= 0 {
		out[self].Status = n.Status()
		out[self].SampledAt = time.Now()
	}
	return out, nil
}

// kindCounter counts events by kind.
type kindCounter struct {
	mu     sync.Mutex
	counts map[string]uint64 // REQUIRES: mu
}

// snapshot returns a copy of the counts.
func (k *kindCounter) snapshot() map[string]uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.counts)
}

func (k *kindCounter) add(kind string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.counts == nil {
		k.counts = make(map[string]uint64)
	}
	k.counts[kind]++
}

// ReconcileActions returns how many configuration changes of each kind
// (membership.ActionKind's names: add-nonvoter, promote-voter, ...) this
// node's reconcile loop decided on while it led, since it started.
func (n *Node) ReconcileActions() map[string]uint64 {
	return n.reconcileActions.snapshot()
}

// RequestCounts count how this node handled requests since it started.
type RequestCounts struct {
	// Forwarded counts the requests this node forwarded to the leader,
	// by gRPC method name (Put, Get, ...).
	Forwarded map[string]uint64
	// Duplicates counts the writes this node's state machine applied as
	// duplicates of writes already applied (fsm.FSM.Duplicates).
	Duplicates uint64
}

// RequestCounts returns the node's request counts.
func (n *Node) RequestCounts() RequestCounts {
	c := RequestCounts{Forwarded: n.forwarded.snapshot()}
	if n.fsm != nil {
		c.Duplicates = n.fsm.Duplicates()
	}
	return c
}
