package boltlog

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if s := childSpec(); s != "" {
		crashChild(s)
		return
	}
	goleak.VerifyTestMain(m)
}

var seedFlag = flag.Uint64("seed", 0, "TestModel: replay this seed (0: a new one)")

// testOptions are the options cairn opens the store with (cluster's
// openLogStore), with a short lock timeout.
func testOptions() Options {
	return Options{Bolt: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}}
}

func openTest(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// entry returns the entry a test writes at index i in generation gen (a
// rewrite after a suffix truncation is a new generation).
func entry(i, gen uint64, size int) *raft.Log {
	data := make([]byte, size)
	copy(data, fmt.Sprintf("%d/%d/", i, gen))
	return &raft.Log{Index: i, Term: gen, Type: raft.LogCommand, Data: data,
		Extensions: []byte{byte(i)}, AppendedAt: time.Unix(int64(i), int64(gen)).UTC()}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data) &&
		bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// modelCheck compares the store with the model: the store holds exactly
// the model's entries plus, below the model's first entry, "ghosts":
// entries whose trim is pending (or was forgotten by a reopen). Trims
// delete from the low end, so every entry last written (and not removed
// by a suffix truncation) between the store's first index and the
// model's first entry is still there, as written. If settled, no ghost
// may remain. The store is read in one transaction: the background
// trimmer runs meanwhile.
func modelCheck(s *Store, m *raft.InmemStore, written map[uint64]*raft.Log, settled bool) error {
	mFirst, mLast := modelBounds(m)
	got := map[uint64]*raft.Log{}
	var first, last uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(logsBucket).ForEach(func(k, v []byte) error {
			l := new(raft.Log)
			if err := decodeLog(v, l); err != nil {
				return err
			}
			if first == 0 {
				first = l.Index
			}
			last = l.Index
			got[l.Index] = l
			return nil
		})
	})
	if err != nil {
		return err
	}
	if mLast == 0 {
		if last != 0 {
			return fmt.Errorf("store log [%d, %d], model empty", first, last)
		}
		return nil
	}
	switch {
	case last != mLast:
		return fmt.Errorf("store log [%d, %d], model [%d, %d]", first, last, mFirst, mLast)
	case first > mFirst:
		return fmt.Errorf("store log starts at %d, model at %d: an entry the model holds is gone", first, mFirst)
	case settled && first != mFirst:
		return fmt.Errorf("store log [%d, %d] after the pending trim drained, model [%d, %d]", first, last, mFirst, mLast)
	}
	var want raft.Log
	for i := first; i <= mLast; i++ {
		w := &want
		merr := m.GetLog(i, w)
		if i < mFirst { // a ghost, if it was written
			merr, w = nil, written[i]
			if w == nil {
				merr = raft.ErrLogNotFound
			}
		}
		g := got[i]
		switch {
		case merr != nil:
			if g != nil {
				return fmt.Errorf("entry %d: %+v; the model has none (model first %d)", i, *g, mFirst)
			}
		case g == nil:
			return fmt.Errorf("entry %d missing (model first %d)", i, mFirst)
		case !sameLog(g, w):
			return fmt.Errorf("entry %d: %+v, model %+v", i, *g, *w)
		}
	}
	return nil
}

// modelBounds returns the model's first and last entries (InmemStore's
// FirstIndex and LastIndex may point into a gap that a DeleteRange left).
func modelBounds(m *raft.InmemStore) (uint64, uint64) {
	first, _ := m.FirstIndex()
	last, _ := m.LastIndex()
	var l raft.Log
	for last != 0 && first <= last && m.GetLog(first, &l) != nil {
		first++
	}
	for last != 0 && first <= last && m.GetLog(last, &l) != nil {
		last--
	}
	if first > last {
		return 0, 0
	}
	return first, last
}

// TestModel runs random interleavings of the calls raft makes (appends,
// prefix trims from FirstIndex as log compaction does them, suffix
// truncations, whole-log deletions, appends after a gap as after a
// snapshot install, reads, reopens) against raft.InmemStore, with the
// background trimmer racing the calls, and checks the store after every
// step (modelCheck). Replay a failure with -args -seed N.
func TestModel(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	path := filepath.Join(t.TempDir(), "raft.db")
	tune := func(s *Store) {
		s.db.NoSync = true // durability is TestCrash's
		s.trimEntries = 1 + rng.IntN(20)
		s.trimBytesN = int64(1 + rng.IntN(4000))
		s.trimIdle = time.Duration(rng.IntN(3)) * time.Millisecond
	}
	s := openTest(t, path)
	tune(s)
	defer func() { s.Close() }()
	m := raft.NewInmemStore()
	written := map[uint64]*raft.Log{}
	gen := uint64(1)
	next := uint64(1) // above every index written
	var history []string
	forgotten := false // a reopen forgot a pending trim: ghosts may stay
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	for step := range steps {
		mFirst, mLast := modelBounds(m)
		sFirst, _ := s.FirstIndex()
		op := rng.IntN(100)
		var desc string
		switch {
		case op < 45: // append the next entries
			n := 1 + rng.IntN(30)
			from := max(mLast, next-1) + 1
			if op < 3 { // after a gap, as after a snapshot install
				from += uint64(1 + rng.IntN(50))
			}
			var logs []*raft.Log
			next = from + uint64(n)
			for i := from; i < next; i++ {
				l := entry(i, gen, rng.IntN(300))
				logs = append(logs, l)
				written[i] = l
			}
			desc = fmt.Sprintf("StoreLogs [%d, %d]", from, from+uint64(n)-1)
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := m.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
		case op < 65 && mLast > 0: // log compaction: a prefix from FirstIndex
			hi := mFirst + uint64(rng.IntN(int(mLast-mFirst+1)))
			if rng.IntN(10) > 0 && hi == mLast && hi > mFirst {
				hi-- // raft keeps trailing entries; sometimes all go
			}
			desc = fmt.Sprintf("DeleteRange(%d, %d) prefix", sFirst, hi)
			if err := s.DeleteRange(sFirst, hi); err != nil {
				t.Fatal(err)
			}
			if err := m.DeleteRange(sFirst, hi); err != nil {
				t.Fatal(err)
			}
			forgotten = false // the trim covers the forgotten one
		case op < 75 && mLast > mFirst: // a conflicting suffix, then the new leader's entries
			lo := mFirst + 1 + uint64(rng.IntN(int(mLast-mFirst)))
			desc = fmt.Sprintf("DeleteRange(%d, %d) suffix", lo, mLast)
			if err := s.DeleteRange(lo, mLast); err != nil {
				t.Fatal(err)
			}
			if err := m.DeleteRange(lo, mLast); err != nil {
				t.Fatal(err)
			}
			for i := lo; i <= mLast; i++ {
				delete(written, i)
			}
			next = lo
			gen++
		case op < 80: // reopen: a pending trim is forgotten
			desc = "reopen"
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, path)
			tune(s)
			forgotten = true
		case op < 83: // the background trimmer drains what is pending (trimIdle is 0-2 ms)
			desc = "settle"
			waitFor(t, "the pending trim to drain", func() bool {
				s.write.Lock()
				defer s.write.Unlock()
				return s.write.pendingHi == 0
			})
		default: // reads
			desc = "reads"
			for range 5 {
				i := uint64(rng.IntN(int(mLast + 10)))
				var got, want raft.Log
				err, merr := s.GetLog(i, &got), m.GetLog(i, &want)
				if merr == nil && (err != nil || !sameLog(&got, &want)) {
					t.Fatalf("step %d: GetLog(%d) = %+v, %v; model %+v", step, i, got, err, want)
				}
				if merr != nil && err == nil && (i >= mFirst || written[i] == nil || !sameLog(&got, written[i])) {
					t.Fatalf("step %d: GetLog(%d) = %+v; the model has none and it is no ghost", step, i, got)
				}
			}
		}
		history = append(history, fmt.Sprintf("%d: %s", step, desc))
		if err := modelCheck(s, m, written, desc == "settle" && !forgotten); err != nil {
			t.Fatalf("seed %d, step %d (%s): %v\nlast steps:\n%s", seed, step, desc, err,
				strings.Join(history[max(0, len(history)-40):], "\n"))
		}
	}
}

// waitFor waits (up to a generous bound for a loaded machine) until cond
// holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDecodeCopies: an entry read is a copy, not bbolt's memory map.
func TestDecodeCopies(t *testing.T) {
	want := entry(7, 3, 100)
	b, err := encodeLog(want)
	if err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := decodeLog(b, &got); err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !sameLog(&got, want) {
		t.Fatalf("decoded entry changed with its source buffer: %+v", got)
	}
}
