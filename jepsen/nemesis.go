package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/jepsen/history"
)

// A Nemesis injects one kind of fault and heals it. Inject returns a
// description of what it did ("kill leader n2"); Heal undoes it (restart
// the killed node, resume the paused one, drop the partition). A nemesis
// holds at most one fault at a time. The clock nemesis is absent by design:
// no safety property of cairn depends on clocks (linearizable reads use the
// read-index protocol, not leases; see cluster/read.go).
type Nemesis interface {
	Name() string
	// Available reports whether the nemesis can run on this cluster (a
	// partition needs network control).
	Available(env *env) bool
	Inject(ctx context.Context, env *env, rng *rand.Rand) (detail string, err error)
	Heal(ctx context.Context, env *env) error
}

// env is what a nemesis acts on.
type env struct {
	cluster Cluster
	admin   *client.Client // not recorded in the history
}

func (e *env) n() int { return len(e.cluster.Nodes()) }

func (e *env) id(i int) string { return e.cluster.Nodes()[i].ID }

// targets picks nodes to hit: the leader, one random node, or a random
// minority, with equal odds.
func (e *env) targets(ctx context.Context, rng *rand.Rand) ([]int, string) {
	switch rng.IntN(3) {
	case 0:
		if l := leader(ctx, e.admin, e.cluster); l >= 0 {
			return []int{l}, "leader " + e.id(l)
		}
		fallthrough
	case 1:
		i := rng.IntN(e.n())
		return []int{i}, e.id(i)
	}
	k := max(1, (e.n()-1)/2)
	perm := rng.Perm(e.n())[:k]
	slices.Sort(perm)
	var ids []string
	for _, i := range perm {
		ids = append(ids, e.id(i))
	}
	return perm, "minority " + strings.Join(ids, ",")
}

// nemeses by name.
var allNemeses = map[string]func() Nemesis{
	"kill":       func() Nemesis { return &killNemesis{} },
	"pause":      func() Nemesis { return &pauseNemesis{} },
	"partition":  func() Nemesis { return &partitionNemesis{} },
	"membership": func() Nemesis { return &membershipNemesis{} },
	"restart":    func() Nemesis { return &restartNemesis{} },
}

// killNemesis: SIGKILL; heal restarts the node on its data.
type killNemesis struct{ nodes []int }

func (k *killNemesis) Name() string        { return "kill" }
func (k *killNemesis) Available(*env) bool { return true }
func (k *killNemesis) Inject(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
	nodes, what := e.targets(ctx, rng)
	var errs []error
	for _, i := range nodes {
		if err := e.cluster.Kill(i); err != nil {
			errs = append(errs, err)
			continue
		}
		k.nodes = append(k.nodes, i)
	}
	return "kill " + what, errors.Join(errs...)
}
func (k *killNemesis) Heal(ctx context.Context, e *env) error {
	var errs []error
	for _, i := range k.nodes {
		errs = append(errs, e.cluster.Start(i))
	}
	k.nodes = nil
	return errors.Join(errs...)
}

// pauseNemesis: SIGSTOP; heal SIGCONT.
type pauseNemesis struct{ nodes []int }

func (p *pauseNemesis) Name() string        { return "pause" }
func (p *pauseNemesis) Available(*env) bool { return true }
func (p *pauseNemesis) Inject(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
	nodes, what := e.targets(ctx, rng)
	var errs []error
	for _, i := range nodes {
		if err := e.cluster.Pause(i); err != nil {
			errs = append(errs, err)
			continue
		}
		p.nodes = append(p.nodes, i)
	}
	return "pause " + what, errors.Join(errs...)
}
func (p *pauseNemesis) Heal(ctx context.Context, e *env) error {
	var errs []error
	for _, i := range p.nodes {
		errs = append(errs, e.cluster.Resume(i))
	}
	p.nodes = nil
	return errors.Join(errs...)
}

// partitionNemesis cuts the network in one of four shapes.
type partitionNemesis struct{ active bool }

func (p *partitionNemesis) Name() string          { return "partition" }
func (p *partitionNemesis) Available(e *env) bool { return e.cluster.CanPartition() }
func (p *partitionNemesis) Inject(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
	shape := rng.IntN(4)
	l := -1
	if shape == 1 {
		l = leader(ctx, e.admin, e.cluster)
	}
	cut, what := partitionShape(shape, e.n(), l, rng, e.id)
	p.active = true
	return "partition " + what, e.cluster.Partition(cut)
}

// partitionShape returns the pairs of nodes to cut for one of the shapes:
// 0 random halves, 1 the leader isolated (a random node if leader < 0),
// 2 a majorities ring (n >= 4; else a bridge), 3 a bridge. id names
// nodes for the description.
func partitionShape(shape, n, leader int, rng *rand.Rand, id func(int) string) (cut [][2]int, what string) {
	// cutBetween blocks every pair across two groups.
	cutBetween := func(a, b []int) {
		for _, i := range a {
			for _, j := range b {
				cut = append(cut, [2]int{i, j})
			}
		}
	}
	names := func(g []int) string {
		var s []string
		for _, i := range g {
			s = append(s, id(i))
		}
		return "{" + strings.Join(s, ",") + "}"
	}
	switch {
	case shape == 0:
		perm := rng.Perm(n)
		a, b := perm[:n/2], perm[n/2:]
		slices.Sort(a)
		slices.Sort(b)
		cutBetween(a, b)
		return cut, "halves " + names(a) + " " + names(b)
	case shape == 1:
		if leader < 0 {
			leader = rng.IntN(n)
		}
		var rest []int
		for i := range n {
			if i != leader {
				rest = append(rest, i)
			}
		}
		cutBetween([]int{leader}, rest)
		return cut, "isolate leader " + id(leader)
	case shape == 2 && n >= 4:
		// Majorities ring: on a shuffled ring, each node reaches the
		// nodes within reach places of it, a majority of the cluster
		// counting itself, but no two nodes see the same majority.
		perm := rng.Perm(n)
		reach := (n/2 + 1) / 2 // 2*reach+1 >= n/2+1
		for a := range n {
			for b := a + 1; b < n; b++ {
				if d := min(b-a, n-(b-a)); d > reach {
					cut = append(cut, [2]int{perm[a], perm[b]})
				}
			}
		}
		return cut, "majorities ring " + names(perm)
	}
	// Bridge: two halves that cannot talk, and one node that talks to
	// both.
	perm := rng.Perm(n)
	rest := perm[1:]
	x, y := slices.Clone(rest[:len(rest)/2]), slices.Clone(rest[len(rest)/2:])
	slices.Sort(x)
	slices.Sort(y)
	cutBetween(x, y)
	return cut, "bridge " + id(perm[0]) + " between " + names(x) + " " + names(y)
}

func (p *partitionNemesis) Heal(ctx context.Context, e *env) error {
	p.active = false
	return e.cluster.Partition(nil)
}

// membershipNemesis removes a voter from the raft configuration through
// the admin API while traffic runs, then adds it back (the leader's
// reconcile loop may have re-added it already, as a non-voter it later
// promotes: then AddMember makes it a voter at once, or finds it is one).
type membershipNemesis struct{ removed []int }

func (m *membershipNemesis) Name() string        { return "membership" }
func (m *membershipNemesis) Available(*env) bool { return true }
func (m *membershipNemesis) Inject(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
	var i int
	var what string
	if l := leader(ctx, e.admin, e.cluster); l >= 0 && rng.IntN(3) == 0 {
		i, what = l, "leader "+e.id(l)
	} else {
		i = rng.IntN(e.n())
		what = e.id(i)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.admin.RemoveMember(ctx, e.id(i)); err != nil {
		return "remove member " + what, err
	}
	m.removed = append(m.removed, i)
	return "remove member " + what, nil
}
func (m *membershipNemesis) Heal(ctx context.Context, e *env) error {
	var errs []error
	for _, i := range m.removed {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		n := e.cluster.Nodes()[i]
		_, err := e.admin.AddMember(ctx, n.ID, n.RaftAddr)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("add back %s: %w", n.ID, err))
		}
	}
	m.removed = nil
	return errors.Join(errs...)
}

// restartNemesis restarts every node gracefully, one at a time, waiting
// for each to serve again before the next. Inject does all the work.
type restartNemesis struct{}

func (r *restartNemesis) Name() string        { return "restart" }
func (r *restartNemesis) Available(*env) bool { return true }
func (r *restartNemesis) Inject(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
	order := rng.Perm(e.n())
	var ids []string
	for _, i := range order {
		ids = append(ids, e.id(i))
		if err := e.cluster.Stop(i); err != nil && !errors.Is(err, errNotRunning) {
			return "rolling restart " + strings.Join(ids, ","), err
		}
		if err := e.cluster.Start(i); err != nil {
			return "rolling restart " + strings.Join(ids, ","), err
		}
		if err := waitHealthy(ctx, e.admin, e.cluster, 30*time.Second); err != nil {
			return "rolling restart " + strings.Join(ids, ","), err
		}
	}
	return "rolling restart " + strings.Join(ids, ","), nil
}
func (r *restartNemesis) Heal(context.Context, *env) error { return nil }

// schedule runs the nemeses one fault at a time until ctx ends: a quiet
// gap, a random available nemesis injects, holds, heals. Faults go into
// the recorder as they happen (End set at heal). At the end every nemesis
// heals whatever it still holds.
type schedule struct {
	nemeses  []Nemesis
	gap      [2]time.Duration // quiet time between faults, min and max
	hold     [2]time.Duration // how long a fault lasts, min and max
	rec      *recorder
	log      func(format string, args ...any)
	mu       sync.Mutex
	injected map[string]int
}

func (s *schedule) run(ctx context.Context, e *env, rng *rand.Rand) {
	s.injected = map[string]int{}
	between := func(r [2]time.Duration) time.Duration {
		return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])+1))
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	var avail []Nemesis
	for _, n := range s.nemeses {
		if n.Available(e) {
			avail = append(avail, n)
		}
	}
	if len(avail) == 0 {
		return
	}
	for sleep(between(s.gap)) {
		nem := avail[rng.IntN(len(avail))]
		start := s.rec.now()
		// A fault's own actions run to completion even if the run ends.
		detail, err := nem.Inject(context.WithoutCancel(ctx), e, rng)
		if err != nil {
			detail += " (error: " + err.Error() + ")"
		}
		s.log("nemesis: %s", detail)
		idx := s.rec.fault(history.Fault{Nemesis: nem.Name(), Detail: detail, Start: start})
		s.mu.Lock()
		s.injected[nem.Name()]++
		s.mu.Unlock()
		sleep(between(s.hold))
		if err := nem.Heal(context.WithoutCancel(ctx), e); err != nil {
			s.log("nemesis: heal %s: %v", nem.Name(), err)
		}
		s.rec.healed(idx)
		s.log("nemesis: healed %s", nem.Name())
	}
}
