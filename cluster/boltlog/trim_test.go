package boltlog

import (
	"flag"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

var oldStore = flag.Bool("raftboltdb", false,
	"TestAppendNeverWaitsForTrimCommit: run it on raft-boltdb, whose DeleteRange commits transactions of its own (it must fail)")

// gatedRaftBoltDB is raft-boltdb with its writes under one lock (bbolt's
// writer lock, made visible) and every DeleteRange reported on started
// and held until gate opens, before it runs.
type gatedRaftBoltDB struct {
	*raftboltdb.BoltStore
	lock    sync.Mutex
	started chan struct{}
	gate    chan struct{}
}

func (s *gatedRaftBoltDB) StoreLogs(logs []*raft.Log) error {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.BoltStore.StoreLogs(logs)
}

func (s *gatedRaftBoltDB) DeleteRange(lo, hi uint64) error {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.started <- struct{}{}
	<-s.gate
	return s.BoltStore.DeleteRange(lo, hi)
}

// TestAppendNeverWaitsForTrimCommit asserts structurally, without
// timing, that log compaction adds no transaction that an append could
// wait for: a trim of 900 entries asked for by DeleteRange commits
// nothing of its own (every transaction that would only trim is reported
// and held), and each of the appends that follow deletes its bounded
// share of the range in its own transaction (the log's first index moves
// by the budget with each), until the log is [901, last]. With
// -args -raftboltdb the store is raft-boltdb (what cairn used before;
// batched or not, each delete is a commit of its own that appends wait
// for) and the test fails.
func TestAppendNeverWaitsForTrimCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	trimCommit := make(chan struct{}) // a trim-only transaction is about to commit
	gate := make(chan struct{})       // closed at the end: lets it go on
	defer close(gate)
	var ls raft.LogStore
	const budget = 100 + 2 // trimEntries + 2 × a one-entry append
	if *oldStore {
		rb, err := raftboltdb.New(raftboltdb.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Close()
		ls = &gatedRaftBoltDB{BoltStore: rb, started: trimCommit, gate: gate}
	} else {
		s := openTest(t, path)
		defer s.Close()
		s.trimEntries = 100
		s.trimIdle = time.Hour // the idle trimmer is TestIdleTrimmerDrains's
		s.testTrimCommit = func() {
			trimCommit <- struct{}{}
			<-gate
		}
		ls = s
	}
	for i := uint64(1); i <= 1000; i += 100 {
		if err := ls.StoreLogs(compatLogs(i, i+99)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- ls.DeleteRange(1, 900) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-trimCommit:
		t.Fatal("DeleteRange of a log prefix runs a transaction of its own: an append issued now waits for its commit")
	}
	for k := uint64(1); k <= 9; k++ {
		go func() { done <- ls.StoreLogs(compatLogs(1000+k, 1000+k)) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-trimCommit:
			t.Fatalf("append %d waits for a transaction that only trims", k)
		}
		first, err := ls.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if want := min(1+k*budget, 901); first != want {
			t.Fatalf("after append %d the log starts at %d, want %d: each append deletes %d entries of the trim",
				k, first, want, budget)
		}
	}
	last, err := ls.LastIndex()
	if err != nil || last != 1009 {
		t.Fatalf("last index %d, %v; want 1009", last, err)
	}
}

// TestIdleTrimmerDrains: with no appends, the background trimmer deletes
// a pending trim in transactions of the constant budget, from the low
// end, and stops at the range's end.
func TestIdleTrimmerDrains(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "raft.db"))
	defer s.Close()
	s.trimEntries = 64
	s.trimIdle = time.Millisecond
	var mu sync.Mutex
	var trims []int
	s.SetObserver(func(w Write) {
		if w.Kind == Trim {
			mu.Lock()
			trims = append(trims, w.Trimmed)
			mu.Unlock()
		}
	})
	if err := s.StoreLogs(compatLogs(1, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 900); err != nil {
		t.Fatal(err)
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, t := range trims {
			n += t
		}
		return n
	}
	waitFor(t, "the idle trimmer to delete [1, 900]", func() bool { return total() == 900 })
	mu.Lock()
	for _, n := range trims {
		if n > 64 {
			t.Errorf("a background trim deleted %d entries, budget 64", n)
		}
	}
	if len(trims) != 15 {
		t.Errorf("%d background trims, want 15 (900 entries, 64 a transaction)", len(trims))
	}
	mu.Unlock()
	first, last, err := s.bounds()
	if err != nil || first != 901 || last != 1000 {
		t.Fatalf("log [%d, %d] (%v), want [901, 1000]", first, last, err)
	}
}

// TestWriteInsidePendingTrim: an entry written at an index inside the
// pending trim (raft does not, but the store must not lose it) stays;
// the trim stops below it.
func TestWriteInsidePendingTrim(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "raft.db"))
	defer s.Close()
	s.trimEntries = 4
	s.trimIdle = time.Millisecond
	if err := s.StoreLogs(compatLogs(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	rewrite := entry(30, 99, 10)
	if err := s.StoreLogs([]*raft.Log{rewrite}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pending trim to drain", func() bool {
		s.write.Lock()
		defer s.write.Unlock()
		return s.write.pendingHi == 0
	})
	first, last, err := s.bounds()
	if err != nil || first != 30 || last != 100 {
		t.Fatalf("log [%d, %d] (%v), want [30, 100]: the trim stops below the entry written inside it", first, last, err)
	}
	var got raft.Log
	if err := s.GetLog(30, &got); err != nil || !sameLog(&got, rewrite) {
		t.Fatalf("entry 30: %+v, %v; want the rewrite", got, err)
	}
}
