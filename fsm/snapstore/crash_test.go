package snapstore

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// The kill -9 tests run the test binary as a child (childModeEnv set) that
// takes, receives or restores snapshots in a loop, printing a line after
// each one returns; the parent kills it at a random moment and checks what
// a restart finds.
const (
	childModeEnv = "CAIRN_SNAPSTORE_CHILD"
	childDirEnv  = "CAIRN_SNAPSTORE_DIR"
)

var (
	flagRounds = flag.Int("rounds", 6, "kill -9 rounds per crash test")
	flagSeed   = flag.Uint64("seed", 0, "seed of the kill timing (0: random)")
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(childMain(mode, os.Getenv(childDirEnv)))
	}
	os.Exit(m.Run())
}

// childMain runs a crash test's workload in base until killed.
//
//	create:   put a batch into base/fsm, snapshot it into base/snaps,
//	          print "ack <id> <index>"
//	transfer: put a batch into base/leader, print "sum <index> <checksum>",
//	          snapshot it, send the snapshot into base/follower, print
//	          "recv <id>", restore base/replica from it, print
//	          "ack <id> <index>"
func childMain(mode, base string) int {
	t := &childT{}
	defer func() {
		if r := recover(); r != nil && r != t {
			panic(r)
		}
	}()
	switch mode {
	case "create":
		s := openStore(t, filepath.Join(base, "snaps"), 2)
		f := openFSM(t, filepath.Join(base, "fsm"), nil)
		fmt.Println("ready")
		for i := 0; i < 1000; i++ {
			f.put(t, fmt.Sprintf("c%04d", i), 200, 100)
			id := snapshot(t, s, f)
			fmt.Printf("ack %s %d\n", id, f.index)
		}
	case "transfer":
		leader := openFSM(t, filepath.Join(base, "leader"), nil)
		ls := openStore(t, filepath.Join(base, "leader-snaps"), 2)
		follower := openStore(t, filepath.Join(base, "follower"), 2)
		replica := openFSM(t, filepath.Join(base, "replica"), follower)
		fmt.Println("ready")
		for i := 0; i < 1000; i++ {
			leader.put(t, fmt.Sprintf("l%04d", i), 1000, 400)
			fmt.Printf("sum %d %x\n", leader.index, checksum(t, leader.FSM))
			id := transfer(t, ls, follower, snapshot(t, ls, leader))
			fmt.Printf("recv %s\n", id)
			restore(t, follower, replica, id)
			fmt.Printf("ack %s %d\n", id, replica.AppliedIndex())
		}
	default:
		return 2
	}
	return 0
}

// childT is the testing.TB of the child: a failure exits with status 3.
type childT struct{ testing.TB }

func (*childT) Helper()        {}
func (*childT) Cleanup(func()) {}
func (c *childT) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(3)
}
func (c *childT) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(3)
}

// runAndKill starts the child in mode, waits for it to acknowledge a random
// number of operations, kills it with SIGKILL a random moment later, and
// returns every line it printed.
func runAndKill(t *testing.T, rng *rand.Rand, mode, base string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDirEnv+"="+base)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	acks, wantAcks := 0, rng.IntN(4)
	deadline := time.After(60 * time.Second)
	for acks <= wantAcks {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early: %v (lines %q)", cmd.Wait(), got)
			}
			got = append(got, l)
			if strings.HasPrefix(l, "ack ") {
				acks++
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("child made no progress; lines %q", got)
		}
	}
	time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		got = append(got, l)
	}
	cmd.Wait()
	return got
}

// lastAck returns the snapshot ID and index of the last "ack" line.
func lastAck(t *testing.T, lines []string) (string, uint64) {
	t.Helper()
	for i := len(lines) - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) == 3 && f[0] == "ack" {
			idx, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f[1], idx
		}
	}
	t.Fatalf("no ack in %q", lines)
	return "", 0
}

// checkStore reopens the store in dir after a crash: no *.tmp is left,
// every listed snapshot streams and verifies, and id is listed.
func checkStore(t *testing.T, dir, id string) *Store {
	t.Helper()
	s := openStore(t, dir, 2)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			t.Errorf("Open left %s", e.Name())
		}
	}
	metas, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, m := range metas {
		found = found || m.ID == id
		_, rc, err := s.Open(m.ID)
		if err != nil {
			t.Fatalf("snapshot %s listed but not openable: %v", m.ID, err)
		}
		verify := filepath.Join(t.TempDir(), fmt.Sprint(i))
		_, err = fsm.ReceiveSnapshot(vfs.Default, rc, verify)
		rc.Close()
		if err != nil {
			t.Fatalf("snapshot %s listed but does not verify: %v", m.ID, err)
		}
	}
	if !found && id != "" {
		t.Fatalf("acknowledged snapshot %s is not listed (%d listed)", id, len(metas))
	}
	return s
}

func crashSeed(t *testing.T) uint64 {
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -seed)", seed)
	return seed
}

// TestKillDuringCreate: kill -9 while snapshots are being taken. The
// store reopens with every acknowledged snapshot whole, nothing half made,
// and the engine at or past the last acknowledged snapshot's index.
func TestKillDuringCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 rounds")
	}
	rng := rand.New(rand.NewPCG(crashSeed(t), 1))
	for round := 0; round < *flagRounds; round++ {
		base := t.TempDir()
		lines := runAndKill(t, rng, "create", base)
		id, index := lastAck(t, lines)
		checkStore(t, filepath.Join(base, "snaps"), id)
		f := openFSM(t, filepath.Join(base, "fsm"), nil)
		if f.AppliedIndex() < index {
			t.Fatalf("round %d: engine at %d after the snapshot at %d was acknowledged", round, f.AppliedIndex(), index)
		}
		f.Close()
	}
}

// TestKillDuringTransferAndRestore: kill -9 while a follower receives
// snapshots and restores them. Its store reopens with the acknowledged
// snapshot whole and nothing half made; its state machine reopens holding
// the last restored state or the one being restored, exactly.
func TestKillDuringTransferAndRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 rounds")
	}
	rng := rand.New(rand.NewPCG(crashSeed(t), 2))
	for round := 0; round < *flagRounds; round++ {
		base := t.TempDir()
		lines := runAndKill(t, rng, "transfer", base)
		sums := map[uint64]string{}
		var recv string
		for _, l := range lines {
			switch f := strings.Fields(l); f[0] {
			case "sum":
				idx, _ := strconv.ParseUint(f[1], 10, 64)
				sums[idx] = f[2]
			case "recv":
				recv = f[1]
			}
		}
		id, index := lastAck(t, lines)
		fs := checkStore(t, filepath.Join(base, "follower"), recv)
		checkStore(t, filepath.Join(base, "leader-snaps"), "")
		replica := openFSM(t, filepath.Join(base, "replica"), fs)
		got := replica.AppliedIndex()
		want, ok := sums[got]
		if !ok || got < index {
			t.Fatalf("round %d: replica at index %d; last restore acknowledged: %s at %d", round, got, id, index)
		}
		if fmt.Sprintf("%x", checksum(t, replica.FSM)) != want {
			t.Fatalf("round %d: replica at index %d does not hold that snapshot's state", round, got)
		}
		replica.Close()
	}
}
