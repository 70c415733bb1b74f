package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/arenaskl"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// arenaKeys is the key space of TestMemTableArenasReleasedUnderReaders.
const arenaKeys = 300

func arenaKey(k int) []byte { return fmt.Appendf(nil, "key%05d", k) }

// arenaValue is version ver of key k's value: self-describing, so that a
// reader can check any value it meets against the writer's progress.
func arenaValue(k int, ver int64) []byte {
	v := fmt.Appendf(nil, "%05d/%010d/", k, ver)
	for len(v) < 40+int(ver%100) {
		v = append(v, byte('a'+(ver+int64(len(v)))%26))
	}
	return v
}

// parseArenaValue returns the version of v, a value of key k, or an error
// if v is not exactly one arenaValue(k, ...).
func parseArenaValue(k int, v []byte) (int64, error) {
	if len(v) < 17 || string(v[:6]) != fmt.Sprintf("%05d/", k) {
		return 0, fmt.Errorf("value %q is not one of key %d", v, k)
	}
	ver, err := strconv.ParseInt(string(v[6:16]), 10, 64)
	if err != nil || !bytes.Equal(v, arenaValue(k, ver)) {
		return 0, fmt.Errorf("value %q of key %d is malformed", v, k)
	}
	return ver, nil
}

// arenaModel is the writer's progress: per key, the last version whose Put
// returned (acked) and the last version whose Put started. A read that
// starts after acked was loaded and ends before started is loaded sees a
// version between the two.
type arenaModel struct {
	acked, started [arenaKeys]atomic.Int64
}

func (m *arenaModel) check(k int, v []byte, found bool, lo, hi int64) error {
	if !found {
		if lo > 0 {
			return fmt.Errorf("key %d not found, but version %d was acknowledged before the read", k, lo)
		}
		return nil
	}
	ver, err := parseArenaValue(k, v)
	if err != nil {
		return err
	}
	if ver < lo || ver > hi {
		return fmt.Errorf("key %d: read version %d, want one in [%d, %d]", k, ver, lo, hi)
	}
	return nil
}

// flushCount returns the flushes done so far.
func (d *DB) flushCount() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.stats.flushes
}

// waitFlushesAfter waits until more than n flushes are done, or the writer
// is done (stop closed) and no flush is coming, or a deadline passes (the
// reader then proceeds; the test only loses some strength).
func waitFlushesAfter(d *DB, n int64, stop <-chan struct{}) {
	deadline := time.Now().Add(5 * time.Second)
	for d.flushCount() <= n && time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		default:
		}
		runtime.Gosched()
	}
}

// TestMemTableArenasReleasedUnderReaders: memtable arenas are unmapped
// while gets, GetFuncs and iterators (some over snapshots) hold memtables
// across memtable switches and flushes, and none of them reads a released
// arena: SetPoisonOnRelease makes such a read fault at once. Every value
// read is checked against the writer's progress. After Close, with one
// iterator left open across it, the DB still counts that iterator's
// arenas; once it is closed, no arena byte is live.
func TestMemTableArenasReleasedUnderReaders(t *testing.T) {
	defer arenaskl.SetPoisonOnRelease(arenaskl.SetPoisonOnRelease(true))
	startLive := arenaskl.LiveBytes()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	o := testOptions(vfs.NewMem())
	o.testInitialMemTableBytes = 16 << 10 // many switches
	d := mustOpen(t, "db", o)

	var model arenaModel
	stop := make(chan struct{})
	errs := make(chan error, 16)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	var wg sync.WaitGroup

	// The writer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		rng := rand.New(rand.NewPCG(seed, 0))
		for i := 0; i < 20000; i++ {
			k := rng.IntN(arenaKeys)
			ver := model.started[k].Add(1)
			if err := d.Put(arenaKey(k), arenaValue(k, ver), NoSync); err != nil {
				fail(err)
				return
			}
			model.acked[k].Store(ver)
			if i%3000 == 2999 {
				if err := d.Flush(); err != nil {
					fail(err)
					return
				}
			}
		}
	}()

	// leftover is an iterator a reader leaves open across Close.
	var leftover struct {
		sync.Mutex
		it  *Iterator
		key []byte // aliases the iterator's current key
	}
	var gets, getFuncsAcrossFlush, itersAcrossFlush atomic.Int64
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(r+1)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch op := rng.IntN(10); {
				case op < 6:
					k := rng.IntN(arenaKeys)
					lo := model.acked[k].Load()
					v, err := d.Get(arenaKey(k))
					hi := model.started[k].Load()
					if err != nil && err != ErrNotFound {
						fail(err)
						return
					}
					if err := model.check(k, v, err == nil, lo, hi); err != nil {
						fail(fmt.Errorf("Get: %w", err))
						return
					}
					gets.Add(1)
				case op < 8:
					// A GetFunc whose callback holds the value across a
					// flush of the memtable it lies in.
					k := rng.IntN(arenaKeys)
					lo := model.acked[k].Load()
					n := d.flushCount()
					err := d.GetFunc(arenaKey(k), func(v []byte) error {
						hi := model.started[k].Load()
						before := bytes.Clone(v)
						waitFlushesAfter(d, n, stop)
						if !bytes.Equal(v, before) {
							return fmt.Errorf("value %q changed to %q during the callback", before, v)
						}
						if d.flushCount() > n {
							getFuncsAcrossFlush.Add(1)
						}
						return model.check(k, v, true, lo, hi)
					})
					if err == ErrNotFound {
						err = model.check(k, nil, false, lo, 0)
					}
					if err != nil {
						fail(fmt.Errorf("GetFunc: %w", err))
						return
					}
				default:
					if err := arenaIterate(d, &model, rng, stop, &itersAcrossFlush, func(it *Iterator) bool {
						leftover.Lock()
						defer leftover.Unlock()
						if leftover.it != nil {
							return false
						}
						leftover.it, leftover.key = it, it.Key()
						return true
					}); err != nil {
						fail(err)
						return
					}
				}
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d gets, %d GetFuncs and %d iterators held memtables across a flush; %d flushes",
		gets.Load(), getFuncsAcrossFlush.Load(), itersAcrossFlush.Load(), d.flushCount())
	if getFuncsAcrossFlush.Load() == 0 || itersAcrossFlush.Load() == 0 {
		t.Fatalf("no reader held a memtable across a flush: the test tested nothing")
	}

	if leftover.it == nil {
		// Make one.
		it, err := d.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !it.First() {
			t.Fatal("empty DB")
		}
		leftover.it, leftover.key = it, it.Key()
	}
	keyBefore := bytes.Clone(leftover.key)
	// With the iterator on a table's block, Close reports the block still
	// pinned (the DB closes the block cache it made); nothing else may fail.
	if err := d.Close(); err != nil {
		if le := (*cache.LeakError)(nil); !errors.As(err, &le) {
			t.Fatal(err)
		}
		t.Logf("Close with an iterator open: %v", err)
	}
	if n := d.memArenaBytes.Load(); n <= 0 {
		t.Fatalf("%d arena bytes live after Close with an iterator open: its memtables are released", n)
	}
	// The open iterator's memtables are still mapped.
	if !bytes.Equal(leftover.key, keyBefore) {
		t.Fatalf("iterator key %q changed to %q across Close", keyBefore, leftover.key)
	}
	if err := leftover.it.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.memArenaBytes.Load(); n != 0 {
		t.Fatalf("%d memtable arena bytes live after Close and the last iterator's Close", n)
	}
	if n := arenaskl.LiveBytes() - startLive; n != 0 {
		t.Fatalf("%d arena bytes live in the process after Close", n)
	}
}

// arenaIterate runs one iterator over d (over a snapshot, sometimes), held
// across a flush partway, and checks what it reads against model. keep
// may take the iterator instead of it being closed (it is then left on a
// key).
func arenaIterate(d *DB, model *arenaModel, rng *rand.Rand, stop <-chan struct{}, acrossFlush *atomic.Int64, keep func(*Iterator) bool) error {
	var lo, hi [arenaKeys]int64
	for k := range lo {
		lo[k] = model.acked[k].Load()
	}
	var it *Iterator
	var err error
	if rng.IntN(2) == 0 {
		var s *Snapshot
		if s, err = d.NewSnapshot(); err != nil {
			return err
		}
		defer s.Close()
		it, err = s.NewIter(nil)
	} else {
		it, err = d.NewIter(nil)
	}
	if err != nil {
		return err
	}
	for k := range hi {
		hi[k] = model.started[k].Load()
	}
	closeIt := true
	defer func() {
		if closeIt {
			it.Close()
		}
	}()
	n := d.flushCount()
	waitAt := rng.IntN(arenaKeys)
	seen := make([]bool, arenaKeys)
	i := 0
	for valid := it.First(); valid; valid = it.Next() {
		k, err := strconv.Atoi(string(bytes.TrimPrefix(it.Key(), []byte("key"))))
		if err != nil || k < 0 || k >= arenaKeys || !bytes.Equal(it.Key(), arenaKey(k)) {
			return fmt.Errorf("iterator: unexpected key %q", it.Key())
		}
		if seen[k] {
			return fmt.Errorf("iterator: key %d twice", k)
		}
		seen[k] = true
		if err := model.check(k, it.Value(), true, lo[k], hi[k]); err != nil {
			return fmt.Errorf("iterator: %w", err)
		}
		if i == waitAt {
			// Hold the current key and value (views of a memtable, or
			// a table block) across a flush, then check them again.
			key, val := it.Key(), it.Value()
			keyc, valc := bytes.Clone(key), bytes.Clone(val)
			waitFlushesAfter(d, n, stop)
			if !bytes.Equal(key, keyc) || !bytes.Equal(val, valc) {
				return fmt.Errorf("iterator: entry %q=%q changed to %q=%q across a flush", keyc, valc, key, val)
			}
			if d.flushCount() > n {
				acrossFlush.Add(1)
			}
			if rng.IntN(4) == 0 && keep(it) {
				closeIt = false
				return nil
			}
		}
		i++
	}
	for k := range seen {
		if !seen[k] && lo[k] > 0 {
			return fmt.Errorf("iterator: key %d missing, version %d was acknowledged before it was created", k, lo[k])
		}
	}
	return it.Close()
}

// TestRecoveryReleasesMemTables: the memtables that recovery replays WALs
// into are released once written; after Open only the mutable memtable's
// arena is live, and after Close none.
func TestRecoveryReleasesMemTables(t *testing.T) {
	startLive := arenaskl.LiveBytes()
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.MemTableSizeBytes = 64 << 10
	d := mustOpen(t, "db", o)
	val := bytes.Repeat([]byte("x"), 100)
	for i := 0; i < 2000; i++ { // several memtables' worth of WAL
		if err := d.Put(fmt.Appendf(nil, "k%06d", i), val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	// Drop the DB without flushing, as a crash would (the WAL stays).
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := arenaskl.LiveBytes() - startLive; n != 0 {
		t.Fatalf("%d arena bytes live after Close", n)
	}
	d = mustOpen(t, "db", o)
	d.mu.Lock()
	memCap, imms := d.mu.mem.capacityBytes, len(d.mu.imm)
	d.mu.Unlock()
	if got := d.Metrics().MemTableArenaBytes; imms != 0 || got != memCap {
		t.Fatalf("after recovery: %d arena bytes live, %d queued memtables; want only the mutable memtable's %d", got, imms, memCap)
	}
	if n := arenaskl.LiveBytes() - startLive; n != memCap {
		t.Fatalf("after recovery: %d arena bytes live in the process, want %d", n, memCap)
	}
	for i := 0; i < 2000; i += 97 {
		if v, err := d.Get(fmt.Appendf(nil, "k%06d", i)); err != nil || !bytes.Equal(v, val) {
			t.Fatalf("key %d after recovery: %q, %v", i, v, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := arenaskl.LiveBytes() - startLive; n != 0 {
		t.Fatalf("%d arena bytes live after Close", n)
	}
}

// TestIteratorCloseAfterDBClose: an iterator left open across DB.Close
// (which the DB's contract forbids, but a caller may do) keeps its
// memtables: its current entry and the memtable entries after it are
// still read correctly, and its Close succeeds, as before arenas were
// unmapped.
func TestIteratorCloseAfterDBClose(t *testing.T) {
	defer arenaskl.SetPoisonOnRelease(arenaskl.SetPoisonOnRelease(true))
	d := mustOpen(t, "db", testOptions(vfs.NewMem()))
	for i := 0; i < 100; i++ {
		if err := d.Put(fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%03d", i), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("First: empty")
	}
	key, val := it.Key(), it.Value()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if string(key) != "k000" || string(val) != "v000" {
		t.Fatalf("entry after Close: %q=%q", key, val)
	}
	n := 1
	for it.Next() {
		if want := fmt.Sprintf("k%03d", n); string(it.Key()) != want || string(it.Value()) != fmt.Sprintf("v%03d", n) {
			t.Fatalf("entry %d after Close: %q=%q", n, it.Key(), it.Value())
		}
		n++
	}
	if n != 100 {
		t.Fatalf("%d entries after Close, want 100", n)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iterator Close after DB.Close: %v", err)
	}
	if it.Key() != nil || it.Valid() {
		t.Fatalf("closed iterator still on %q (valid %v)", it.Key(), it.Valid())
	}
	if err := it.Close(); err != ErrClosed {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}
