package composetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	keysPerPhase = 1000
	putWorkers   = 4 // concurrent `cairn put` processes
	// budget bounds the scenario, leaving the teardown time inside
	// `go test -timeout` (a timeout panic would skip it).
	budget = 8 * time.Minute
)

var (
	voters3 = []string{"node1", "node2", "node3"}
	voters5 = []string{"node1", "node2", "node3", "node4", "node5"}
)

func TestComposeCluster(t *testing.T) {
	compose := preflight(t)
	h := newHarness(t, compose)
	t.Logf("project %s, image %s, network %s.0/24", h.project, h.image, h.net)

	deadline := time.Now().Add(budget)
	if d, ok := t.Deadline(); ok && d.Add(-2*time.Minute).Before(deadline) {
		deadline = d.Add(-2 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// ^C or a SIGTERM ends the scenario and still tears down.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var timings []string
	step := func(name string, f func()) {
		t.Helper()
		start := time.Now()
		t.Logf("== %s", name)
		f()
		d := time.Since(start).Round(100 * time.Millisecond)
		timings = append(timings, fmt.Sprintf("%-58s %6.1fs", name, d.Seconds()))
		t.Logf("   %s: %v", name, d)
	}
	total := time.Now()
	defer func() {
		t.Logf("timings:\n  %s\n  %-58s %6.1fs", strings.Join(timings, "\n  "), "total (before teardown)",
			time.Since(total).Seconds())
	}()

	t.Cleanup(h.teardown)
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h.dumpLogs(ctx)
		}
	})

	// The image: the binaries built as `make docker` builds them.
	step("build binaries and image", func() {
		dir := t.TempDir()
		if _, err := h.run(ctx, "bash", filepath.Join(h.root, "deploy/build-image.sh"), h.image, dir); err != nil {
			t.Fatal(err)
		}
		h.cli = filepath.Join(dir, "cairn") // static linux binary: runs on this host too
	})

	step("compose up node1..node3", func() {
		for attempt := 1; ; attempt++ {
			out, err := h.composeCmd(ctx, false, "up", "-d")
			if err == nil {
				return
			}
			// Another network (maybe a parallel run's) holds the subnet.
			if attempt < 5 && strings.Contains(out, "overlaps") {
				t.Logf("subnet %s.0/24 is taken; trying another", h.net)
				h.composeCmd(ctx, false, "down", "--volumes")
				h.pickNet()
				continue
			}
			t.Fatal(err)
		}
	})
	all3 := h.endpoints(voters3...)
	var leader string
	step("wait until healthy, with a leader and 3 voters", func() {
		h.waitHealthy(ctx, 90*time.Second, voters3...)
		leader = h.waitVoters(ctx, 60*time.Second, all3, voters3...)
		t.Logf("leader %s; gRPC published at %s", leader, all3)
	})

	step(fmt.Sprintf("write %d keys with the CLI", keysPerPhase), func() {
		if err := h.putKeys(ctx, all3, 0, keysPerPhase, putWorkers); err != nil {
			t.Fatal(err)
		}
	})

	killed := leader
	step(fmt.Sprintf("kill the leader's container (%s)", killed), func() {
		h.mustCompose(ctx, false, "kill", killed)
		st, err := h.inspect(ctx, killed)
		if err != nil {
			t.Fatal(err)
		}
		if st.State.Running {
			t.Fatalf("%s still running after compose kill", killed)
		}
	})

	step(fmt.Sprintf("write %d more keys with %s down", keysPerPhase, killed), func() {
		// The endpoints include the dead node's: the CLI moves on.
		if err := h.putKeys(ctx, all3, keysPerPhase, 2*keysPerPhase, putWorkers); err != nil {
			t.Fatal(err)
		}
	})
	survivors := slices.DeleteFunc(slices.Clone(voters3), func(s string) bool { return s == killed })
	ms, err := h.members(ctx, h.endpoints(survivors...))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Leader && m.ID == killed {
			t.Fatalf("%s is down but still the leader: %+v", killed, ms)
		}
	}

	step(fmt.Sprintf("start %s again and wait until it has caught up", killed), func() {
		h.mustCompose(ctx, false, "start", killed)
		h.waitHealthy(ctx, 60*time.Second, killed)
		// Its own state, not the leader's: a serializable read pinned to it.
		h.eventually(ctx, 60*time.Second, time.Second, killed+" caught up", func() error {
			kvs, err := h.scanCLI(ctx, h.port(killed), "serializable")
			if err != nil {
				return err
			}
			return h.checkKeys(kvs, 2*keysPerPhase)
		})
		leader = h.waitVoters(ctx, 60*time.Second, all3, voters3...)
	})

	verify := func(services []string) {
		t.Helper()
		for _, s := range services {
			addr := h.port(s)
			kvs, err := h.scanNode(ctx, addr)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if err := h.checkKeys(kvs, 2*keysPerPhase); err != nil {
				t.Fatalf("linearizable scan at %s (%s): %v", s, addr, err)
			}
			kvs, err = h.scanCLI(ctx, addr, "serializable")
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if err := h.checkKeys(kvs, 2*keysPerPhase); err != nil {
				t.Fatalf("serializable scan of %s's own state: %v", s, err)
			}
		}
	}
	step(fmt.Sprintf("read all %d keys from every node", 2*keysPerPhase), func() {
		verify(voters3)
		kvs, err := h.scanCLI(ctx, all3, "linearizable")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.checkKeys(kvs, 2*keysPerPhase); err != nil {
			t.Fatalf("cairn scan: %v", err)
		}
	})

	// The restart policy: a node whose process dies comes back by itself.
	// (`compose kill` above is a deliberate stop, which Docker does not
	// undo.)
	follower := voters3[0]
	if follower == leader {
		follower = voters3[1]
	}
	step(fmt.Sprintf("kill -9 %s's process; the restart policy restarts it", follower), func() {
		before, err := h.inspect(ctx, follower)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(before.State.Pid, syscall.SIGKILL); err != nil {
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ESRCH) {
				t.Logf("cannot signal the container's process %d from here (%v): restart policy not checked", before.State.Pid, err)
				return
			}
			t.Fatal(err)
		}
		h.eventually(ctx, 30*time.Second, 500*time.Millisecond, follower+" restarted", func() error {
			st, err := h.inspect(ctx, follower)
			if err != nil {
				return err
			}
			if st.RestartCount <= before.RestartCount {
				return fmt.Errorf("restart count %d", st.RestartCount)
			}
			return nil
		})
		h.waitHealthy(ctx, 60*time.Second, follower)
		h.waitVoters(ctx, 60*time.Second, all3, voters3...)
	})

	step("scale out to 5 nodes; wait until node4 and node5 are voters", func() {
		ids := map[string]string{}
		for _, s := range voters3 {
			id, err := h.containerID(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			ids[s] = id
		}
		h.mustCompose(ctx, true, "up", "-d")
		for _, s := range voters3 {
			if id, err := h.containerID(ctx, s); err != nil || id != ids[s] {
				t.Fatalf("scaling out replaced %s's container (%s → %s, %v)", s, ids[s], id, err)
			}
		}
		h.waitHealthy(ctx, 90*time.Second, voters5...)
		// Added as non-voters, promoted together once caught up and
		// stable (membership.DefaultPolicy: 10s).
		leader = h.waitVoters(ctx, 90*time.Second, h.endpoints(voters5...), voters5...)
		t.Logf("5 voters, leader %s", leader)
	})

	step(fmt.Sprintf("read all %d keys from all 5 nodes", 2*keysPerPhase), func() {
		// node4 and node5 may still be applying what they were sent.
		h.eventually(ctx, 30*time.Second, time.Second, "node4 and node5 caught up", func() error {
			for _, s := range voters5[3:] {
				kvs, err := h.scanCLI(ctx, h.port(s), "serializable")
				if err != nil {
					return err
				}
				if err := h.checkKeys(kvs, 2*keysPerPhase); err != nil {
					return fmt.Errorf("%s: %v", s, err)
				}
			}
			return nil
		})
		verify(voters5)
	})
}
