package cluster

import (
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
)

// TestLogBytesAgainstModel checks logBytes against a map of every entry's
// size, through random appends, log compactions, conflicting suffixes and
// whole-log deletions (a snapshot installed on a monotonic store).
// Batches of one entry keep every size exact while the marks are few; the
// seed replays with -retention.seed.
func TestLogBytesAgainstModel(t *testing.T) {
	seed := *retentionSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for round := range 20 {
		inner := raft.NewInmemStore()
		b, err := newLogBytes(inner)
		if err != nil {
			t.Fatal(err)
		}
		model := map[uint64]uint64{} // index -> bytes
		var first, last uint64 = 1, 0
		batch := 1
		if round%2 == 1 {
			batch = 7 // sizes inside a batch are averaged: compare at batch ends only
		}
		check := func(step int) {
			t.Helper()
			if len(b.mu.marks) > maxLogMarks {
				t.Fatalf("round %d step %d: %d marks", round, step, len(b.mu.marks))
			}
			var total uint64
			for i := first; i <= last; i++ {
				total += model[i]
			}
			if got, gotLast := b.size(); got != total || (last >= first && gotLast != last) {
				t.Fatalf("round %d step %d: size %d last %d, want %d %d", round, step, got, gotLast, total, last)
			}
			if batch == 1 && last >= first {
				a := first - 1 + rng.Uint64N(last-first+1)
				z := a + rng.Uint64N(last-a+1)
				var want uint64
				for i := a + 1; i <= z; i++ {
					want += model[i]
				}
				if got := b.between(a, z); got != want {
					t.Fatalf("round %d step %d: between(%d, %d) = %d, want %d", round, step, a, z, got, want)
				}
			}
		}
		for step := range 300 {
			switch r := rng.IntN(20); {
			case r < 14: // append a few batches
				for range 1 + rng.IntN(3) {
					var logs []*raft.Log
					for range batch {
						last++
						l := &raft.Log{Index: last, Term: 1, Data: make([]byte, rng.IntN(5000))}
						model[last] = entryBytes(l)
						logs = append(logs, l)
					}
					if err := b.StoreLogs(logs); err != nil {
						t.Fatal(err)
					}
				}
			case r < 17 && last > first: // compaction of a prefix
				upTo := first + rng.Uint64N(last-first)
				if batch > 1 {
					upTo = upTo / uint64(batch) * uint64(batch) // a batch end
				}
				if upTo < first {
					continue
				}
				if err := b.DeleteRange(first, upTo); err != nil {
					t.Fatal(err)
				}
				for i := first; i <= upTo; i++ {
					delete(model, i)
				}
				first = upTo + 1
			case r < 19 && last > first && batch == 1: // a conflicting suffix
				from := first + 1 + rng.Uint64N(last-first)
				if err := b.DeleteRange(from, last); err != nil {
					t.Fatal(err)
				}
				for i := from; i <= last; i++ {
					delete(model, i)
				}
				last = from - 1
			case r == 19 && last >= first && batch == 1: // a snapshot install
				if err := b.DeleteRange(first, last); err != nil {
					t.Fatal(err)
				}
				clear(model)
				last += 1 + uint64(rng.IntN(100)) // the snapshot's index
				first = last + 1
			}
			check(step)
		}
	}
}

var retentionSeed = flag.Uint64("retention.seed", 0, "seed of TestLogBytesAgainstModel (0: the time)")

// TestLogBytesThinning: past maxLogMarks batches the marks are thinned,
// and sizes stay within a batch or two of the truth.
func TestLogBytesThinning(t *testing.T) {
	b, err := newLogBytes(raft.NewInmemStore())
	if err != nil {
		t.Fatal(err)
	}
	const entries = 10 * maxLogMarks
	for i := uint64(1); i <= entries; i++ {
		size := 100
		if i > entries/2 {
			size = 10000 // the second half's entries are 100 times larger
		}
		if err := b.StoreLogs([]*raft.Log{{Index: i, Data: make([]byte, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.mu.marks) > maxLogMarks {
		t.Fatalf("%d marks", len(b.mu.marks))
	}
	big, small := uint64(10000+entryOverheadBytes), uint64(100+entryOverheadBytes)
	if got, want := b.between(0, entries), entries/2*(big+small); got != want {
		t.Fatalf("all: %d, want %d", got, want)
	}
	// The last 1000 entries: resolution is entries/maxLogMarks*2 = 20
	// entries.
	if got, want := b.between(entries-1000, entries), 1000*big; got < want-20*big || got > want+20*big {
		t.Fatalf("last 1000: %d, want %d", got, want)
	}
	if got := b.entriesHolding(100 * big); got < 80 || got > 120 {
		t.Fatalf("entries holding 100 large ones: %d", got)
	}
	// More than the log holds: extrapolated at the average size.
	if got, want := b.entriesHolding(2*entries/2*(big+small)), uint64(2*entries); got < want-2 || got > want+2 {
		t.Fatalf("entries holding twice the log: %d, want %d", got, want)
	}
}

// TestLogBytesRestart: a store reopened over an existing log counts its
// entries at the average size of the last ones.
func TestLogBytesRestart(t *testing.T) {
	inner := raft.NewInmemStore()
	for i := uint64(1); i <= 100; i++ {
		inner.StoreLog(&raft.Log{Index: i, Data: make([]byte, 1000)})
	}
	inner.DeleteRange(1, 20)
	b, err := newLogBytes(inner)
	if err != nil {
		t.Fatal(err)
	}
	if got, last := b.size(); got != 80*(1000+entryOverheadBytes) || last != 100 {
		t.Fatalf("size %d last %d", got, last)
	}
	empty, err := newLogBytes(raft.NewInmemStore())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := empty.size(); got != 0 || empty.entriesHolding(1<<20) != math.MaxUint64 {
		t.Fatalf("empty log: size %d, entries holding 1 MiB %d", got, empty.entriesHolding(1<<20))
	}
}

func TestDecideRetention(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name string
		in   retentionInput
		want retentionDecision
	}{
		{"small entries: the entry bound",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 500000, SinceSnapshotBytes: mib},
			retentionDecision{TrailingLogs: 10240}},
		{"large entries: the byte bound",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 1024, SinceSnapshotBytes: 256 * mib},
			retentionDecision{TrailingLogs: 1024, Snapshot: true}},
		{"the floor",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 16},
			retentionDecision{TrailingLogs: minTrailingLogs}},
		{"the floor is at most the entry bound",
			retentionInput{TrailingLogs: 10, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 2},
			retentionDecision{TrailingLogs: 10}},
		{"a live follower behind",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 1024, FollowerLag: 3000},
			retentionDecision{TrailingLogs: 4024}},
		{"a follower far behind: the entry bound",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 1024, FollowerLag: 1 << 40},
			retentionDecision{TrailingLogs: 10240}},
		{"an empty log",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: math.MaxUint64, FollowerLag: 5},
			retentionDecision{TrailingLogs: 10240}},
		{"below the threshold",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: 64 * mib, SnapshotThresholdBytes: 256 * mib, TailEntries: 1024, SinceSnapshotBytes: 256*mib - 1},
			retentionDecision{TrailingLogs: 1024}},
		{"no byte bounds",
			retentionInput{TrailingLogs: 10240, TrailingLogBytes: -1, SnapshotThresholdBytes: -1, TailEntries: 1024, SinceSnapshotBytes: 1 << 40},
			retentionDecision{TrailingLogs: 10240}},
	} {
		if got := decideRetention(c.in); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestRetentionConfig: the byte bounds and the segment size default, take
// -1 for "none" (the bounds), and refuse other negative or out-of-range
// values naming the setting.
func TestRetentionConfig(t *testing.T) {
	c, err := Config{ID: "x", DataDir: "x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.TrailingLogBytes != DefaultTrailingLogBytes || c.SnapshotThresholdBytes != DefaultSnapshotThresholdBytes ||
		c.RaftWALSegmentSize != DefaultRaftWALSegmentSize {
		t.Fatalf("defaults: %d %d %d", c.TrailingLogBytes, c.SnapshotThresholdBytes, c.RaftWALSegmentSize)
	}
	c, err = Config{ID: "x", DataDir: "x", TrailingLogBytes: -1, SnapshotThresholdBytes: -1, RaftWALSegmentSize: 1 << 20}.withDefaults()
	if err != nil || c.TrailingLogBytes != -1 || c.SnapshotThresholdBytes != -1 || c.RaftWALSegmentSize != 1<<20 {
		t.Fatalf("-1, -1, 1 MiB: %d %d %d, %v", c.TrailingLogBytes, c.SnapshotThresholdBytes, c.RaftWALSegmentSize, err)
	}
	for _, bad := range []struct {
		c    Config
		want string
	}{
		{Config{TrailingLogBytes: -2}, "trailing log bytes -2: use a positive number of bytes, or -1 for no byte bound"},
		{Config{SnapshotThresholdBytes: -5}, "snapshot threshold bytes -5: use a positive number of bytes, or -1 for no byte threshold"},
		{Config{RaftWALSegmentSize: -1}, "raft WAL segment size -1: use 1048576 (1 MiB) to 1073741824 (1 GiB) bytes"},
		{Config{RaftWALSegmentSize: 4096}, "raft WAL segment size 4096"},
		{Config{RaftWALSegmentSize: 2 << 30}, "raft WAL segment size 2147483648"},
	} {
		bad.c.ID, bad.c.DataDir = "x", "x"
		if err := bad.c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want ErrInvalidConfig with %q", bad.c, err, bad.want)
		}
	}
}

// TestWALSegmentSize: raft-wal's segments have the configured size, an
// empty node's log is one of them, and a log written with another size
// opens unchanged (each segment keeps its own).
func TestWALSegmentSize(t *testing.T) {
	dir := t.TempDir()
	ls, _, closer, err := openRaftLogStore(LogStoreWAL, dir, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.StoreLog(&raft.Log{Index: 1, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if segs := walSegments(t, dir); len(segs) != 1 || segs[0] != 1<<20 {
		t.Fatalf("segments %v, want one of 1 MiB", segs)
	}
	// Fill two segments and a bit with 64 KiB entries.
	for i := uint64(2); i <= 40; i++ {
		if err := ls.StoreLog(&raft.Log{Index: i, Data: make([]byte, 64<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	closer.Close()
	ls, _, closer, err = openRaftLogStore(LogStoreWAL, dir, nil, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	for i := uint64(41); i <= 60; i++ {
		if err := ls.StoreLog(&raft.Log{Index: i, Data: make([]byte, 64<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	var l raft.Log
	for i := uint64(1); i <= 60; i++ {
		if err := ls.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	segs := walSegments(t, dir)
	if len(segs) < 3 || segs[0] > 1<<20+64<<10 || segs[len(segs)-1] != 4<<20 {
		t.Fatalf("segments %v: want 1 MiB ones, then a 4 MiB one", segs)
	}
}

// walSegments returns the sizes of the raft-wal segment files in the raft
// directory dir, oldest first.
func walSegments(t *testing.T, dir string) []int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, n := range names { // Glob sorts; names start with the base index
		fi, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	return sizes
}

// dirBytes returns the size of the files under dir.
func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetentionBoundsRaftLog writes 40 MiB of 64 KiB values through a
// one-node cluster whose log is bounded to 4 MiB trailing and 4 MiB
// between snapshots (the entry settings at their defaults, which keep
// 18,432 entries, more than were written). The raft directory must stay a
// fraction of what was written, in raft-wal and raft-boltdb alike; with
// the byte bounds off it keeps everything.
func TestRetentionBoundsRaftLog(t *testing.T) {
	saved := retentionInterval
	retentionInterval = 10 * time.Millisecond
	t.Cleanup(func() { retentionInterval = saved })
	const (
		valueSize = 64 << 10
		puts      = 640
		written   = puts * valueSize
		bound     = 4 << 20
	)
	value := make([]byte, valueSize)
	crand.Read(value)
	for _, c := range []struct {
		name    string
		store   string
		nodes   int
		bounded bool
	}{
		{"wal", LogStoreWAL, 1, true},
		{"boltdb", LogStoreBoltDB, 1, true},
		{"wal, three nodes", LogStoreWAL, 3, true},
		{"wal without byte bounds", LogStoreWAL, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := newTestCluster(t)
			nodes := tc.formCluster(c.nodes, func(cfg *Config) {
				cfg.RaftLogStore = c.store
				cfg.RaftWALSegmentSize = 1 << 20
				cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes = bound, bound
				if !c.bounded {
					cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes = -1, -1
				}
			})
			n := tc.leader()
			kv := tc.kv(n)
			// The largest raft directory of the nodes (every node bounds
			// its own log).
			raftBytes := func() int64 {
				var most int64
				for _, m := range nodes {
					most = max(most, dirBytes(t, filepath.Join(tc.cfgs[m.ID()].DataDir, raftDirName)))
				}
				return most
			}
			var peak int64
			for i := range puts {
				put(t, kv, fmt.Sprintf("k%04d", i), string(value))
				if i%8 == 0 {
					peak = max(peak, raftBytes())
				}
			}
			final := raftBytes()
			logSize, _ := n.retention.size()
			t.Logf("wrote %d MiB: raft directory peak %.1f MiB, final %.1f MiB; leader's log entries %.1f MiB; trailing logs %d",
				written>>20, float64(peak)/(1<<20), float64(final)/(1<<20), float64(logSize)/(1<<20), n.raft.ReloadableConfig().TrailingLogs)
			if !c.bounded {
				if final < written {
					t.Fatalf("without byte bounds the raft directory holds %d bytes, less than the %d written: the test measures nothing", final, written)
				}
				return
			}
			// The log: 4 MiB trailing (63 entries) + 4 MiB
			// until the next snapshot + what was written while that
			// snapshot ran; the directory: that, plus two 1 MiB segments
			// (raft-wal) or bbolt's growth (it doubles the file).
			if peak > written*2/5 || final > written/3 {
				t.Fatalf("raft directory peak %d, final %d bytes after %d written: want at most 2/5 and 1/3", peak, final, written)
			}
			if logSize > 3*bound {
				t.Fatalf("log entries hold %d bytes, want at most %d", logSize, 3*bound)
			}
			// ~63 entries of 64 KiB in 4 MiB; the leader of three keeps
			// what its followers lacked besides (a few in flight).
			if got := n.raft.ReloadableConfig().TrailingLogs; got < 56 || (c.nodes == 1 && got > 66) || got > 256 {
				t.Fatalf("raft's trailing logs %d, want the ~63 entries of 64 KiB in 4 MiB", got)
			}
			if c.store != LogStoreWAL || c.nodes > 1 {
				return
			}
			// A restart estimates the sizes of the entries it finds.
			if err := n.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			n = tc.restart(n.ID())
			if got, _ := n.retention.size(); got < logSize/2 || got > logSize*2 {
				t.Fatalf("after a restart the log counts %d bytes, before %d", got, logSize)
			}
		})
	}
}

// TestFollowerLag: the leader counts the entries a live follower lacks
// (so log compaction keeps them), and stops counting a follower that has
// not answered for followerLiveWindow.
func TestFollowerLag(t *testing.T) {
	var offset atomic.Int64 // added to the nodes' clock
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, func(cfg *Config) { cfg.Now = now })
	leader := tc.leader()
	for i := range 5 {
		put(t, tc.kv(leader), fmt.Sprintf("a%d", i), "v")
	}
	waitFor(t, 5*time.Second, "followers caught up", func() bool { return leader.followerLag() == 0 })
	down := otherThan(nodes, leader)
	if err := down.kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		put(t, tc.kv(leader), fmt.Sprintf("b%d", i), "v")
	}
	if lag := leader.followerLag(); lag < 100 {
		t.Fatalf("a follower stopped 100 writes ago: lag %d", lag)
	}
	offset.Store(int64(followerLiveWindow + time.Second))
	if lag := leader.followerLag(); lag != 0 {
		t.Fatalf("a follower silent for longer than %v still holds back %d entries", followerLiveWindow, lag)
	}
}

var retentionMeasure = flag.String("cluster.retention-measure", "", "TestRetentionDiskRatio: bytes of 64 KiB values to load (e.g. 1GiB); empty skips it")

// TestRetentionDiskRatio measures the data directory against the engine
// for 64 KiB random values loaded through one node, with the defaults and
// with the entry-only retention and 64 MiB segments of before:
//
//	go test -count=1 -run TestRetentionDiskRatio -cluster.retention-measure 1GiB -timeout 1h ./cluster/
func TestRetentionDiskRatio(t *testing.T) {
	if *retentionMeasure == "" {
		t.Skip("set -cluster.retention-measure")
	}
	var size int64
	var unit string
	if _, err := fmt.Sscanf(*retentionMeasure, "%d%s", &size, &unit); err != nil {
		t.Fatalf("-cluster.retention-measure %q: %v", *retentionMeasure, err)
	}
	switch unit {
	case "MiB":
		size <<= 20
	case "GiB":
		size <<= 30
	default:
		t.Fatalf("-cluster.retention-measure %q: use MiB or GiB", *retentionMeasure)
	}
	const valueSize = 64 << 10
	for _, c := range []struct {
		name string
		tune func(*Config)
	}{
		{"before (entries only, 64 MiB segments)", func(cfg *Config) {
			cfg.TrailingLogBytes, cfg.SnapshotThresholdBytes, cfg.RaftWALSegmentSize = -1, -1, 64<<20
		}},
		{"after (defaults)", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := newTestCluster(t)
			n := tc.formCluster(1, func(cfg *Config) {
				cfg.RequestTimeout = 30 * time.Second
				if c.tune != nil {
					c.tune(cfg)
				}
			})[0]
			dataDir := tc.cfgs[n.ID()].DataDir
			empty := dirBytes(t, filepath.Join(dataDir, raftDirName))
			kv := tc.kv(n)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const clients = 16
			errs := make(chan error, clients)
			per := size / valueSize / clients
			for w := range clients {
				go func() {
					value := make([]byte, valueSize)
					var err error
					for i := range per {
						crand.Read(value)
						req := &cairnpb.PutRequest{Key: fmt.Appendf(nil, "w%02d-%08d", w, i), Value: value}
						for try := 0; try < 20; try++ {
							if _, err = kv.Put(ctx, req); err == nil || !retryable(err) {
								break
							}
							time.Sleep(50 * time.Millisecond)
						}
						if err != nil {
							break
						}
					}
					errs <- err
				}()
			}
			var peakRatio float64 // over the second half of the load
			var peakRaft int64
			var samples int
			done := 0
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			measure := func() (raftB, engineB, snapB int64) {
				raftB = dirBytes(t, filepath.Join(dataDir, raftDirName))
				engineB = dirBytes(t, filepath.Join(dataDir, fsmDirName, "engine"))
				if n.snapStore != nil {
					if _, pinned, _, err := n.snapStore.Pinned(filepath.Join(dataDir, fsmDirName, "engine")); err == nil {
						snapB = pinned
					}
				}
				return
			}
			for done < clients {
				select {
				case err := <-errs:
					if err != nil {
						t.Fatal(err)
					}
					done++
				case <-tick.C:
					r, e, _ := measure()
					peakRaft = max(peakRaft, r)
					if e >= size/2 { // ratios of a nearly empty engine mean little
						peakRatio = max(peakRatio, float64(r+e)/float64(e))
						samples++
					}
				}
			}
			time.Sleep(5 * time.Second) // let the retention loop and compactions settle
			r, e, s := measure()
			t.Logf("%s: loaded %d MiB; empty raft dir %.1f MiB; raft dir peak %.1f MiB; final raft %.1f MiB, engine %.1f MiB, snapshots' own %.1f MiB; "+
				"(raft+engine)/engine final %.3f, peak %.3f over the %d samples of the second half; (raft+engine+snapshots)/engine %.3f",
				c.name, size>>20, mib(empty), mib(peakRaft), mib(r), mib(e), mib(s), float64(r+e)/float64(e), peakRatio, samples, float64(r+e+s)/float64(e))
			// What raft's own check would do next: a snapshot, and a log
			// compaction down to the trailing entries.
			if _, _, err := n.Snapshot(ctxTimeout(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			r, e, s = measure()
			t.Logf("%s: after a snapshot: raft %.1f MiB, engine %.1f MiB, snapshots' own %.1f MiB; (raft+engine)/engine %.3f",
				c.name, mib(r), mib(e), mib(s), float64(r+e)/float64(e))
		})
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
