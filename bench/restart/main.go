// Command restart measures how long a cairn node takes to restart as a
// function of the data it holds. Because the state machine restarts from
// its own durable applied index (raft's NoSnapshotRestoreOnStart; see
// fsm/doc.go), a restart must not re-ingest a snapshot: its time should
// grow with the unflushed tail, not with the data size.
//
//	go run ./bench/restart [-sizes 10MiB,1GiB] [-value-size 65536] [-restarts 5] [-retain 1,2]
//
// For each size it starts a single-node cluster in a temporary directory,
// loads that many bytes of values through the gRPC API, takes a raft
// snapshot (so the raft log is truncated, as on a long-running node),
// writes a small tail after it, shuts the node down gracefully, and then
// restarts it -restarts times, timing Start until a linearizable read is
// served. It prints the median and the range.
//
// Disk use: while the node loads, snapshots and writes its tail, a
// sampler measures every 200 ms the data directory (each inode once:
// snapshots are hard links to engine files) against the live engine plus
// the raft log, and the report gives the maximum and the final ratio
// (the [ops] goal is <= 1.3x). What exceeds 1.0 is the engine files that
// retained snapshots keep after compaction replaced them. -retain runs
// each size once per number of retained snapshots (default: the node's
// default), interleaved.
package main

import (
	"context"
	crand "crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/lsm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	sizes          = flag.String("sizes", "10MiB,1GiB", "data sizes to measure, comma-separated")
	valueSize      = flag.Int("value-size", 64<<10, "value size in bytes")
	restarts       = flag.Int("restarts", 5, "restarts timed per size")
	clients        = flag.Int("clients", 32, "concurrent loaders")
	tail           = flag.Int("tail", 1000, "writes after the snapshot (the log tail replayed at restart)")
	random         = flag.Bool("random", false, "incompressible (random) values instead of a repeating pattern")
	retain         = flag.String("retain", "", "snapshots retained (cluster.Config.SnapshotRetain), comma-separated; each size runs once per value (default: the node's default)")
	settle         = flag.Duration("settle", 30*time.Second, "how long the node keeps running (compacting) after the tail, disk use sampled, before the restarts")
	sampleInterval = flag.Duration("sample-interval", 200*time.Millisecond, "how often the disk use is sampled")
	samplesOut     = flag.String("samples-out", "", "if set, write every disk use sample to this file (tab-separated: size, retain, seconds, total, engine, raft log, snapshots only)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench/restart: %v\n", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func run() error {
	fmt.Printf("cairn single-node restart time: %d-byte values, %d tail writes after the snapshot, %d restarts per size\n",
		*valueSize, *tail, *restarts)
	retains := []int{0}
	if *retain != "" {
		retains = nil
		for _, r := range strings.Split(*retain, ",") {
			v, err := strconv.Atoi(r)
			if err != nil || v < 1 {
				return fmt.Errorf("bad -retain %q", r)
			}
			retains = append(retains, v)
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		size, err := parseSize(s)
		if err != nil {
			return fmt.Errorf("bad size %q: %v", s, err)
		}
		for _, r := range retains {
			if err := measure(s, size, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func config(dir string, retain int) cluster.Config {
	return cluster.Config{
		ID:              "r1",
		DataDir:         dir,
		GRPCAddr:        "127.0.0.1:0",
		RaftAddr:        "127.0.0.1:0",
		GossipAddr:      "127.0.0.1:0",
		BootstrapExpect: 1,
		SnapshotRetain:  retain,
		Logger:          slog.New(slog.DiscardHandler),
		Engine:          &lsm.Options{EventListener: &lsm.EventListener{CompactionInstalled: compactions.record}},
	}
}

// compactionLog records the engine's compactions: what one compaction
// replaces at once is what a snapshot taken before it pins until it is
// refreshed.
type compactionLog struct {
	mu      sync.Mutex
	entries []compactionEntry
}

type compactionEntry struct {
	at       time.Time
	from, to int
	inputs   int64
}

var compactions compactionLog

func (l *compactionLog) record(info lsm.CompactionInfo) {
	e := compactionEntry{at: time.Now(), from: info.StartLevel, to: info.OutputLevel}
	for _, t := range info.Inputs {
		e.inputs += t.Size
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

func (l *compactionLog) reset() {
	l.mu.Lock()
	l.entries = nil
	l.mu.Unlock()
}

// largest describes the compaction that replaced the most after since,
// with times relative to start.
func (l *compactionLog) largest(start, since time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best compactionEntry
	for _, e := range l.entries {
		if !e.at.Before(since) && e.inputs > best.inputs {
			best = e
		}
	}
	if best.inputs == 0 {
		return "none"
	}
	return fmt.Sprintf("L%d→L%d of %.1f MiB at %.1fs", best.from, best.to, mib(best.inputs), best.at.Sub(start).Seconds())
}

// startReady starts a node on dir and waits until it serves a
// linearizable read; it returns the node and the time that took.
func startReady(dir string, retain int) (*cluster.Node, time.Duration, error) {
	start := time.Now()
	n, err := cluster.New(config(dir, retain), nil)
	if err != nil {
		return nil, 0, err
	}
	if err := n.Start(); err != nil {
		return nil, 0, err
	}
	c, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		_, err := cairnpb.NewKVClient(c).Get(ctx, &cairnpb.GetRequest{Key: []byte("probe")})
		if err == nil {
			return n, time.Since(start), nil
		}
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("node not ready: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func load(n *cluster.Node, bytes int64, prefix string) error {
	c, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		return err
	}
	defer c.Close()
	kv := cairnpb.NewKVClient(c)
	value := make([]byte, *valueSize)
	for i := range value {
		value[i] = byte(i * 7)
	}
	if *random {
		crand.Read(value)
	}
	count := bytes / int64(*valueSize)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *clients)
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= count {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte(fmt.Sprintf("%s%012d", prefix, i)), Value: value})
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// dirSize is the disk use of the files under dir, each inode counted once
// (snapshots may be hard links to engine files).
func dirSize(dir string) int64 {
	var total int64
	seen := map[uint64]bool{}
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += info.Size()
		return nil
	})
	return total
}

// usage is one measurement of a data directory's disk use.
type usage struct {
	at                     time.Duration // since the node started
	total, engine, raftLog int64
	// snapshots is what only the snapshots hold (tables the engine
	// replaced, their own manifests): the part of total beyond the
	// engine and the raft log.
	snapshots int64
}

func (u usage) ratio() float64 { return float64(u.total) / float64(u.engine+u.raftLog) }

// measureUsage walks dir once (so that the three figures are of one
// moment, as far as a walk is) and counts each inode once: engine is the
// files under fsm/engine, raftLog those under raft/ but not
// raft/snapshots (old-style snapshots), total everything, snapshots'
// hard links to engine files included once.
func measureUsage(dir string) usage {
	type file struct {
		size                    int64
		inEngine, inLog, inSnap bool
	}
	files := map[uint64]*file{}
	var u usage
	engineDir := filepath.Join(dir, "fsm", "engine") + string(filepath.Separator)
	raftDir := filepath.Join(dir, "raft") + string(filepath.Separator)
	oldSnaps := filepath.Join(dir, "raft", "snapshots") + string(filepath.Separator)
	snaps := filepath.Join(dir, "snapshots") + string(filepath.Separator)
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		f := files[st.Ino]
		if f == nil {
			f = &file{size: info.Size()}
			files[st.Ino] = f
		}
		switch {
		case strings.HasPrefix(path, engineDir):
			f.inEngine = true
		case strings.HasPrefix(path, raftDir) && !strings.HasPrefix(path, oldSnaps):
			f.inLog = true
		case strings.HasPrefix(path, snaps):
			f.inSnap = true
		}
		return nil
	})
	for _, f := range files {
		u.total += f.size
		switch {
		case f.inEngine:
			u.engine += f.size
		case f.inLog:
			u.raftLog += f.size
		case f.inSnap:
			u.snapshots += f.size
		}
	}
	return u
}

// sampler measures a data directory's disk use periodically.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []usage
}

func startSampler(dir string, start time.Time) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(*sampleInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			u := measureUsage(dir)
			u.at = time.Since(start)
			if u.engine+u.raftLog > 0 {
				s.samples = append(s.samples, u)
			}
		}
	}()
	return s
}

// finish stops the sampler and returns the sample of highest ratio and
// how long the ratio was above limit (each sample standing for the time
// until the next).
func (s *sampler) finish(limit float64) (usage, int, time.Duration) {
	close(s.stop)
	<-s.done
	var worst usage
	var above time.Duration
	for i, u := range s.samples {
		if worst.total == 0 || u.ratio() > worst.ratio() {
			worst = u
		}
		if u.ratio() > limit && i+1 < len(s.samples) {
			above += s.samples[i+1].at - u.at
		}
	}
	return worst, len(s.samples), above
}

func measure(label string, size int64, retain int) error {
	dir, err := os.MkdirTemp("", "cairn-restart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	compactions.reset()
	started := time.Now()
	n, _, err := startReady(dir, retain)
	if err != nil {
		return err
	}
	smp := startSampler(dir, started)
	loadStart := time.Now()
	if err := load(n, size, "data/"); err != nil {
		return err
	}
	loadTime := time.Since(loadStart)
	// Two snapshots (the default retains two), the first of the loaded
	// data, the second after a small tail, then the tail replayed at
	// restart.
	var snapTimes []time.Duration
	snapsStart := time.Now()
	for i := range 2 {
		snapStart := time.Now()
		if _, _, err := n.Snapshot(context.Background()); err != nil {
			return fmt.Errorf("snapshot: %v", err)
		}
		snapTimes = append(snapTimes, time.Since(snapStart))
		saved := *valueSize
		*valueSize = 256
		err = load(n, int64(*tail)*256, fmt.Sprintf("tail%d/", i))
		*valueSize = saved
		if err != nil {
			return err
		}
	}
	// Compaction of the load goes on after the snapshots and replaces
	// files they hold: what they pin grows while the node runs.
	time.Sleep(*settle)
	if err := n.Shutdown(context.Background()); err != nil {
		return err
	}
	worst, nSamples, above := smp.finish(1.3)
	largestAll, largestAfter := compactions.largest(started, started), compactions.largest(started, snapsStart)
	end := measureUsage(dir)
	end.at = time.Since(started)
	if worst.total == 0 || end.ratio() > worst.ratio() {
		worst = end
	}
	onDisk, engine, raftLog := end.total, end.engine, end.raftLog
	var times []time.Duration
	for range *restarts {
		n, d, err := startReady(dir, retain)
		if err != nil {
			return err
		}
		times = append(times, d)
		if err := n.Shutdown(context.Background()); err != nil {
			return err
		}
	}
	slices.Sort(times)
	retained := "default"
	if retain > 0 {
		retained = strconv.Itoa(retain)
	}
	fmt.Printf("%-8s retain %-7s disk / (engine + raft log): max %.2fx at %.1fs (%.1f MiB: engine %.1f, raft log %.1f, snapshots only %.1f), above 1.3x for %.1fs of %.1fs, at end %.2fx; %d samples\n",
		label, retained, worst.ratio(), worst.at.Seconds(), mib(worst.total), mib(worst.engine), mib(worst.raftLog), mib(worst.snapshots),
		above.Seconds(), end.at.Seconds(), end.ratio(), nSamples)
	fmt.Printf("%-8s retain %-7s largest compaction (inputs replaced): %s; after the first snapshot: %s\n",
		label, retained, largestAll, largestAfter)
	if *samplesOut != "" {
		if err := writeSamples(*samplesOut, label, retained, smp.samples); err != nil {
			return err
		}
	}
	fmt.Printf("%-8s loaded in %6.1fs; snapshots took %.1fms, %.1fms; on disk %.1f MiB (engine %.1f MiB, raft log %.1f MiB: %.2fx engine+raft log); restart median %7.1fms (min %.1fms, max %.1fms)\n",
		label, loadTime.Seconds(), ms(snapTimes[0]), ms(snapTimes[1]),
		float64(onDisk)/(1<<20), float64(engine)/(1<<20), float64(raftLog)/(1<<20),
		float64(onDisk)/float64(engine+raftLog),
		ms(times[len(times)/2]), ms(times[0]), ms(times[len(times)-1]))
	return nil
}

// writeSamples appends samples to the file name, one line each.
func writeSamples(name, label, retained string, samples []usage) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, u := range samples {
		fmt.Fprintf(f, "%s\t%s\t%.3f\t%d\t%d\t%d\t%d\n", label, retained, u.at.Seconds(), u.total, u.engine, u.raftLog, u.snapshots)
	}
	return f.Close()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
