package boltlog

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// crashEnv names the variable that makes the test binary a crash child:
// its value is "path seed".
const crashEnv = "BOLTLOG_CRASH_CHILD"

func childSpec() string { return os.Getenv(crashEnv) }

// crashChild writes to the store at path until it is killed: appends of
// 1-20 entries, prefix trims (as log compaction, small budgets so that a
// trim spans many transactions and the background trimmer runs between
// bursts) and suffix truncations. It prints a line before each operation
// and one after it returned (acknowledged):
//
//	a LO HI GEN / A LO HI GEN   StoreLogs of [LO, HI], Term GEN
//	t HI                        DeleteRange(FirstIndex, HI) (prefix)
//	s LO HI / S LO HI           DeleteRange(LO, HI) (suffix)
func crashChild(spec string) {
	var path string
	var seed uint64
	if _, err := fmt.Sscan(spec, &path, &seed); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	s, err := Open(path, testOptions())
	if err != nil {
		fail(err)
	}
	s.trimEntries, s.trimBytesN, s.trimIdle = 8, 16<<10, time.Millisecond
	rng := rand.New(rand.NewPCG(seed, 2))
	last, err := s.LastIndex()
	if err != nil {
		fail(err)
	}
	gen := seed * 1000
	for {
		first, err := s.FirstIndex()
		if err != nil {
			fail(err)
		}
		switch op := rng.IntN(100); {
		case op < 75 || last < first+10:
			n := uint64(1 + rng.IntN(20))
			var logs []*raft.Log
			for i := last + 1; i <= last+n; i++ {
				logs = append(logs, entry(i, gen, 100+rng.IntN(2000)))
			}
			fmt.Printf("a %d %d %d\n", last+1, last+n, gen)
			if err := s.StoreLogs(logs); err != nil {
				fail(err)
			}
			fmt.Printf("A %d %d %d\n", last+1, last+n, gen)
			last += n
		case op < 93:
			hi := last - uint64(rng.IntN(10)) - 1
			fmt.Printf("t %d\n", hi)
			if err := s.DeleteRange(first, hi); err != nil {
				fail(err)
			}
		default:
			lo := last - uint64(rng.IntN(5))
			fmt.Printf("s %d %d\n", lo, last)
			if err := s.DeleteRange(lo, last); err != nil {
				fail(err)
			}
			fmt.Printf("S %d %d\n", lo, last)
			last = lo - 1
			gen++
		}
		if rng.IntN(20) == 0 { // an idle moment: the background trimmer runs
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// crashModel is what the parent knows from the child's lines.
type crashModel struct {
	gens     map[uint64]uint64 // index -> Term of the acknowledged entry
	trimHi   uint64            // entries up to here may be gone (from the low end)
	inflight []string          // the operation started and not acknowledged
}

func (m *crashModel) apply(f []string) error {
	var a, b, g uint64
	switch f[0] {
	case "a", "s":
		m.inflight = f
	case "A":
		fmt.Sscan(f[1]+" "+f[2]+" "+f[3], &a, &b, &g)
		for i := a; i <= b; i++ {
			m.gens[i] = g
		}
		// The store's contract: a write inside the pending trim lowers
		// its bound below the entries written.
		m.trimHi = min(m.trimHi, a-1)
		m.inflight = nil
	case "S":
		fmt.Sscan(f[1]+" "+f[2], &a, &b)
		for i := a; i <= b; i++ {
			delete(m.gens, i)
		}
		m.inflight = nil
	case "t":
		fmt.Sscan(f[1], &a)
		m.trimHi = max(m.trimHi, a)
	default:
		return fmt.Errorf("child printed %q", strings.Join(f, " "))
	}
	return nil
}

// check compares the reopened log (index -> Term) with the model, with the
// in-flight operation applied or not: the log must be one contiguous
// range, hold only acknowledged (or in-flight) entries, and hold every
// acknowledged entry above the highest trim asked for.
func (m *crashModel) check(got map[uint64]uint64, first, last uint64) error {
	if uint64(len(got)) != last-first+1 && len(got) != 0 {
		return fmt.Errorf("log [%d, %d] holds %d entries: not contiguous", first, last, len(got))
	}
	var errs []string
	for _, applied := range []bool{false, true} {
		want := map[uint64]uint64{}
		for i, g := range m.gens {
			want[i] = g
		}
		if applied && m.inflight != nil {
			c := &crashModel{gens: want}
			c.apply(append([]string{strings.ToUpper(m.inflight[0])}, m.inflight[1:]...))
		}
		err := func() error {
			for i, g := range got {
				if w, ok := want[i]; !ok || w != g {
					return fmt.Errorf("entry %d has term %d; acknowledged: %d (%v)", i, g, w, ok)
				}
			}
			for i, w := range want {
				if _, ok := got[i]; !ok && i > m.trimHi {
					return fmt.Errorf("acknowledged entry %d (term %d) lost; trims asked up to %d", i, w, m.trimHi)
				}
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Sprintf("in-flight %v applied %v: %v", m.inflight, applied, err))
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

// TestCrash kills (SIGKILL) a child process that appends, trims and
// truncates, at a random point, and reopens its log: it must be one
// contiguous range holding every acknowledged entry above the trims asked
// for and nothing that was never written or was truncated. Three rounds on
// one file, each child continuing the log its predecessor left.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	path := filepath.Join(t.TempDir(), "raft.db")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	m := &crashModel{gens: map[uint64]uint64{}}
	trimmed := false
	for round := uint64(1); round <= 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", crashEnv, path, seed+round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		acks, killAt := 0, 30+rng.IntN(150)
		for acks < killAt {
			line, err := r.ReadString('\n')
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: child output: %v", round, err)
			}
			f := strings.Fields(line)
			if err := m.apply(f); err != nil {
				t.Fatal(err)
			}
			if f[0] == "A" {
				acks++
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// What the child printed before it died was acknowledged too.
		rest, _ := io.ReadAll(r)
		for _, line := range strings.Split(strings.TrimSpace(string(rest)), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				if err := m.apply(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		cmd.Wait()

		got, first, last := readAll(t, path)
		if err := m.check(got, first, last); err != nil {
			t.Fatalf("round %d, after SIGKILL: %v", round, err)
		}
		t.Logf("round %d: %d acknowledged appends, log [%d, %d], trims asked up to %d", round, acks, first, last, m.trimHi)
		trimmed = trimmed || first > 1
		// The next child continues from what is on disk.
		m = &crashModel{gens: got}
	}
	if !trimmed {
		t.Error("no round trimmed anything: the test checked nothing about trims")
	}
}

// readAll opens the store at path and returns every entry's term, after
// checking that it decodes as written.
func readAll(t *testing.T, path string) (map[uint64]uint64, uint64, uint64) {
	t.Helper()
	s := openTest(t, path)
	defer s.Close()
	got := map[uint64]uint64{}
	var first, last uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(logsBucket).ForEach(func(k, v []byte) error {
			var l raft.Log
			if err := decodeLog(v, &l); err != nil {
				return err
			}
			i := l.Index
			if want := entry(i, l.Term, len(l.Data)); !sameLog(&l, want) || string(k) != string(indexKey(i)) {
				return fmt.Errorf("entry under key %x is not what was written: %+v", k, l)
			}
			if first == 0 {
				first = i
			}
			last = i
			got[i] = l.Term
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, first, last
}
