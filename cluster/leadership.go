package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// leadershipLoop follows raft's leadership notifications: on winning, it
// starts the leader's work (the barrier that makes reads safe, then the
// reconcile loop) under a context that losing leadership cancels.
func (n *Node) leadershipLoop() {
	defer n.wg.Done()
	var stopLeading context.CancelFunc
	defer func() {
		if stopLeading != nil {
			stopLeading()
		}
	}()
	for {
		select {
		case <-n.ctx.Done():
			return
		case isLeader := <-n.notifyCh:
			if stopLeading != nil {
				stopLeading()
				stopLeading = nil
			}
			n.leaderChange.notify()
			if !isLeader {
				n.progress.Store(nil)
				n.log.Info("cluster: lost leadership")
				continue
			}
			n.log.Info("cluster: became leader", "term", n.raft.CurrentTerm())
			ctx, cancel := context.WithCancel(n.ctx)
			stopLeading = cancel
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				if n.establishLeadership(ctx) {
					n.reconcileLoop(ctx)
				}
			}()
		}
	}
}

// establishLeadership commits a barrier in the new term and waits for the
// FSM to apply it: afterwards the commit index covers every entry earlier
// leaders committed (and possibly acknowledged), so linearizable reads may
// be served. It reports whether the node is still the leader of that term.
func (n *Node) establishLeadership(ctx context.Context) bool {
	term := n.raft.CurrentTerm()
	for attempt := 0; ; attempt++ {
		err := n.waitRaft(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			if n.raft.CurrentTerm() != term || n.raft.State() != raft.Leader {
				return false
			}
			n.readyTerm.Store(term)
			n.leaderChange.notify()
			n.log.Info("cluster: leader ready for reads", "term", term)
			return true
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return false
		}
		n.log.Warn("cluster: leader barrier failed", "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// transferLeadership hands leadership to the voter id (or raft's choice if
// id is empty) and waits until a leader is known again, up to ctx.
func (n *Node) transferLeadership(ctx context.Context, id string) error {
	var f raft.Future
	if id == "" {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		if !slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool {
			return s.ID != raft.ServerID(n.cfg.ID) && s.Suffrage == raft.Voter
		}) {
			return fmt.Errorf("%w: no other voter to transfer leadership to", errFailedPrecondition)
		}
		f = n.raft.LeadershipTransfer()
	} else {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		var addr raft.ServerAddress
		for _, s := range cf.Configuration().Servers {
			if s.ID == raft.ServerID(id) {
				if s.Suffrage != raft.Voter {
					return fmt.Errorf("%w: server %s is not a voter", errInvalidRequest, id)
				}
				addr = s.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("%w: server %s is not in the configuration", errInvalidRequest, id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	if err := waitFuture(ctx, f); err != nil {
		return transferError(err, id)
	}
	_, err := n.WaitLeader(ctx)
	return err
}

// transferError classifies the error of raft's leadership transfer to
// target ("" for raft's choice). Two outcomes leave leadership where it was
// and are worth retrying, so they wrap errTransferNotDone (Unavailable):
// raft's transfer timed out (the target did not win an election within
// ElectionTimeout of being told to start one, say on a loaded machine; raft
// v1.7.3 reports this as an unexported "leadership transfer timeout"), or
// another transfer was already in progress. The rest pass through.
func transferError(err error, target string) error {
	who := "the most up-to-date voter"
	if target != "" {
		who = target
	}
	switch {
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: another leadership transfer is in progress; leadership stays here for now, retry", errTransferNotDone)
	case err.Error() == "leadership transfer timeout":
		return fmt.Errorf("%w: timed out: %s did not win an election within raft's election timeout; leadership stays here, retry", errTransferNotDone, who)
	}
	return err
}

// waitFuture waits for f, or until ctx is done (f then completes on its own
// in the background).
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitRaft waits for f like waitFuture, and also gives up with
// raft.ErrRaftShutdown once the node is stopping. A goroutine of the node
// must not wait on a raft future without it: raft never completes a future
// still queued in its apply channel when it shuts down, and such a wait
// hung Shutdown (in n.wg.Wait) when a whole cluster stopped at once while a
// new leader's barrier was queued.
func (n *Node) waitRaft(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return raft.ErrRaftShutdown
	}
}

// awaitReadable waits until this node is the leader and has completed its
// barrier in the current term, and returns that term. It fails with
// raft.ErrNotLeader as soon as the node is not the leader.
func (n *Node) awaitReadable(ctx context.Context) (uint64, error) {
	for {
		ch := n.leaderChange.wait()
		if n.raft.State() != raft.Leader {
			return 0, raft.ErrNotLeader
		}
		term := n.raft.CurrentTerm()
		if n.readyTerm.Load() == term {
			return term, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-n.ctx.Done():
			return 0, raft.ErrRaftShutdown
		}
	}
}
