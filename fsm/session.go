package fsm

import (
	"bytes"
	"container/list"
	"fmt"
	"slices"
	"time"

	"github.com/cairnkv/cairn/lsm"
)

// session is one client's at-most-once state. Its persisted form is a
// sessionRecord under sessionKey(id); the table keeps every session's
// metadata in memory (a few dozen bytes each) and a result only while the
// batch that produced it is being built.
type session struct {
	id         string
	seq        uint64
	lastIndex  uint64
	lastActive int64
	retained   bool
	// pending is the encoded result of seq while the batch recording it is
	// not yet written (a duplicate in the same batch reads it here);
	// nil otherwise, when the result is read from the engine.
	pending []byte
	elem    *list.Element
}

// sessionTable is the set of client sessions, in order of last activity.
//
// Determinism: its contents are a function of the commands applied (never
// of wall-clock time or of how raft batched them): a session's last
// activity is the raft index of its last write (unique per session, so the
// order is total) and the FSM clock, the largest AppendedAt applied so far.
// Expiry and eviction are decided per command, before it is applied.
//
// REQUIRES: the FSM's applyMu held for every method.
type sessionTable struct {
	byID map[string]*session
	// lru orders the sessions by lastIndex, least recently active first.
	lru *list.List
	// touched are the sessions holding a pending result.
	touched []*session
}

func newSessionTable() *sessionTable {
	return &sessionTable{byID: make(map[string]*session), lru: list.New()}
}

// load reads every session from the engine.
func (t *sessionTable) load(db *lsm.DB) error {
	it, err := db.NewIter(&lsm.IterOptions{LowerBound: sessionPrefix, UpperBound: sessionPrefixEnd})
	if err != nil {
		return err
	}
	var all []*session
	for ok := it.First(); ok; ok = it.Next() {
		id := string(it.Key()[len(sessionPrefix):])
		r, err := decodeSessionRecord(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("session %q: %w", id, err)
		}
		all = append(all, &session{id: id, seq: r.seq, lastIndex: r.lastIndex, lastActive: r.lastActive, retained: r.retained})
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b *session) int {
		switch {
		case a.lastIndex < b.lastIndex:
			return -1
		case a.lastIndex > b.lastIndex:
			return 1
		}
		return 0
	})
	*t = *newSessionTable()
	for i, s := range all {
		if i > 0 && all[i-1].lastIndex == s.lastIndex {
			return corruptionf("sessions %q and %q share last index %d", all[i-1].id, s.id, s.lastIndex)
		}
		s.elem = t.lru.PushBack(s)
		t.byID[s.id] = s
	}
	return nil
}

func (t *sessionTable) get(id string) *session { return t.byID[id] }

func (t *sessionTable) len() int { return len(t.byID) }

// expire removes, least recently active first, the sessions idle for more
// than ttl at clock now, stopping at the first that is not. (Clocks of
// successive leaders may disagree, so lastActive is not monotonic in
// lastIndex: a session can outlive its TTL behind a younger one, never
// expire early.)
func (t *sessionTable) expire(b *lsm.Batch, now int64, ttl time.Duration) {
	for e := t.lru.Front(); e != nil; e = t.lru.Front() {
		s := e.Value.(*session)
		if now-s.lastActive <= int64(ttl) {
			return
		}
		t.remove(b, s)
	}
}

func (t *sessionTable) remove(b *lsm.Batch, s *session) {
	t.lru.Remove(s.elem)
	delete(t.byID, s.id)
	b.Delete(sessionKey(s.id))
}

// record notes that the session of id applied seq at index with the given
// encoded result (nil: not retained), creating the session (and evicting
// the least recently active one if the table is full) if needed.
func (t *sessionTable) record(b *lsm.Batch, maxSessions int, id string, seq, index uint64, now int64, result []byte) {
	s := t.byID[id]
	if s == nil {
		for t.lru.Len() >= maxSessions {
			t.remove(b, t.lru.Front().Value.(*session))
		}
		s = &session{id: id}
		s.elem = t.lru.PushBack(s)
		t.byID[id] = s
	} else {
		t.lru.MoveToBack(s.elem)
	}
	s.seq, s.lastIndex, s.lastActive = seq, index, now
	s.retained = result != nil
	s.pending = result
	t.touched = append(t.touched, s)
	rec := sessionRecord{seq: seq, lastIndex: index, lastActive: now, retained: s.retained, result: result}
	b.Set(sessionKey(id), rec.encode())
}

// batchWritten drops the pending results once the batch is in the engine.
func (t *sessionTable) batchWritten() {
	for _, s := range t.touched {
		s.pending = nil
	}
	clear(t.touched)
	t.touched = t.touched[:0]
}

// result returns the encoded result s retains, from memory or the engine.
func (t *sessionTable) result(db *lsm.DB, s *session) ([]byte, error) {
	if !s.retained {
		return nil, nil
	}
	if s.pending != nil {
		return s.pending, nil
	}
	v, err := db.Get(sessionKey(s.id))
	if err != nil {
		return nil, fmt.Errorf("reading session %q: %w", s.id, err)
	}
	r, err := decodeSessionRecord(v)
	if err != nil {
		return nil, err
	}
	if r.seq != s.seq || !r.retained {
		return nil, corruptionf("session %q: engine holds seq %d, memory %d", s.id, r.seq, s.seq)
	}
	return bytes.Clone(r.result), nil
}
