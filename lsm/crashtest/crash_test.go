package crashtest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm"
)

const (
	// childDirEnv, when set, makes the test binary run as the child: it
	// opens the DB in that directory and runs the round's workload.
	childDirEnv = "CAIRN_CRASH_CHILD"
	// childSeedEnv is the round's seed.
	childSeedEnv = "CAIRN_CRASH_SEED"
	// childMinBlobEnv is the child's MinBlobSize (key-value separation).
	childMinBlobEnv = "CAIRN_CRASH_MIN_BLOB"
	// childWALBufferedEnv, when "1", sets Options.WALBufferedWrites
	// (TestKill9WALBuffered).
	childWALBufferedEnv = "CAIRN_CRASH_WAL_BUFFERED"
	// maxChildOps bounds a child that is never killed.
	maxChildOps = 200000
)

var (
	flagRounds = flag.Int("rounds", 20, "kill -9 rounds")
	flagSeed   = flag.Uint64("seed", 0, "base seed (0: random); round r uses seed+r")
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		os.Exit(childMain(dir, os.Getenv(childSeedEnv)))
	}
	os.Exit(m.Run())
}

// options are the DB options of both the child and the parent: small
// memtables, files and levels, so that flushes and compactions are running
// at most moments of a kill.
//
// With CAIRN_CRASH_MIN_BLOB set (TestKill9Blob), values of at least that
// many bytes are separated into blob files, so kills also land in blob file
// writes, syncs and deletions.
//
// With CAIRN_CRASH_WAL_BUFFERED=1 (TestKill9WALBuffered), the WAL is
// buffered in memory and written in the background.
func options() *lsm.Options {
	minBlob, _ := strconv.Atoi(os.Getenv(childMinBlobEnv))
	return &lsm.Options{
		WALBufferedWrites:       walBuffered(),
		MinBlobSize:             minBlob,
		BlobTargetFileSizeBytes: 32 << 10,
		// Blob GC as eagerly as it goes, unthrottled, so that kills land
		// in its copies, index commits and retirements too.
		BlobGCDiscardRatio:    0.1,
		BlobMaxSpaceAmp:       1.05,
		BlobGCBytesPerSec:     -1,
		MemTableSizeBytes:     64 << 10,
		L0CompactionThreshold: 2,
		TargetFileSizeBytes:   16 << 10,
		LBaseMaxBytes:         128 << 10,
		BlockSizeBytes:        1 << 10,
		Compression:           lsm.SnappyCompression,
		// Compactions run side by side once they fall behind, so that
		// kills land between their installs too.
		MaxConcurrentCompactions: 3,
	}
}

// childMain is the child process: it opens the DB, prints "ready", then
// runs the workload, printing "ack i" after op i returns and "compact i"
// before a compaction starts. It prints "done" if it runs out of ops.
func childMain(dir, seedStr string) int {
	seed, err := strconv.ParseUint(seedStr, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child: bad seed %q: %v\n", seedStr, err)
		return 2
	}
	opts := options()
	// Odd seeds leave blob GC to the background job alone, so that kills
	// land in its copies, index commits and retirements; even seeds let
	// compactions relocate blob records too (lsm/blob_relocate.go).
	opts.DisableBlobCompactionGC = seed%2 == 1
	db, err := lsm.Open(dir, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child: Open: %v\n", err)
		return 2
	}
	out := os.Stdout // unbuffered: each line is one write(2)
	fmt.Fprintln(out, "ready")
	w := newWorkload(seed)
	for i := 0; i < maxChildOps; i++ {
		o := w.next()
		if o.kind == opCompact {
			fmt.Fprintf(out, "compact %d\n", i)
		}
		if err := apply(db, o); err != nil {
			fmt.Fprintf(os.Stderr, "child: op %d %s: %v\n", i, o, err)
			return 2
		}
		fmt.Fprintf(out, "ack %d\n", i)
		if i%16 == 0 && options().MinBlobSize > 0 {
			m := db.Metrics().Blob
			fmt.Fprintf(out, "gcbytes %d\n", m.GCBytesWritten)
			fmt.Fprintf(out, "relocbytes %d\n", m.RelocatedBytesWritten)
		}
	}
	if err := db.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "child: Close: %v\n", err)
		return 2
	}
	fmt.Fprintln(out, "done")
	return 0
}

// childRun is what the parent learned from one child.
type childRun struct {
	ready   bool
	lastAck int // -1: none
	done    bool
	killed  bool
	// killedAt describes when the kill was sent.
	killedAt string
	stderr   string
	// gcBytes is the most blob GC bytes the child reported writing,
	// relocBytes the most blob bytes compactions relocated.
	gcBytes, relocBytes int64
}

// runChild starts a child on dir with seed and kills it with SIGKILL
// according to mode: after delay, or as soon as it announces a
// compaction.
func runChild(t *testing.T, dir string, seed uint64, delay time.Duration, atCompaction bool) childRun {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childSeedEnv+"="+strconv.FormatUint(seed, 10))
	if walBuffered() && seed%2 == 0 {
		// One P: the WAL's background writer runs only when the
		// writing goroutine blocks or is preempted, so that kills often
		// find acknowledged bytes still buffered.
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	res := childRun{lastAck: -1}
	kill := func(why string) {
		if !res.killed {
			res.killed = true
			res.killedAt = fmt.Sprintf("%s, %s after start", why, time.Since(start).Round(time.Microsecond))
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	if atCompaction {
		// Fall back to a timed kill if no compaction comes soon.
		timer.Reset(2 * time.Second)
	}
	for done := false; !done; {
		select {
		case <-timer.C:
			kill(fmt.Sprintf("timer (%s)", delay))
		case line, ok := <-lines:
			if !ok {
				done = true
				break
			}
			switch {
			case line == "ready":
				res.ready = true
			case line == "done":
				res.done = true
			case strings.HasPrefix(line, "ack "):
				n, err := strconv.Atoi(line[4:])
				if err != nil || n != res.lastAck+1 {
					cmd.Process.Kill()
					t.Fatalf("child printed %q after ack %d", line, res.lastAck)
				}
				res.lastAck = n
			case strings.HasPrefix(line, "gcbytes "):
				n, _ := strconv.ParseInt(line[8:], 10, 64)
				res.gcBytes = max(res.gcBytes, n)
			case strings.HasPrefix(line, "relocbytes "):
				n, _ := strconv.ParseInt(line[11:], 10, 64)
				res.relocBytes = max(res.relocBytes, n)
			case strings.HasPrefix(line, "compact "):
				if atCompaction {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					kill("at compaction " + line[8:])
				}
			default:
				cmd.Process.Kill()
				t.Fatalf("child printed %q", line)
			}
		}
	}
	err = cmd.Wait()
	res.stderr = stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil && res.done:
	case errors.As(err, &ee) && res.killed:
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child (seed %d) exited with %v, not by SIGKILL; stderr:\n%s", seed, err, res.stderr)
		}
	default:
		t.Fatalf("child (seed %d) exited with %v (killed: %v, done: %v); stderr:\n%s", seed, err, res.killed, res.done, res.stderr)
	}
	return res
}

// contents reads the whole DB with an iterator and checks that Get agrees
// on every key of the key space.
func contents(db *lsm.DB) (map[string][]byte, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	got := make(map[string][]byte)
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
			it.Close()
			return nil, fmt.Errorf("iterator returned %q after %q", it.Key(), prev)
		}
		prev = bytes.Clone(it.Key())
		got[string(it.Key())] = bytes.Clone(it.Value())
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	for i := range numKeys {
		k := key(i)
		v, err := db.Get(k)
		want, ok := got[string(k)]
		switch {
		case err == nil && (!ok || !bytes.Equal(v, want)):
			return nil, fmt.Errorf("Get(%q) = %s but the iterator has %s (present: %v)", k, fmtValue(v), fmtValue(want), ok)
		case errors.Is(err, lsm.ErrNotFound) && ok:
			return nil, fmt.Errorf("Get(%q) = not found but the iterator has %s", k, fmtValue(want))
		case err != nil && !errors.Is(err, lsm.ErrNotFound):
			return nil, fmt.Errorf("Get(%q): %w", k, err)
		}
	}
	return got, nil
}

// preserve copies dir somewhere that outlives the test, for a post-mortem.
func preserve(t *testing.T, dir string) string {
	dst, err := os.MkdirTemp("", "cairn-crashtest-")
	if err != nil {
		return "(could not preserve: " + err.Error() + ")"
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		src, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err == nil {
			io.Copy(out, src)
			out.Close()
		}
		src.Close()
	}
	return dst
}

// TestKill9 runs rounds of: start a child on the same directory, let it
// write (synced and unsynced writes, flushes, compactions), kill it with
// SIGKILL at a random moment, reopen the DB and check that it holds
// exactly the writes acknowledged, plus possibly the one in flight.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes; skipped in -short")
	}
	runKill9(t)
}

// TestKill9Blob is TestKill9 with key-value separation: values of 200
// bytes and more live in blob files.
func TestKill9Blob(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes; skipped in -short")
	}
	t.Setenv(childMinBlobEnv, "200")
	runKill9(t)
}

// TestKill9WALBuffered is TestKill9 with Options.WALBufferedWrites, and its
// weaker guarantee: the recovered state must be the one after the first k
// acknowledged ops, for a k at least the last synced op's (a Sync write or
// a Flush: everything before it is durable) and at most every acknowledged
// op plus the one in flight. A gap (an op lost while a later one survived)
// or a partial batch matches no k.
func TestKill9WALBuffered(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes; skipped in -short")
	}
	t.Setenv(childWALBufferedEnv, "1")
	runKill9(t)
}

func walBuffered() bool { return os.Getenv(childWALBufferedEnv) == "1" }

// durable reports whether, once o is acknowledged, every op before it and o
// itself must survive a crash with Options.WALBufferedWrites.
func durable(o op) bool { return (o.isWrite() && o.sync) || o.kind == opFlush }

// matchPrefix finds the k in [lo, hi] for which the state after the first
// k ops of ops, applied to start, is got; it returns -1 if there is none.
// ops holds at least hi ops.
func matchPrefix(start model, ops []op, lo, hi int, got map[string][]byte) int {
	m := start.clone()
	for i := 0; i < lo; i++ {
		m.apply(ops[i])
	}
	for k := lo; ; k++ {
		if m.equal(got) {
			return k
		}
		if k == hi {
			return -1
		}
		m.apply(ops[k])
	}
}

func runKill9(t *testing.T) {
	base := *flagSeed
	if base == 0 {
		base = rand.Uint64() >> 1
	}
	t.Logf("base seed %d (replay with -seed %d)", base, base)
	rng := rand.New(rand.NewPCG(base, 0x6b696c6c))
	dir := t.TempDir()
	m := make(model) // the DB's state, as of the last verified round
	var acks, inflightApplied, atCompaction, maxBlobFiles int
	// With a buffered WAL: rounds that lost acknowledged ops, and how many.
	var lossRounds, lostOps int
	var gcWritten, relocWritten int64
	for round := 0; round < *flagRounds; round++ {
		seed := base + uint64(round)
		delay := time.Duration(5+rng.IntN(296)) * time.Millisecond
		killAtCompaction := rng.IntN(4) == 0
		res := runChild(t, dir, seed, delay, killAtCompaction)
		if killAtCompaction {
			atCompaction++
		}

		// The states the DB may be in: every acknowledged op applied,
		// and possibly the op in flight at the kill.
		w := newWorkload(seed)
		acked := m.clone()
		for i := 0; i <= res.lastAck; i++ {
			acked.apply(w.next())
		}
		var inflight op
		withInflight := acked
		if res.ready && !res.done {
			inflight = w.next()
			if inflight.isWrite() {
				withInflight = acked.clone()
				withInflight.apply(inflight)
			}
		}

		db, err := lsm.Open(dir, options())
		if err != nil {
			t.Fatalf("round %d (seed %d, %d acks, killed %s): Open after kill -9: %v\nDB preserved at %s",
				round, seed, res.lastAck+1, res.killedAt, err, preserve(t, dir))
		}
		maxBlobFiles = max(maxBlobFiles, db.Metrics().Blob.Files)
		gcWritten += res.gcBytes
		relocWritten += res.relocBytes
		got, err := contents(db)
		if err != nil {
			db.Close()
			t.Fatalf("round %d (seed %d, %d acks, killed %s): reading the recovered DB: %v\nDB preserved at %s",
				round, seed, res.lastAck+1, res.killedAt, err, preserve(t, dir))
		}
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		if walBuffered() {
			// ops[i] is op i of the round; ops[lastAck+1] the one in
			// flight, if any.
			w := newWorkload(seed)
			ops := make([]op, res.lastAck+2)
			lastDurable := -1
			for i := range ops {
				ops[i] = w.next()
				if i <= res.lastAck && durable(ops[i]) {
					lastDurable = i
				}
			}
			hi := res.lastAck + 1
			if res.ready && !res.done && ops[hi].isWrite() {
				hi++
			}
			k := matchPrefix(m, ops, lastDurable+1, hi, got)
			if k < 0 {
				t.Fatalf("round %d (seed %d): after kill -9 (%s) with %d ops acknowledged, the last durable one op %d, the DB holds no prefix of the ops from the durable one to the last acknowledged (plus the op in flight, %s)\n"+
					"against the durable state:\n\t%s\nagainst the acknowledged state:\n\t%s\nDB preserved at %s\nchild stderr:\n%s",
					round, seed, res.killedAt, res.lastAck+1, lastDurable, inflight, matchDiff(m, ops, lastDurable+1, got), acked.diff(got), preserve(t, dir), res.stderr)
			}
			if k <= res.lastAck {
				lossRounds++
				lostOps += res.lastAck + 1 - k
			} else if k > res.lastAck+1 {
				inflightApplied++
			}
			m = m.clone()
			for i := 0; i < k; i++ {
				m.apply(ops[i])
			}
			acks += res.lastAck + 1
			continue
		}
		switch {
		case acked.diff(got) == "":
			m = acked
		case withInflight.diff(got) == "":
			m = withInflight
			inflightApplied++
		default:
			t.Fatalf("round %d (seed %d): after kill -9 (%s) with %d ops acknowledged (last ready=%v), the DB holds neither the acknowledged state nor that plus the op in flight (%s)\n"+
				"against the acknowledged state:\n\t%s\nagainst it plus the op in flight:\n\t%s\nDB preserved at %s\nchild stderr:\n%s",
				round, seed, res.killedAt, res.lastAck+1, res.ready, inflight, acked.diff(got), withInflight.diff(got), preserve(t, dir), res.stderr)
		}
		acks += res.lastAck + 1
	}
	t.Logf("%d rounds (%d killed at a compaction), %d ops acknowledged, in-flight op recovered %d times; %d keys at the end",
		*flagRounds, atCompaction, acks, inflightApplied, len(m))
	if walBuffered() {
		t.Logf("buffered WAL: %d rounds lost acknowledged unsynced ops (%d ops in all)", lossRounds, lostOps)
	}
	if acks == 0 {
		t.Fatal("no child acknowledged any op: the test checked nothing")
	}
	if options().MinBlobSize > 0 {
		if maxBlobFiles == 0 {
			t.Fatal("key-value separation on, but no recovered DB had a blob file")
		}
		t.Logf("blob GC: children reported %d bytes rewritten by the GC job, %d relocated by compactions", gcWritten, relocWritten)
		if gcWritten == 0 {
			t.Fatal("no child ran blob GC: kills never hit it")
		}
		if relocWritten == 0 {
			t.Fatal("no child's compactions relocated blob records: kills never hit it")
		}
	}
}

// matchDiff describes how got differs from the state after the first lo
// ops of ops applied to start (matchPrefix found no match).
func matchDiff(start model, ops []op, lo int, got map[string][]byte) string {
	m := start.clone()
	for i := 0; i < lo; i++ {
		m.apply(ops[i])
	}
	return m.diff(got)
}
