package fsm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/raft"
)

// TestMeasurePutLatencyDuringSnapshot measures what a snapshot costs the
// puts applied meanwhile (bench/RESULTS.md, "Snapshots without an apply
// stall"). It runs only with CAIRN_SNAPSTALL=1:
//
//	CAIRN_SNAPSTALL=1 [CAIRN_SNAPSTALL_MB=1024] [CAIRN_SNAPSTALL_ROUNDS=5] \
//	  [CAIRN_SNAPSTALL_MEMTABLE_MB=16] [CAIRN_SNAPSTALL_VALUE=256] [CAIRN_SNAPSTALL_EVERY_S=2] \
//	  go test -count=1 -v -timeout 30m -run TestMeasurePutLatencyDuringSnapshot ./fsm/
//
// An FSM with default options (but the engine's MemTableSizeBytes) on the
// OS file system (in TMPDIR) is filled with CAIRN_SNAPSTALL_MB of 1 KiB
// values, then 16 clients put values of CAIRN_SNAPSTALL_VALUE bytes
// (overwrites of random keys, client sessions), each waiting for its put,
// through one apply goroutine that applies whatever is queued (up to 64
// puts) per ApplyBatch, as raft does. Every CAIRN_SNAPSTALL_EVERY_S it
// takes a snapshot,
// alternately as a backup does (FSM.Checkpoint from another goroutine) and
// as raft does (FSM.Snapshot on the apply goroutine, then Persist into a
// CheckpointSink on another). It reports, per kind, the put latency (p99,
// p99.9, max) and throughput over each snapshot's window (from its start
// to 1 s after, or to its end if later) against the 1 s before it, and the
// size of the checkpoint's own table (the memtables' entries as of the
// capture, when their flush also took later ones).
func TestMeasurePutLatencyDuringSnapshot(t *testing.T) {
	if os.Getenv("CAIRN_SNAPSTALL") != "1" {
		t.Skip("set CAIRN_SNAPSTALL=1 to run")
	}
	mb := envInt("CAIRN_SNAPSTALL_MB", 1024)
	rounds := envInt("CAIRN_SNAPSTALL_ROUNDS", 5)
	valueSize := envInt("CAIRN_SNAPSTALL_VALUE", 256)
	every := time.Duration(envInt("CAIRN_SNAPSTALL_EVERY_S", 2)) * time.Second
	o := &Options{Engine: &lsm.Options{MemTableSizeBytes: int64(envInt("CAIRN_SNAPSTALL_MEMTABLE_MB", 16)) << 20}}
	dir := t.TempDir()
	f := openTest(t, nil, dir, o)
	// ownBytes is the size of a checkpoint's own table (lsm.PreparedCheckpoint
	// numbers it just below its manifest). Before this change checkpoints
	// had none; there the rule may name the table their flush wrote.
	ownBytes := func(c *Checkpoint) uint64 {
		files := c.FileSizes()
		for _, fi := range files {
			var m int
			if _, err := fmt.Sscanf(fi.Name, "MANIFEST-%d", &m); err != nil {
				continue
			}
			for _, t := range files {
				if t.Name == fmt.Sprintf("%06d.sst", m-1) {
					return t.Size
				}
			}
		}
		return 0
	}

	// Fill.
	g := newLogGen()
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 1024)
	nKeys := mb << 10
	start := time.Now()
	for i := 0; i < nKeys; i += 256 {
		batch := make([]*raft.Log, 0, 256)
		for j := i; j < min(i+256, nKeys); j++ {
			for k := range value {
				value[k] = byte(rng.Uint32())
			}
			batch = append(batch, g.cmd(t, &cairnpb.PutRequest{Key: fmt.Appendf(nil, "key-%010d", j), Value: value}))
		}
		f.ApplyBatch(batch)
	}
	t.Logf("filled %d MiB in %v", mb, time.Since(start))
	time.Sleep(5 * time.Second) // let compactions settle

	// Load: 16 clients, one apply goroutine.
	type req struct {
		l    *raft.Log
		done chan struct{}
	}
	queue := make(chan req, 1024)
	var stop atomic.Bool
	type snapReply struct {
		s    raft.FSMSnapshot
		call time.Duration
	}
	snapReq := make(chan chan snapReply)
	var applyWG sync.WaitGroup
	applyWG.Add(1)
	var gmu sync.Mutex // logGen is not safe for concurrent use
	go func() {
		defer applyWG.Done()
		for {
			var batch []req
			select {
			case r, ok := <-queue:
				if !ok {
					return
				}
				batch = append(batch, r)
			case ch := <-snapReq:
				// raft calls Snapshot between batches, on this goroutine.
				t0 := time.Now()
				s, err := f.Snapshot()
				if err != nil {
					t.Error(err)
				}
				ch <- snapReply{s, time.Since(t0)}
				continue
			}
		fill:
			for len(batch) < 64 {
				select {
				case r := <-queue:
					batch = append(batch, r)
				default:
					break fill
				}
			}
			logs := make([]*raft.Log, len(batch))
			gmu.Lock()
			for i, r := range batch {
				r.l.Index, r.l.Term = g.index+1, g.term
				g.index++
				logs[i] = r.l
			}
			gmu.Unlock()
			for i, res := range f.ApplyBatch(logs) {
				if err, ok := res.(error); ok {
					t.Error(err)
				}
				close(batch[i].done)
			}
		}
	}()
	type sample struct {
		end time.Time
		lat time.Duration
	}
	const clients = 16
	samples := make([][]sample, clients)
	var clientWG sync.WaitGroup
	for c := range clients {
		clientWG.Add(1)
		go func() {
			defer clientWG.Done()
			crng := rand.New(rand.NewPCG(uint64(c), 3))
			v := make([]byte, valueSize)
			for seq := uint64(1); !stop.Load(); seq++ {
				for k := range v {
					v[k] = byte(crng.Uint32())
				}
				cmd, err := NewCommand(&cairnpb.PutRequest{
					Key: fmt.Appendf(nil, "key-%010d", crng.IntN(nKeys)), Value: v,
					ClientId: fmt.Sprintf("client-%d", c), Seq: seq,
				})
				if err != nil {
					t.Error(err)
					return
				}
				data, err := Encode(cmd)
				if err != nil {
					t.Error(err)
					return
				}
				gmu.Lock()
				now := g.now
				gmu.Unlock()
				r := req{l: &raft.Log{Type: raft.LogCommand, Data: data, AppendedAt: now}, done: make(chan struct{})}
				t0 := time.Now()
				queue <- r
				<-r.done
				t1 := time.Now()
				samples[c] = append(samples[c], sample{t1, t1.Sub(t0)})
			}
		}()
	}

	type snapRun struct {
		kind       string
		start, end time.Time
		call       time.Duration // the Snapshot call on the apply goroutine
		own        uint64        // bytes of the checkpoint's own table
	}
	var runs []snapRun
	time.Sleep(3 * time.Second)
	for i := range 2 * rounds {
		time.Sleep(every)
		r := snapRun{start: time.Now()}
		if i%2 == 0 {
			r.kind = "backup (FSM.Checkpoint)"
			c, err := f.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			r.end = time.Now()
			r.own = ownBytes(c)
			c.Release()
		} else {
			r.kind = "raft snapshot (Snapshot + Persist)"
			ch := make(chan snapReply)
			snapReq <- ch
			reply := <-ch
			s := reply.s
			r.call = reply.call
			sink := &nullCheckpointSink{own: ownBytes}
			if err := s.Persist(sink); err != nil {
				t.Fatal(err)
			}
			r.end = time.Now()
			r.own = sink.ownBytes
			s.Release()
		}
		runs = append(runs, r)
	}
	time.Sleep(1500 * time.Millisecond)
	stop.Store(true)
	clientWG.Wait()
	close(queue)
	applyWG.Wait()

	var all []sample
	for _, s := range samples {
		all = append(all, s...)
	}
	window := func(from, to time.Time, straddling bool) (lats []time.Duration) {
		for _, s := range all {
			// Completed within, or (straddling) started before the
			// end and completed after it: a put the window stalled.
			if s.end.After(from) && (s.end.Before(to) || straddling && s.end.Add(-s.lat).Before(to)) {
				lats = append(lats, s.lat)
			}
		}
		slices.Sort(lats)
		return lats
	}
	pct := func(l []time.Duration, p float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[min(len(l)-1, int(p*float64(len(l))))]
	}
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	t.Logf("%-36s %9s %9s %9s %9s %9s %9s %9s | before: %7s %7s %7s %9s", "snapshot", "took ms", "call ms", "own MiB", "p99", "p99.9", "max", "puts/s", "p99", "p99.9", "max", "puts/s")
	for _, r := range runs {
		to := r.end
		if to.Sub(r.start) < time.Second {
			to = r.start.Add(time.Second)
		}
		during := window(r.start, to, true)
		before := window(r.start.Add(-time.Second), r.start, false)
		t.Logf("%-36s %9s %9s %9.1f %9s %9s %9s %9.0f | before: %7s %7s %7s %9.0f", r.kind, ms(r.end.Sub(r.start)), ms(r.call), float64(r.own)/(1<<20),
			ms(pct(during, 0.99)), ms(pct(during, 0.999)), ms(pct(during, 1)), float64(len(during))/to.Sub(r.start).Seconds(),
			ms(pct(before, 0.99)), ms(pct(before, 0.999)), ms(pct(before, 1)), float64(len(before)))
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// nullCheckpointSink adopts a checkpoint without keeping it (a snapshot
// store's AdoptCheckpoint hard-links the files: cheap, and not the
// subject here).
type nullCheckpointSink struct {
	memSink
	own      func(*Checkpoint) uint64
	ownBytes uint64
}

func (s *nullCheckpointSink) AdoptCheckpoint(c *Checkpoint) error {
	s.ownBytes = s.own(c)
	return nil
}
