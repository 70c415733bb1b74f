package cluster

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The leader's own view of each follower's replication, taken from the
// responses to the AppendEntries and InstallSnapshot calls its raft makes
// (hashicorp/raft keeps its replication state private). Reconcile judges a
// server's health and catch-up from it (members.go, collectProgress), never
// from what the server says of itself: a member that answers Status with
// "healthy, caught up" but whose raft address does not take the leader's
// log is not ready, and is never promoted (README.md, "Security").

// replProgress is what the leader saw of one server.
type replProgress struct {
	// term is the leader's term of the observations below; an
	// observation of another term resets them.
	term uint64
	// match is the highest log index the server acknowledged holding.
	match uint64
	// contact is when the server last answered an AppendEntries of term
	// successfully (heartbeats included).
	contact time.Time
}

// replTracker records replProgress by server ID.
type replTracker struct {
	now func() time.Time
	mu  sync.Mutex
	by  map[raft.ServerID]replProgress // REQUIRES: mu
}

func newReplTracker(now func() time.Time) *replTracker {
	return &replTracker{now: now, by: make(map[raft.ServerID]replProgress)}
}

// observe records a successful answer of id in term acknowledging the log
// up to match (0: a heartbeat, which acknowledges no index).
func (t *replTracker) observe(id raft.ServerID, term, match uint64) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.by[id]
	if p.term != term {
		if term < p.term {
			return // a late answer of an older term
		}
		p = replProgress{term: term}
	}
	p.match = max(p.match, match)
	p.contact = now
	t.by[id] = p
}

// get returns what was seen of id in term (zero if nothing).
func (t *replTracker) get(id raft.ServerID, term uint64) replProgress {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.by[id]; p.term == term {
		return p
	}
	return replProgress{}
}

// observedTransport wraps a raft transport and feeds a replTracker with
// the answers to the calls this node makes as a leader.
type observedTransport struct {
	raft.Transport
	t *replTracker
}

var (
	_ raft.WithClose   = (*observedTransport)(nil)
	_ raft.WithPreVote = (*observedTransport)(nil)
)

func newObservedTransport(tr raft.Transport, t *replTracker) *observedTransport {
	return &observedTransport{Transport: tr, t: t}
}

// noteAppend records resp to args, sent to id.
func (o *observedTransport) noteAppend(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if resp == nil || !resp.Success || resp.Term != args.Term {
		return
	}
	var match uint64
	if len(args.Entries) > 0 {
		match = args.Entries[len(args.Entries)-1].Index
	} else if args.PrevLogEntry > 0 {
		match = args.PrevLogEntry
	}
	o.t.observe(id, args.Term, match)
}

// AppendEntries implements raft.Transport.
func (o *observedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := o.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		o.noteAppend(id, args, resp)
	}
	return err
}

// InstallSnapshot implements raft.Transport.
func (o *observedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := o.Transport.InstallSnapshot(id, target, args, resp, data)
	if err == nil && resp.Success && resp.Term == args.Term {
		o.t.observe(id, args.Term, args.LastLogIndex)
	}
	return err
}

// AppendEntriesPipeline implements raft.Transport: the pipeline's answers
// are observed as raft consumes them.
func (o *observedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := o.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	op := &observedPipeline{AppendPipeline: p, o: o, id: id, out: make(chan raft.AppendFuture, cap(p.Consumer())), done: make(chan struct{})}
	go op.relay()
	return op, nil
}

// RequestPreVote implements raft.WithPreVote if the wrapped transport
// does; raft checks for the interface on the transport it is given.
func (o *observedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := o.Transport.(raft.WithPreVote)
	if !ok {
		return raft.ErrUnsupportedProtocol
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// Close implements raft.WithClose.
func (o *observedTransport) Close() error {
	if c, ok := o.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// observedPipeline relays a pipeline's answered futures to raft, noting
// each answer on the way.
type observedPipeline struct {
	raft.AppendPipeline
	o    *observedTransport
	id   raft.ServerID
	out  chan raft.AppendFuture
	done chan struct{}
	once sync.Once
}

func (p *observedPipeline) relay() {
	in := p.AppendPipeline.Consumer()
	for {
		select {
		case f := <-in:
			// The future is answered (the pipeline hands it over once its
			// response is decoded): Error does not block.
			if f.Error() == nil {
				p.o.noteAppend(p.id, f.Request(), f.Response())
			}
			select {
			case p.out <- f:
			case <-p.done:
				return
			}
		case <-p.done:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *observedPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close implements raft.AppendPipeline.
func (p *observedPipeline) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.AppendPipeline.Close()
}
