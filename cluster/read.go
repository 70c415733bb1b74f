package cluster

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// readIndex makes a linearizable read safe on the leader (raft's read-index
// protocol, §6.4 of the raft thesis; hashicorp/raft has no API for it):
//
//  1. wait until this node has committed a barrier in its current term
//     (awaitReadable), so its commit index covers every entry an earlier
//     leader committed;
//  2. note the commit index;
//  3. confirm leadership with a quorum by committing a barrier entry that
//     was appended after the read began (confirmLeadership: one barrier per
//     batch of concurrent reads);
//  4. wait until the FSM has applied the index: raft resolves a barrier
//     only once the FSM has applied every entry before it, so step 3 has
//     done this already.
//
// A read served from the local engine afterwards reflects every write
// acknowledged before readIndex began. It returns the index waited for.
//
// Step 3 does not use raft's VerifyLeader: it counts any heartbeat response
// that arrives after the call, including one to a heartbeat sent before the
// read began, so a leader paused for longer than an election (SIGSTOP, a VM
// stall) could confirm itself with a stale response waiting in its socket
// and serve a stale read. A barrier can only commit if a quorum accepts an
// entry created after the read arrived, in this leader's term.
func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	term, err := n.awaitReadable(ctx)
	if err != nil {
		return 0, err
	}
	index := n.raft.CommitIndex()
	if err := n.confirmLeadership(ctx); err != nil {
		return 0, err
	}
	if n.raft.CurrentTerm() != term {
		return 0, raft.ErrNotLeader
	}
	return index, nil
}

// readBarrier batches the leadership confirmations of concurrent
// linearizable reads: reads that arrive while a barrier is in flight wait
// for the next one, which starts (and so is appended) after they arrived.
type readBarrier struct {
	mu      sync.Mutex
	next    *readRound // reads waiting for a barrier not yet started
	running bool       // a runner goroutine is issuing barriers
}

type readRound struct {
	done chan struct{}
	err  error // set before done is closed
}

// confirmLeadership returns nil once a barrier appended after the call has
// committed and been applied in this node's term.
func (n *Node) confirmLeadership(ctx context.Context) error {
	rb := &n.reads
	rb.mu.Lock()
	r := rb.next
	if r == nil {
		r = &readRound{done: make(chan struct{})}
		rb.next = r
	}
	if !rb.running {
		rb.running = true
		go n.runReadBarriers()
	}
	rb.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runReadBarriers issues one barrier per round of waiting reads until none
// is waiting.
func (n *Node) runReadBarriers() {
	rb := &n.reads
	for {
		rb.mu.Lock()
		r := rb.next
		rb.next = nil
		if r == nil {
			rb.running = false
			rb.mu.Unlock()
			return
		}
		rb.mu.Unlock()
		r.err = n.waitRaft(context.Background(), n.raft.Barrier(n.cfg.ApplyTimeout))
		close(r.done)
	}
}
