package membership

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed for randomized tests (0: time-based)")
	itersFlag = flag.Int("iters", 3000, "iterations of randomized tests")
)

// t0 is the epoch of data-driven times: "45s" means t0+45s.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestReconcileDataDriven(t *testing.T) {
	runDataDriven(t, "testdata/reconcile.txt", func(t *testing.T, c *ddCase) string {
		in, err := parseReconcileInput(c)
		if err != nil {
			t.Fatalf("%s: %v", c.pos, err)
		}
		switch c.cmd {
		case "reconcile":
			return formatActions(Reconcile(in), "")
		case "converge":
			// Run rounds against the configuration the previous round's
			// actions produce, with the same gossip view and progress.
			var b strings.Builder
			for round := 1; round <= 10; round++ {
				actions := Reconcile(in)
				if len(actions) == 0 {
					fmt.Fprintf(&b, "converged after %d rounds:\n", round-1)
					b.WriteString(formatConfig(in.Config))
					return b.String()
				}
				fmt.Fprintf(&b, "round %d:\n%s\n", round, formatActions(actions, "  "))
				in.Config, err = applyToConfig(in.Config, actions)
				if err != nil {
					t.Fatalf("%s: round %d: %v", c.pos, round, err)
				}
			}
			return b.String() + "did not converge"
		default:
			t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
			return ""
		}
	})
}

func formatActions(actions []Action, indent string) string {
	if len(actions) == 0 {
		return indent + "no actions"
	}
	lines := make([]string, len(actions))
	for i, a := range actions {
		lines[i] = indent + a.String()
	}
	return strings.Join(lines, "\n")
}

func formatConfig(cfg raft.Configuration) string {
	var b strings.Builder
	servers := slices.Clone(cfg.Servers)
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	for _, s := range servers {
		suffrage := "voter"
		if s.Suffrage != raft.Voter {
			suffrage = "nonvoter"
		}
		fmt.Fprintf(&b, "  %s %s %s\n", s.ID, suffrage, s.Address)
	}
	return b.String()
}

// parseReconcileInput builds an Input from a case. Command arguments set the
// policy:
//
//	grace=30s min-quorum=3 catch-up=100 stabilization=10s max-voters=5 max-contact=10s
//
// (those are the defaults). Input lines (times are offsets from t0; raft
// addresses default to "<id>:7000"):
//
//	now 100s
//	self n1                          (default n1)
//	leader-last-index 1000
//	server <id> voter|nonvoter [addr]
//	member <id> alive|suspect|dead|left <changed> [raft=addr] [leaving] [nonvoter] [inc=N]
//	progress <id> last=<index> contact=<time> [healthy] [stable=<time>]
//	missing <id> <since>
//	departed <id> <incarnation>      (removed for leaving, Input.Departed)
func parseReconcileInput(c *ddCase) (Input, error) {
	in := Input{
		Self: "n1",
		Policy: Policy{
			FailedGracePeriod: 30 * time.Second,
			MinQuorum:         3,
			CatchUpThreshold:  100,
			StabilizationTime: 10 * time.Second,
			MaxVoters:         5,
			MaxLastContact:    10 * time.Second,
		},
		Progress:     map[raft.ServerID]ServerProgress{},
		MissingSince: map[raft.ServerID]time.Time{},
	}
	for k, v := range c.args {
		var err error
		switch k {
		case "grace":
			in.Policy.FailedGracePeriod, err = time.ParseDuration(v)
		case "min-quorum":
			in.Policy.MinQuorum, err = strconv.Atoi(v)
		case "catch-up":
			in.Policy.CatchUpThreshold, err = strconv.ParseUint(v, 10, 64)
		case "stabilization":
			in.Policy.StabilizationTime, err = time.ParseDuration(v)
		case "max-voters":
			in.Policy.MaxVoters, err = strconv.Atoi(v)
		case "max-contact":
			in.Policy.MaxLastContact, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown argument")
		}
		if err != nil {
			return in, fmt.Errorf("argument %s=%s: %v", k, v, err)
		}
	}
	at := func(s string) (time.Time, error) {
		d, err := time.ParseDuration(s)
		return t0.Add(d), err
	}
	for _, line := range c.input {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(err error) (Input, error) { return in, fmt.Errorf("line %q: %v", line, err) }
		need := func(n int) error {
			if len(f) < n {
				return fmt.Errorf("need at least %d fields", n)
			}
			return nil
		}
		var err error
		switch f[0] {
		case "now":
			if err = need(2); err == nil {
				in.Now, err = at(f[1])
			}
		case "self":
			if err = need(2); err == nil {
				in.Self = raft.ServerID(f[1])
			}
		case "leader-last-index":
			if err = need(2); err == nil {
				in.LeaderLastIndex, err = strconv.ParseUint(f[1], 10, 64)
			}
		case "server":
			if err = need(3); err != nil {
				break
			}
			s := raft.Server{ID: raft.ServerID(f[1]), Address: raft.ServerAddress(f[1] + ":7000")}
			switch f[2] {
			case "voter":
				s.Suffrage = raft.Voter
			case "nonvoter":
				s.Suffrage = raft.Nonvoter
			default:
				err = fmt.Errorf("suffrage %q", f[2])
			}
			if len(f) > 3 {
				s.Address = raft.ServerAddress(f[3])
			}
			in.Config.Servers = append(in.Config.Servers, s)
		case "member":
			if err = need(4); err != nil {
				break
			}
			m := Member{Meta: Meta{ID: f[1], RaftAddr: f[1] + ":7000"}, Addr: f[1] + ":7946"}
			switch f[2] {
			case "alive":
				m.State = StateAlive
			case "suspect":
				m.State = StateSuspect
			case "dead":
				m.State = StateDead
			case "left":
				m.State = StateLeft
			default:
				err = fmt.Errorf("state %q", f[2])
			}
			if err == nil {
				m.StateChangedAt, err = at(f[3])
			}
			for _, opt := range f[4:] {
				switch {
				case strings.HasPrefix(opt, "raft="):
					m.RaftAddr = strings.TrimPrefix(opt, "raft=")
				case opt == "leaving":
					m.Leaving = true
				case opt == "nonvoter":
					m.NonVoter = true
				case strings.HasPrefix(opt, "inc="):
					m.Incarnation, err = strconv.ParseUint(strings.TrimPrefix(opt, "inc="), 10, 64)
				default:
					err = fmt.Errorf("option %q", opt)
				}
			}
			in.Members = append(in.Members, m)
		case "progress":
			if err = need(2); err != nil {
				break
			}
			var p ServerProgress
			for _, opt := range f[2:] {
				k, v, _ := strings.Cut(opt, "=")
				switch k {
				case "last":
					p.LastIndex, err = strconv.ParseUint(v, 10, 64)
				case "contact":
					p.LastContact, err = at(v)
				case "healthy":
					p.Healthy = true
				case "stable":
					p.StableSince, err = at(v)
				default:
					err = fmt.Errorf("option %q", opt)
				}
				if err != nil {
					break
				}
			}
			in.Progress[raft.ServerID(f[1])] = p
		case "departed":
			if err = need(3); err == nil {
				if in.Departed == nil {
					in.Departed = map[raft.ServerID]uint64{}
				}
				in.Departed[raft.ServerID(f[1])], err = strconv.ParseUint(f[2], 10, 64)
			}
		case "missing":
			if err = need(3); err == nil {
				var since time.Time
				since, err = at(f[2])
				in.MissingSince[raft.ServerID(f[1])] = since
			}
		default:
			err = fmt.Errorf("unknown directive")
		}
		if err != nil {
			return bad(err)
		}
	}
	return in, nil
}

// applyToConfig applies actions to cfg as raft would, checking that each is
// valid where it is applied and that the result is a configuration raft
// accepts (unique IDs and addresses, at least one voter).
func applyToConfig(cfg raft.Configuration, actions []Action) (raft.Configuration, error) {
	cfg = cfg.Clone()
	for _, a := range actions {
		i := slices.IndexFunc(cfg.Servers, func(s raft.Server) bool { return s.ID == a.ID })
		switch a.Kind {
		case AddNonvoter:
			if i >= 0 {
				return cfg, fmt.Errorf("%v: already configured", a)
			}
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: a.ID, Address: a.Addr})
		case UpdateAddress:
			if i < 0 || cfg.Servers[i].Address == a.Addr {
				return cfg, fmt.Errorf("%v: not configured or address unchanged", a)
			}
			cfg.Servers[i].Address = a.Addr
		case PromoteVoter:
			if i < 0 || cfg.Servers[i].Suffrage == raft.Voter {
				return cfg, fmt.Errorf("%v: not a configured non-voter", a)
			}
			cfg.Servers[i].Suffrage = raft.Voter
		case DemoteVoter:
			if i < 0 || cfg.Servers[i].Suffrage != raft.Voter {
				return cfg, fmt.Errorf("%v: not a configured voter", a)
			}
			cfg.Servers[i].Suffrage = raft.Nonvoter
		case RemoveServer:
			if i < 0 {
				return cfg, fmt.Errorf("%v: not configured", a)
			}
			cfg.Servers = slices.Delete(cfg.Servers, i, i+1)
		default:
			return cfg, fmt.Errorf("%v: unknown kind", a)
		}
		addrs := map[raft.ServerAddress]bool{}
		voters := 0
		for _, s := range cfg.Servers {
			if addrs[s.Address] {
				return cfg, fmt.Errorf("after %v: duplicate address %s", a, s.Address)
			}
			addrs[s.Address] = true
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		if voters == 0 {
			return cfg, fmt.Errorf("after %v: no voters", a)
		}
	}
	return cfg, nil
}

func countVoters(cfg raft.Configuration) int {
	n := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// randomInput generates a plausible, sometimes odd, reconcile input around
// a leader "s0" (a voter, itself in any gossip state): servers in every
// state, members not in the configuration, address takeovers, progress of
// every quality.
func randomInput(rng *rand.Rand) Input {
	now := t0.Add(time.Hour)
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	in := Input{
		Now:             now,
		Self:            "s0",
		LeaderLastIndex: 1000 + rng.Uint64N(1000),
		Progress:        map[raft.ServerID]ServerProgress{},
		MissingSince:    map[raft.ServerID]time.Time{},
		Policy: Policy{
			FailedGracePeriod: sec(rng.IntN(60)),
			MinQuorum:         rng.IntN(6),
			CatchUpThreshold:  uint64(rng.IntN(200)),
			StabilizationTime: sec(rng.IntN(30)),
			MaxVoters:         rng.IntN(8),
			MaxLastContact:    sec(rng.IntN(20)),
		},
	}
	n := 1 + rng.IntN(9)
	addr := func(i int) string { return fmt.Sprintf("10.0.0.%d:7000", i) }
	states := []State{StateAlive, StateAlive, StateSuspect, StateDead, StateLeft}
	for i := range n {
		id := raft.ServerID(fmt.Sprintf("s%d", i))
		inConfig := i == 0 || rng.IntN(4) != 0
		if inConfig {
			s := raft.Server{ID: id, Address: raft.ServerAddress(addr(i)), Suffrage: raft.Nonvoter}
			if i == 0 || rng.IntN(2) == 0 {
				s.Suffrage = raft.Voter
			}
			in.Config.Servers = append(in.Config.Servers, s)
			if rng.IntN(3) != 0 {
				lag := uint64(rng.IntN(150))
				p := ServerProgress{
					LastIndex:   in.LeaderLastIndex - min(lag, in.LeaderLastIndex),
					LastContact: now.Add(-sec(rng.IntN(15))),
					Healthy:     rng.IntN(3) != 0,
				}
				if rng.IntN(3) != 0 {
					p.StableSince = now.Add(-sec(rng.IntN(60)))
				}
				in.Progress[id] = p
			}
		}
		hasMember := rng.IntN(5) != 0
		if !hasMember {
			if rng.IntN(2) == 0 {
				in.MissingSince[id] = now.Add(-sec(rng.IntN(120)))
			}
			continue
		}
		m := Member{
			Meta:           Meta{ID: string(id), RaftAddr: addr(i)},
			State:          states[rng.IntN(len(states))],
			StateChangedAt: now.Add(-sec(rng.IntN(120))),
			Leaving:        rng.IntN(8) == 0,
		}
		m.NonVoter = rng.IntN(8) == 0
		switch rng.IntN(10) {
		case 0:
			m.RaftAddr = addr(rng.IntN(n)) // maybe another server's address
		case 1:
			m.RaftAddr = addr(20 + i) // moved
		}
		in.Members = append(in.Members, m)
	}
	return in
}

// checkActions checks the invariants every output of Reconcile must hold.
func checkActions(in Input, actions []Action) error {
	for i := 1; i < len(actions); i++ {
		a, b := actions[i-1], actions[i]
		if a.Kind > b.Kind || (a.Kind == b.Kind && a.ID >= b.ID) {
			return fmt.Errorf("not sorted by (kind, ID) or duplicate: %v before %v", a, b)
		}
	}
	seen := map[raft.ServerID]bool{}
	kinds := map[ActionKind]int{}
	for _, a := range actions {
		if seen[a.ID] {
			return fmt.Errorf("two actions on %s", a.ID)
		}
		seen[a.ID] = true
		kinds[a.Kind]++
		if a.ID == in.Self {
			return fmt.Errorf("action on self: %v", a)
		}
	}
	if kinds[PromoteVoter] > 0 && kinds[DemoteVoter] > 0 {
		return fmt.Errorf("promotes and demotes in one round")
	}

	members := indexMembers(in.Members)
	cfg := in.Config
	v0 := countVoters(cfg)
	floor := min(v0, in.Policy.MinQuorum)
	removedVoters := 0
	for _, a := range actions {
		var err error
		wasVoter := false
		for _, s := range cfg.Servers {
			if s.ID == a.ID {
				wasVoter = s.Suffrage == raft.Voter
			}
		}
		if cfg, err = applyToConfig(cfg, []Action{a}); err != nil {
			return err
		}
		if v := countVoters(cfg); v < floor {
			return fmt.Errorf("after %v: %d voters, floor %d (MinQuorum %d, initially %d)", a, v, floor, in.Policy.MinQuorum, v0)
		}
		m, hasMember := members[a.ID]
		pr := in.Progress[a.ID]
		switch a.Kind {
		case RemoveServer:
			if wasVoter {
				removedVoters++
			}
			takenOver := slices.ContainsFunc(actions, func(b Action) bool {
				return (b.Kind == AddNonvoter || b.Kind == UpdateAddress) && b.Addr == a.Addr
			})
			since, failed := time.Time{}, false
			switch {
			case hasMember && m.State == StateDead:
				since, failed = m.StateChangedAt, true
			case !hasMember:
				since, failed = in.Now, true
				if t, ok := in.MissingSince[a.ID]; ok {
					since = t
				}
			}
			reachable := in.Policy.reachable(in.Now, pr)
			switch {
			case hasMember && m.State == StateLeft:
			case failed && !reachable && in.Now.Sub(since) >= in.Policy.FailedGracePeriod:
			case takenOver && !reachable && !(hasMember && (m.State == StateAlive || m.State == StateSuspect)):
			default:
				return fmt.Errorf("unjustified removal %v (member %v %+v, progress %+v)", a, hasMember, m, pr)
			}
		case PromoteVoter:
			if !hasMember || m.State != StateAlive || m.Leaving || m.NonVoter {
				return fmt.Errorf("promotion of a member not alive or not willing: %v %+v", a, m)
			}
			if !in.Policy.ready(in.Now, pr, in.LeaderLastIndex) || pr.StableSince.IsZero() ||
				in.Now.Sub(pr.StableSince) < in.Policy.StabilizationTime {
				return fmt.Errorf("promotion of a server not ready and stable: %v %+v", a, pr)
			}
		case AddNonvoter, UpdateAddress:
			if !hasMember || m.State != StateAlive || m.Leaving || raft.ServerAddress(m.RaftAddr) != a.Addr {
				return fmt.Errorf("add/update not matching an alive member: %v %+v", a, m)
			}
		}
	}
	if maxRemovals := max(0, (v0-1)/2); removedVoters > maxRemovals {
		return fmt.Errorf("removed %d of %d voters in one round", removedVoters, v0)
	}
	if k := countVoters(cfg); kinds[PromoteVoter] > 0 && k%2 == 0 {
		// Promotions aim at an odd count of voters that are not gone; with
		// no gone voters in the configuration, the count itself is odd.
		gone := 0
		for _, s := range cfg.Servers {
			if m, ok := members[s.ID]; s.Suffrage == raft.Voter && s.ID != in.Self && (!ok || m.State == StateDead || m.State == StateLeft) {
				gone++
			}
		}
		if gone == 0 {
			return fmt.Errorf("promotions leave an even number (%d) of voters", k)
		}
	}
	return nil
}

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return seed
}

// TestReconcileProperties checks Reconcile's invariants on random inputs:
// sorted, at most one action per server, never on Self, every action valid
// where applied, voters never below min(MinQuorum, current), removals and
// promotions justified, and the output independent of input order.
func TestReconcileProperties(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for iter := range *itersFlag {
		in := randomInput(rng)
		actions := Reconcile(in)
		if err := checkActions(in, actions); err != nil {
			t.Fatalf("iteration %d (seed %d): %v\ninput: %+v\nactions:\n%s", iter, seed, err, in, formatActions(actions, "  "))
		}
		shuffled := in
		shuffled.Members = slices.Clone(in.Members)
		shuffled.Config.Servers = slices.Clone(in.Config.Servers)
		rng.Shuffle(len(shuffled.Members), func(i, j int) {
			shuffled.Members[i], shuffled.Members[j] = shuffled.Members[j], shuffled.Members[i]
		})
		rng.Shuffle(len(shuffled.Config.Servers), func(i, j int) {
			shuffled.Config.Servers[i], shuffled.Config.Servers[j] = shuffled.Config.Servers[j], shuffled.Config.Servers[i]
		})
		if again := Reconcile(shuffled); !slices.Equal(actions, again) {
			t.Fatalf("iteration %d (seed %d): output depends on input order:\n%s\nvs\n%s", iter, seed,
				formatActions(actions, "  "), formatActions(again, "  "))
		}
	}
}

// TestReconcileConverges applies each round's actions and reruns with the
// same gossip view and progress: the configuration must reach a fixpoint,
// and every round must keep the invariants.
func TestReconcileConverges(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	for iter := range *itersFlag {
		in := randomInput(rng)
		var history []string
		for round := 0; ; round++ {
			if round == 8 {
				t.Fatalf("iteration %d (seed %d): no fixpoint after %d rounds:\n%s", iter, seed, round, strings.Join(history, "\n"))
			}
			actions := Reconcile(in)
			if err := checkActions(in, actions); err != nil {
				t.Fatalf("iteration %d (seed %d) round %d: %v", iter, seed, round, err)
			}
			if len(actions) == 0 {
				break
			}
			history = append(history, fmt.Sprintf("round %d:\n%s", round, formatActions(actions, "  ")))
			var err error
			if in.Config, err = applyToConfig(in.Config, actions); err != nil {
				t.Fatalf("iteration %d (seed %d) round %d: %v", iter, seed, round, err)
			}
		}
	}
}
