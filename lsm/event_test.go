package lsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestCompactionInstalledReportsReplacedTables: the listener hears of
// every compaction with the tables it made obsolete and those it
// installed, with no lock held (it may call into the DB), so that the
// tables on disk are always the previous ones minus the reported inputs
// plus the reported outputs.
func TestCompactionInstalledReportsReplacedTables(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	var events []CompactionInfo
	o := testOptions(fs)
	// Only the test's Compact calls compact, so that each round's events
	// are known when it returns.
	o.L0CompactionThreshold, o.L0SlowdownWritesThreshold, o.L0StopWritesThreshold = 1000, 1000, 1000
	o.LBaseMaxBytes = 1 << 30
	var d *DB
	o.EventListener = &EventListener{CompactionInstalled: func(info CompactionInfo) {
		d.Metrics() // takes the DB's lock: the call must not hold it
		mu.Lock()
		events = append(events, info)
		mu.Unlock()
	}}
	d = mustOpen(t, "db", o)
	defer d.Close()
	tables := func() []string {
		names, err := fs.List("db")
		if err != nil {
			t.Fatal(err)
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, ".sst") })
		slices.Sort(names)
		return names
	}
	rng := rand.New(rand.NewPCG(1, 2))
	reported := 0
	for round := range 8 {
		for range 1 + rng.IntN(4) {
			for range 200 + rng.IntN(400) {
				k := fmt.Sprintf("k%05d", rng.IntN(3000))
				if err := d.Put([]byte(k), []byte(strings.Repeat(k, 1+rng.IntN(20))), NoSync); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		before := tables()
		// A full compaction leaves no table above the bottom level, so
		// no background compaction follows it.
		if err := d.Compact(nil, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		evs := events[reported:]
		reported = len(events)
		mu.Unlock()
		want := slices.Clone(before)
		for _, e := range evs {
			for _, in := range e.Inputs {
				i := slices.Index(want, in.FileName)
				if i < 0 {
					t.Fatalf("round %d: compaction L%d→L%d reports input %s, not a live table (%v)", round, e.StartLevel, e.OutputLevel, in.FileName, want)
				}
				want = slices.Delete(want, i, i+1)
			}
			for _, out := range e.Outputs {
				if out.Size <= 0 {
					t.Fatalf("round %d: output %s of size %d", round, out.FileName, out.Size)
				}
				if len(e.Inputs) > 0 {
					want = append(want, out.FileName)
				} else if !slices.Contains(want, out.FileName) {
					t.Fatalf("round %d: trivial move of %s, not a live table", round, out.FileName)
				}
			}
		}
		slices.Sort(want)
		// The inputs are deleted once the compaction drops its reference
		// to the version it read (the cleaner goroutine may do it).
		deadline := time.Now().Add(10 * time.Second)
		for got := tables(); !slices.Equal(got, want); got = tables() {
			if time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				continue
			}
			t.Fatalf("round %d: tables on disk %v; before the compaction %v, with the reported inputs and outputs applied %v", round, got, before, want)
		}
	}
	if reported == 0 {
		t.Fatal("no compaction reported")
	}
}

// TestEventsReportDurations: every flush and compaction the listener
// hears of carries how long it took, and a flush reports the L0 table it
// installed, which is on disk.
func TestEventsReportDurations(t *testing.T) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.L0CompactionThreshold, o.L0SlowdownWritesThreshold, o.L0StopWritesThreshold = 1000, 1000, 1000
	var mu sync.Mutex
	var flushes []FlushInfo
	var compactions []CompactionInfo
	o.EventListener = &EventListener{
		FlushInstalled: func(info FlushInfo) {
			mu.Lock()
			flushes = append(flushes, info)
			mu.Unlock()
		},
		CompactionInstalled: func(info CompactionInfo) {
			mu.Lock()
			compactions = append(compactions, info)
			mu.Unlock()
		},
	}
	d := mustOpen(t, "db", o)
	defer d.Close()
	for i := range 3 {
		for j := range 500 {
			if err := d.Put(fmt.Appendf(nil, "k%05d", j), fmt.Appendf(nil, "v%d", i), NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	// The flush goroutine calls FlushInstalled after it has installed the
	// table, with no lock held: Flush may return before the call (CI's
	// loaded machine once saw 2 of 3 here). Wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(flushes)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(flushes) < 3 {
		t.Fatalf("%d flushes reported, want at least 3", len(flushes))
	}
	for _, f := range flushes {
		if f.Duration <= 0 || f.Output.FileName == "" || f.Output.Size <= 0 {
			t.Errorf("flush reported as %+v", f)
		}
	}
	if len(compactions) == 0 {
		t.Fatal("no compaction reported")
	}
	for _, c := range compactions {
		if c.Duration <= 0 {
			t.Errorf("compaction L%d→L%d reported a duration of %v", c.StartLevel, c.OutputLevel, c.Duration)
		}
	}
}
