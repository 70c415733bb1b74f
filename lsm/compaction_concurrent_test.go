package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// compactionSummary is what a test records of a compaction it saw start.
type compactionSummary struct {
	startLevel, outputLevel int
	smallest, largest       []byte
	files                   []base.FileNum
}

func summarize(c *compaction) compactionSummary {
	s := compactionSummary{startLevel: c.startLevel, outputLevel: c.outputLevel,
		smallest: bytes.Clone(c.smallest), largest: bytes.Clone(c.largest)}
	for _, in := range c.inputs {
		for _, f := range in {
			s.files = append(s.files, f.FileNum)
		}
	}
	return s
}

func (s compactionSummary) String() string {
	return fmt.Sprintf("L%d→L%d [%q, %q] %v", s.startLevel, s.outputLevel, s.smallest, s.largest, s.files)
}

// conflicting reports whether a and b must not run at once: they share an
// input, or write (or one writes and the other reads) overlapping key
// ranges of one level.
func conflicting(a, b compactionSummary) bool {
	for _, f := range a.files {
		if slices.Contains(b.files, f) {
			return true
		}
	}
	if bytes.Compare(a.smallest, b.largest) > 0 || bytes.Compare(b.smallest, a.largest) > 0 {
		return false
	}
	return a.outputLevel == b.outputLevel || a.startLevel == b.outputLevel || a.outputLevel == b.startLevel
}

// TestConcurrentCompactionsRunAtOnce holds every compaction at the start
// of its table writing until a second one is there too, while random
// overwrites of a DB with several levels go on: with
// MaxConcurrentCompactions 2 a second compaction must start while the
// first is held (with 1 none ever does: the test then times out), and
// the two must not conflict.
func TestConcurrentCompactionsRunAtOnce(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxConcurrentCompactions = 2
	o.MaxSubcompactions = 1
	o.TargetFileSizeBytes = 4 << 10
	o.LBaseMaxBytes = 16 << 10
	o.MinBlobSize = -1
	d := mustOpen(t, "db", o)
	defer d.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	val := func() []byte {
		v := make([]byte, 100)
		for i := range v {
			v[i] = byte('a' + rng.IntN(26))
		}
		return v
	}
	const keys = 4000
	for i := range keys {
		if err := d.Put(fmt.Appendf(nil, "key%05d", i), val(), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		waiting []compactionSummary
		pair    []compactionSummary
		paired  = make(chan struct{})
	)
	// A held compaction waits this long for a partner: not every
	// compaction can have one (an L0 compaction usually takes the whole
	// base level), and the writes must go on meanwhile.
	const holdFor = 2 * time.Second
	hook := func(c *compaction) {
		s := summarize(c)
		mu.Lock()
		if pair == nil {
			waiting = append(waiting, s)
			if len(waiting) >= 2 {
				pair = slices.Clone(waiting[len(waiting)-2:])
				close(paired)
			}
		}
		mu.Unlock()
		select {
		case <-paired:
		case <-time.After(holdFor):
		}
		mu.Lock()
		waiting = slices.DeleteFunc(waiting, func(w compactionSummary) bool { return slices.Equal(w.files, s.files) })
		mu.Unlock()
	}
	d.mu.Lock()
	d.mu.compactions.beforeWrite = hook
	d.mu.Unlock()

	deadline := time.Now().Add(90 * time.Second)
	for done := false; !done; {
		select {
		case <-paired:
			done = true
			continue
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no two compactions ever ran at once")
		}
		if err := d.Put(fmt.Appendf(nil, "key%05d", rng.IntN(keys)), val(), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	a, b := pair[0], pair[1]
	mu.Unlock()
	t.Logf("ran at once: %v and %v", a, b)
	if conflicting(a, b) {
		t.Fatalf("conflicting compactions ran at once: %v and %v", a, b)
	}
}

// releaseCompactionLocked undoes a compaction the test picked and will
// not run.
func releaseCompactionLocked(d *DB, c *compaction) {
	for _, in := range c.inputs {
		for _, f := range in {
			f.Compacting = false
		}
	}
	d.mu.compactions.inProgress = slices.DeleteFunc(d.mu.compactions.inProgress, func(r *compaction) bool { return r == c })
	c.version.Unref()
}

// TestCompactionConflicts builds compactions by hand while one rewrites
// the first bottom-level tables into themselves (as a forced blob
// compaction does): an L0 table holding one key that falls between two of
// those tables may not move into the bottom level while that runs (none
// of its inputs is compacting, but the running one's outputs span the
// key: the level would hold overlapping tables); a compaction sharing an
// input may not start; a disjoint one may.
func TestCompactionConflicts(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxConcurrentCompactions = 4
	o.TargetFileSizeBytes = 1 << 10
	o.LBaseMaxBytes = 1 << 30
	o.L0CompactionThreshold, o.L0SlowdownWritesThreshold, o.L0StopWritesThreshold = 100, 100, 100
	o.MinBlobSize = -1
	d := mustOpen(t, "db", o)
	defer d.Close()
	for round := range 2 { // twice, so the Compact merges and cuts tables
		for i := range 1000 {
			if err := d.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "%d-%040d", round, i), NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	bottom := slices.Clone(d.mu.versions.Current().Levels[version.NumLevels-1])
	d.mu.Unlock()
	if len(bottom) < 8 {
		t.Fatalf("setup: %d bottom-level tables, want at least 8", len(bottom))
	}
	// A key between the first two bottom tables, in no table.
	_, gap, _ := bottom[0].UserKeyBounds()
	gap = append(bytes.Clone(gap), 'x')
	if err := d.Put(gap, []byte("v"), NoSync); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	for d.mu.compactions.running > 0 {
		d.mu.bgCond.Wait()
	}
	v := d.mu.versions.Current()
	if len(v.Levels[0]) != 1 || len(v.Levels[version.NumLevels-1]) != len(bottom) {
		t.Fatalf("setup: want 1 L0 table and the %d bottom tables:\n%s", len(bottom), v)
	}
	const b = version.NumLevels - 1
	running := d.newCompactionLocked(v, b, b, v.Levels[b][0:3])
	if running == nil {
		t.Fatal("the first compaction was not built")
	}
	defer releaseCompactionLocked(d, running)
	if c := d.newCompactionLocked(v, 0, b, v.Levels[0]); c != nil {
		releaseCompactionLocked(d, c)
		t.Fatalf("L0 table [%q] moves into L%d while a compaction rewrites %q..%q there", gap, b, running.smallest, running.largest)
	}
	if c := d.newCompactionLocked(v, b, b, v.Levels[b][2:4]); c != nil {
		releaseCompactionLocked(d, c)
		t.Fatal("a compaction sharing a running one's input was built")
	}
	c := d.newCompactionLocked(v, b, b, v.Levels[b][5:7])
	if c == nil {
		t.Fatal("a compaction disjoint from the running one was not built")
	}
	releaseCompactionLocked(d, c)
}

// TestConcurrentCompactionsRandomized runs writers (puts, deletions,
// range deletions of their own keys) and readers against a DB of many
// small tables, whose compactions write their tables slowly, with
// MaxConcurrentCompactions 1 to 4, checking every read
// against the writers' models, every installed version's ordering (L1+
// tables sorted and disjoint), and the whole DB, reopened, at the end.
func TestConcurrentCompactionsRandomized(t *testing.T) {
	for conc := 1; conc <= 4; conc++ {
		t.Run(fmt.Sprint(conc), func(t *testing.T) {
			testConcurrentCompactionsRandomized(t, conc, uint64(conc))
		})
	}
}

func testConcurrentCompactionsRandomized(t *testing.T, conc int, seed uint64) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.MaxConcurrentCompactions = conc
	o.MaxSubcompactions = 2
	o.TargetFileSizeBytes = 2 << 10
	o.LBaseMaxBytes = 16 << 10
	o.LevelMultiplier = 4
	// Values from 128 bytes (a share of them) in blob files with an
	// even bound, to bring in blob relocation by compaction; none with an
	// odd one.
	o.MinBlobSize = -1
	if conc%2 == 0 {
		o.MinBlobSize = 128
		o.BlobTargetFileSizeBytes = 16 << 10
	}
	var (
		orderErr  atomic.Pointer[error]
		maxAtOnce atomic.Int64
		installs  atomic.Int64
	)
	var open atomic.Pointer[DB] // the DB the listener checks (reopen: nil)
	o.EventListener = &EventListener{CompactionInstalled: func(CompactionInfo) {
		installs.Add(1)
		d := open.Load()
		if d == nil {
			return
		}
		d.mu.Lock()
		v := d.mu.versions.Current()
		v.Ref()
		d.mu.Unlock()
		if err := v.CheckOrdering(); err != nil {
			orderErr.CompareAndSwap(nil, &err)
		}
		v.Unref()
	}}
	d := mustOpen(t, "db", o)
	open.Store(d)
	d.mu.Lock()
	var slowTables atomic.Uint64
	d.mu.compactions.beforeWrite = func(*compaction) {
		d.mu.Lock()
		n := int64(len(d.mu.compactions.inProgress))
		d.mu.Unlock()
		for m := maxAtOnce.Load(); n > m && !maxAtOnce.CompareAndSwap(m, n); m = maxAtOnce.Load() {
		}
		// Table writing made slower, by up to 10 ms (a slow disk): the
		// compactions picked meanwhile run beside this one.
		time.Sleep(time.Duration(slowTables.Add(7919)%10) * time.Millisecond)
	}
	d.mu.Unlock()

	const writers, readers, keysPer = 3, 2, 2000
	ops := 5000
	if raceEnabled {
		ops = 2000
	}
	models := make([]map[string]string, writers)
	var modelMu sync.Mutex // guards models for the readers' and the end's checks
	key := func(w, i int) string { return fmt.Sprintf("w%d-%05d", w, i) }
	var writersWG, readersWG sync.WaitGroup
	errc := make(chan error, writers+readers)
	stop := make(chan struct{})
	for w := range writers {
		models[w] = map[string]string{}
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range ops {
				k := key(w, rng.IntN(keysPer))
				modelMu.Lock()
				var err error
				switch r := rng.IntN(100); {
				case r < 85:
					pad := make([]byte, 20+rng.IntN(150)) // incompressible
					for j := range pad {
						pad[j] = byte('a' + rng.IntN(26))
					}
					v := fmt.Sprintf("%s=%d:%s", k, i, pad)
					err = d.Put([]byte(k), []byte(v), NoSync)
					models[w][k] = v
				case r < 97:
					err = d.Delete([]byte(k), NoSync)
					delete(models[w], k)
				default:
					lo := rng.IntN(keysPer)
					k = key(w, lo)
					hi := key(w, lo+1+rng.IntN(20))
					err = d.DeleteRange([]byte(k), []byte(hi), NoSync)
					for mk := range models[w] {
						if mk >= k && mk < hi {
							delete(models[w], mk)
						}
					}
				}
				// Read one of this writer's keys back: no other
				// goroutine writes it.
				rk := key(w, rng.IntN(keysPer))
				want, ok := models[w][rk]
				modelMu.Unlock()
				if err != nil {
					errc <- err
					return
				}
				got, gerr := d.Get([]byte(rk))
				switch {
				case !ok && !errors.Is(gerr, ErrNotFound):
					errc <- fmt.Errorf("Get(%s) = %q, %v; want not found", rk, got, gerr)
					return
				case ok && (gerr != nil || string(got) != want):
					errc <- fmt.Errorf("Get(%s) = %q, %v; want %q", rk, got, gerr, want)
					return
				}
			}
		}()
	}
	for r := range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Every key is read in order, with the value its key
				// wrote (each value starts with its key).
				it, err := d.NewIter(nil)
				if err != nil {
					errc <- err
					return
				}
				var prev []byte
				for ok := it.First(); ok; ok = it.Next() {
					if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
						errc <- fmt.Errorf("reader %d: key %q after %q", r, it.Key(), prev)
						it.Close()
						return
					}
					if !bytes.HasPrefix(it.Value(), append(bytes.Clone(it.Key()), '=')) {
						errc <- fmt.Errorf("reader %d: key %q has value %q", r, it.Key(), it.Value())
						it.Close()
						return
					}
					prev = append(prev[:0], it.Key()...)
				}
				if err := errors.Join(it.Error(), it.Close()); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	writersWG.Wait()
	close(stop)
	readersWG.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if p := orderErr.Load(); p != nil {
		t.Fatalf("an installed version is out of order: %v", *p)
	}
	t.Logf("MaxConcurrentCompactions %d: %d compactions installed, at most %d at once", conc, installs.Load(), maxAtOnce.Load())
	if got := maxAtOnce.Load(); got > int64(conc) {
		t.Fatalf("%d compactions at once, MaxConcurrentCompactions %d", got, conc)
	}
	check := func(d *DB) {
		t.Helper()
		want := map[string]string{}
		for _, m := range models {
			for k, v := range m {
				want[k] = v
			}
		}
		it, err := d.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			if w, ok := want[string(it.Key())]; !ok || w != string(it.Value()) {
				t.Fatalf("key %q = %q, want %q (present %v)", it.Key(), it.Value(), w, ok)
			}
			n++
		}
		if err := it.Error(); err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Fatalf("%d keys, want %d", n, len(want))
		}
	}
	check(d)
	open.Store(nil)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, "db", o)
	defer d.Close()
	check(d)
	d.mu.Lock()
	err := d.mu.versions.Current().CheckOrdering()
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMaxConcurrentCompactionsOption checks the option's default and
// validation.
func TestMaxConcurrentCompactionsOption(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MaxConcurrentCompactions = -1
	if _, err := Open("db", o); !errors.Is(err, base.ErrInvalidArgument) {
		t.Fatalf("MaxConcurrentCompactions -1: Open = %v, want an invalid argument", err)
	}
	o = testOptions(vfs.NewMem())
	d := mustOpen(t, "db", o)
	defer d.Close()
	if n := d.opts.MaxConcurrentCompactions; n < 1 || n > 4 {
		t.Fatalf("default MaxConcurrentCompactions %d, want 1-4", n)
	}
}
