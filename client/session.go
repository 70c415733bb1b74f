package client

import (
	"strconv"
	"sync"
	"time"
)

// A session is one client_id under which writes are numbered 1 by 1, with
// at most one write in flight at a time.
//
// Why a pool of them rather than one client_id per Client: the cluster
// remembers, per client_id, only the LAST seq it applied, and treats any
// write with a seq at or below it as a duplicate (package fsm, "At-most-once
// writes"). Two writes in flight under one client_id could reach the leader
// out of order (seq 8 before seq 7), and seq 7 would then be dropped as a
// duplicate without ever being applied. So every write takes a session no
// other write is using, and the pool grows to the Client's largest number
// of concurrent writes. A session's seq increases across its writes; all
// attempts of one write share one seq.
//
// A write that gave up (its context ended) while an attempt may still be
// in flight leaves its session usable: if the stale attempt is applied
// after the session's next write, the cluster drops it as a duplicate,
// which is one of the outcomes its caller was told were possible.
type session struct {
	id  string
	seq uint64
}

// sessionPool hands out sessions. Session IDs are "<ClientID>/<n>".
type sessionPool struct {
	prefix string
	mu     struct {
		sync.Mutex
		free []*session
		n    int
	}
}

func (p *sessionPool) init(clientID string) { p.prefix = clientID }

// get takes a free session, or makes one, and numbers its next write.
func (p *sessionPool) get() (s *session, seq uint64) {
	p.mu.Lock()
	if k := len(p.mu.free); k > 0 {
		s = p.mu.free[k-1]
		p.mu.free = p.mu.free[:k-1]
	} else {
		p.mu.n++
		// Sequence numbers start at the wall clock in nanoseconds rather
		// than at 1: a process that reuses a ClientID after a restart
		// then still numbers its writes above those of its previous life,
		// which the cluster may remember.
		s = &session{id: p.prefix + "/" + strconv.Itoa(p.mu.n), seq: uint64(time.Now().UnixNano())}
	}
	p.mu.Unlock()
	s.seq++
	return s, s.seq
}

// put returns a session to the pool once its write has returned.
func (p *sessionPool) put(s *session) {
	p.mu.Lock()
	p.mu.free = append(p.mu.free, s)
	p.mu.Unlock()
}

// size returns how many sessions exist (for tests).
func (p *sessionPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.n
}
