package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// waitFor polls cond until it returns nil, failing the test with cond's last
// error once timeout has passed.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastTimings shortens memberlist's loopback timings further so failure
// detection takes about a second.
func fastTimings(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = time.Second
	c.SuspicionMult = 2
	c.TCPTimeout = time.Second
}

func testMeta(id string) Meta {
	return Meta{ID: id, RaftAddr: "127.0.0.1:7" + strings.TrimPrefix(id, "n") + "00", GRPCAddr: "127.0.0.1:8000", Version: 2}
}

func startNode(t *testing.T, id string) *Discovery {
	t.Helper()
	d, err := New(Config{
		Meta:     testMeta(id),
		BindAddr: "127.0.0.1",
		Profile:  ProfileLocal,
		Tune:     fastTimings,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// memberState returns the state d sees id in, with an error if d does not
// know id.
func memberOf(d *Discovery, id string) (Member, error) {
	for _, m := range d.Members() {
		if m.ID == id {
			return m, nil
		}
	}
	return Member{}, fmt.Errorf("%s does not know %s", d.ID(), id)
}

func expectState(d *Discovery, id string, want State) func() error {
	return func() error {
		m, err := memberOf(d, id)
		if err != nil {
			return err
		}
		if m.State != want {
			return fmt.Errorf("%s sees %s as %s, want %s", d.ID(), id, m.State, want)
		}
		return nil
	}
}

// TestDiscovery runs three memberlist instances on loopback: they join and
// see each other's metadata; one leaves (the others see it left), rejoins
// under a new address, and another is shut down without leaving (the
// others see it dead, not left).
func TestDiscovery(t *testing.T) {
	start := time.Now()
	n1, n2, n3 := startNode(t, "n1"), startNode(t, "n2"), startNode(t, "n3")
	for _, d := range []*Discovery{n2, n3} {
		if n, err := d.Join([]string{n1.LocalAddr()}); err != nil || n != 1 {
			t.Fatalf("%s join: %d, %v", d.ID(), n, err)
		}
	}
	select {
	case <-n1.Changes():
	default:
		t.Fatal("n1 was not notified of the joins")
	}
	nodes := []*Discovery{n1, n2, n3}
	for _, d := range nodes {
		waitFor(t, 5*time.Second, d.ID()+" to see everyone alive", func() error {
			ms := d.Members()
			if len(ms) != 3 {
				return fmt.Errorf("%s sees %d members", d.ID(), len(ms))
			}
			for i, m := range ms {
				id := fmt.Sprintf("n%d", i+1)
				if m.Meta != testMeta(id) || m.State != StateAlive || m.Leaving || m.StateChangedAt.IsZero() {
					return fmt.Errorf("%s sees %+v", d.ID(), m)
				}
				if m.Addr != nodes[i].LocalAddr() {
					return fmt.Errorf("%s sees %s at %s, want %s", d.ID(), id, m.Addr, nodes[i].LocalAddr())
				}
			}
			return nil
		})
	}

	// A graceful leave: the others see n3 left.
	beforeLeave := time.Now()
	if err := n3.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n3.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	for _, d := range []*Discovery{n1, n2} {
		waitFor(t, 5*time.Second, d.ID()+" to see n3 left", expectState(d, "n3", StateLeft))
		if m, _ := memberOf(d, "n3"); m.StateChangedAt.Before(beforeLeave) || !m.Leaving {
			t.Fatalf("%s: n3 left with %+v", d.ID(), m)
		}
	}
	if err := n3.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n3.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after Shutdown: %v", err)
	}
	if _, err := n3.Join([]string{n1.LocalAddr()}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Join after Shutdown: %v", err)
	}

	// n3 comes back as a new process on a new port: alive again.
	n3b := startNode(t, "n3")
	if _, err := n3b.Join([]string{n2.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "n1 to see n3 back", func() error {
		m, err := memberOf(n1, "n3")
		if err != nil {
			return err
		}
		if m.State != StateAlive || m.Leaving || m.Addr != n3b.LocalAddr() {
			return fmt.Errorf("n1 sees %+v", m)
		}
		return nil
	})

	// A failure: n2 stops without leaving; the others see it dead.
	beforeFail := time.Now()
	if err := n2.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Discovery{n1, n3b} {
		waitFor(t, 10*time.Second, d.ID()+" to see n2 dead", expectState(d, "n2", StateDead))
		if m, _ := memberOf(d, "n2"); m.StateChangedAt.Before(beforeFail) || m.Leaving {
			t.Fatalf("%s: n2 failed with %+v", d.ID(), m)
		}
	}
	if m, _ := memberOf(n1, "n1"); m.State != StateAlive {
		t.Fatalf("n1 sees itself as %+v", m)
	}
	t.Logf("took %s", time.Since(start))
}

func TestDiscoveryTombstones(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	d1, err := New(Config{Meta: testMeta("n1"), BindAddr: "127.0.0.1", Profile: ProfileLocal, Tune: fastTimings,
		Now: func() time.Time { return clock() }, TombstoneRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Shutdown()
	d2 := startNode(t, "n2")
	if _, err := d2.Join([]string{d1.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "n1 to see n2", expectState(d1, "n2", StateAlive))
	if err := d2.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "n1 to see n2 left", expectState(d1, "n2", StateLeft))
	// Members is computed with the injected clock: within the retention the
	// tombstone stays, after it the member is forgotten.
	now = now.Add(time.Hour)
	if _, err := memberOf(d1, "n2"); err != nil {
		t.Fatalf("at the retention boundary: %v", err)
	}
	now = now.Add(time.Second)
	if m, err := memberOf(d1, "n2"); err == nil {
		t.Fatalf("after the retention: still %+v", m)
	}
	if ms := d1.Members(); len(ms) != 1 || ms[0].ID != "n1" {
		t.Fatalf("members %+v", ms)
	}
}

func TestDiscoveryConfigErrors(t *testing.T) {
	if _, err := New(Config{Meta: Meta{ID: "n1"}}); !errors.Is(err, ErrInvalidMeta) {
		t.Fatalf("invalid meta: %v", err)
	}
	if _, err := New(Config{Meta: Meta{ID: strings.Repeat("x", 600), RaftAddr: "h:1"}}); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("large meta: %v", err)
	}
	if _, err := New(Config{Meta: testMeta("n1"), Profile: Profile(9)}); err == nil {
		t.Fatal("unknown profile accepted")
	}
	d := startNode(t, "n1")
	// A port in use is a clear error.
	_, port, _ := strings.Cut(d.LocalAddr(), ":")
	var p int
	fmt.Sscan(port, &p)
	if d2, err := New(Config{Meta: testMeta("n2"), BindAddr: "127.0.0.1", BindPort: p, Profile: ProfileLocal}); err == nil {
		d2.Shutdown()
		t.Fatal("second node on a used port started")
	} else if !strings.Contains(err.Error(), "starting gossip") {
		t.Fatalf("port in use: %v", err)
	}
	if _, err := d.Join(nil); err == nil {
		t.Fatal("join with no seeds succeeded")
	}
	// Nothing listens on port 1 of loopback.
	if n, err := d.Join([]string{"127.0.0.1:1"}); err == nil || n != 0 {
		t.Fatalf("join of a dead seed: %d, %v", n, err)
	}
}

// recordHandler is a slog.Handler that keeps the messages it sees.
type recordHandler struct {
	mu   *sync.Mutex
	msgs *[]string
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordHandler) WithGroup(string) slog.Handler            { return h }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	h.mu.Lock()
	*h.msgs = append(*h.msgs, s)
	h.mu.Unlock()
	return nil
}

// rawMeta is a memberlist.Delegate gossiping fixed metadata.
type rawMeta []byte

func (m rawMeta) NodeMeta(int) []byte           { return m }
func (rawMeta) NotifyMsg([]byte)                {}
func (rawMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (rawMeta) LocalState(bool) []byte          { return nil }
func (rawMeta) MergeRemoteState([]byte, bool)   {}

// TestDiscoveryForeignNodes: nodes whose metadata does not decode, or names
// another node, are logged and left out of Members.
func TestDiscoveryForeignNodes(t *testing.T) {
	var mu sync.Mutex
	var msgs []string
	d, err := New(Config{Meta: testMeta("n1"), BindAddr: "127.0.0.1", Profile: ProfileLocal, Tune: fastTimings,
		Logger: slog.New(recordHandler{&mu, &msgs})})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown()
	for name, meta := range map[string][]byte{
		"json":     []byte(`{"id":"json"}`),
		"impostor": encodeMeta(testMeta("n7"), false),
	} {
		c := memberlist.DefaultLocalConfig()
		c.Name, c.BindAddr, c.BindPort = name, "127.0.0.1", 0
		c.Delegate = rawMeta(meta)
		c.LogOutput = io.Discard
		ml, err := memberlist.Create(c)
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Shutdown()
		if _, err := ml.Join([]string{d.LocalAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "warnings about both foreign nodes", func() error {
		mu.Lock()
		defer mu.Unlock()
		var n int
		for _, m := range msgs {
			if strings.HasPrefix(m, "WARN membership: ignoring member with unusable metadata") &&
				(strings.Contains(m, "node=json") || strings.Contains(m, `node=impostor`) && strings.Contains(m, "differs from node name")) {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d matching warnings in %q", n, msgs)
		}
		return nil
	})
	if ms := d.Members(); len(ms) != 1 || ms[0].ID != "n1" {
		t.Fatalf("members %+v", ms)
	}
	// memberlist's own lines arrive at their level, without the bracket tag.
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "DEBUG memberlist: ") }) {
		t.Fatalf("no memberlist debug line in %q", msgs)
	}
}
