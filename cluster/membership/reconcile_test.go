package membership

import (
	"flag"
	"fmt"
	"maps"
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
//	grace=30s min-quorum=3 catch-up=100 stabilization=10s max-voters=5 max-contact=10s max-pending=0
//
// (those are the defaults; max-pending=0 means DefaultMaxPendingNonVoters),
// and require-verified sets Input.RequireVerified. Input lines (times are
// offsets from t0; raft addresses default to "<id>:7000"):
//
//	now 100s
//	self n1                          (default n1)
//	leader-last-index 1000
//	server <id> voter|nonvoter [addr]
//	member <id> alive|suspect|dead|left <changed> [raft=addr] [leaving] [nonvoter] [inc=N]
//	progress <id> last=<index> contact=<time> [healthy] [stable=<time>]
//	missing <id> <since>
//	departed <id> <incarnation>      (removed for leaving, Input.Departed)
//	verified <id> ...                (Input.Verified)
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
		case "max-pending":
			in.Policy.MaxPendingNonVoters, err = strconv.Atoi(v)
		case "require-verified":
			if v != "" {
				err = fmt.Errorf("takes no value")
			}
			in.RequireVerified = true
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
		case "verified":
			if err = need(2); err == nil {
				if in.Verified == nil {
					in.Verified = map[raft.ServerID]bool{}
				}
				for _, id := range f[1:] {
					in.Verified[raft.ServerID(id)] = true
				}
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
// every quality, verified and unverified members, and sometimes a crowd of
// new members (impostors, say) claiming fresh or configured addresses.
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
			// -1 (no cap) to 4; 0 is the default, 3.
			MaxPendingNonVoters: rng.IntN(6) - 1,
		},
		RequireVerified: rng.IntN(2) == 0,
		Verified:        map[raft.ServerID]bool{},
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
		in.Verified[id] = rng.IntN(4) != 0
	}
	if rng.IntN(4) == 0 {
		for j := range rng.IntN(13) {
			id := raft.ServerID(fmt.Sprintf("f%02d", j))
			m := Member{
				Meta:           Meta{ID: string(id), RaftAddr: addr(40 + j), NonVoter: rng.IntN(6) == 0},
				State:          states[rng.IntN(len(states))],
				StateChangedAt: now.Add(-sec(rng.IntN(120))),
			}
			if rng.IntN(3) == 0 {
				m.RaftAddr = addr(rng.IntN(n)) // claims a configured address
			}
			in.Members = append(in.Members, m)
			if rng.IntN(5) == 0 {
				in.Verified[id] = true
			}
		}
	}
	return in
}

// pendingNonVoters counts the configured non-voters of cfg that are not
// ready and whose member does not ask to stay a non-voter (Policy
// .MaxPendingNonVoters).
func pendingNonVoters(in Input, cfg raft.Configuration) int {
	members := indexMembers(in.Members)
	n := 0
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter && !members[s.ID].NonVoter && !in.Policy.ready(in.Now, in.Progress[s.ID], in.LeaderLastIndex) {
			n++
		}
	}
	return n
}

// withoutUnverified returns in without what RequireVerified makes Reconcile
// ignore: unverified members that are not configured are dropped, and those
// that are configured keep their configured raft address (they claim no
// other). Reconcile must answer the same to both.
func withoutUnverified(in Input) Input {
	addrs := map[raft.ServerID]raft.ServerAddress{}
	for _, s := range in.Config.Servers {
		addrs[s.ID] = s.Address
	}
	out := in
	out.Members = nil
	for _, m := range in.Members {
		id := raft.ServerID(m.ID)
		if !in.Verified[id] {
			addr, ok := addrs[id]
			if !ok {
				continue
			}
			m.RaftAddr = string(addr)
		}
		out.Members = append(out.Members, m)
	}
	return out
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
		if a.Kind == AddNonvoter || a.Kind == UpdateAddress || a.Kind == PromoteVoter {
			if in.RequireVerified && !in.Verified[a.ID] {
				return fmt.Errorf("%v of an unverified member", a)
			}
		}
	}
	if kinds[PromoteVoter] > 0 && kinds[DemoteVoter] > 0 {
		return fmt.Errorf("promotes and demotes in one round")
	}

	members := indexMembers(in.Members)
	cfg := in.Config
	v0 := countVoters(cfg)
	floor := min(v0, in.Policy.MinQuorum)
	removedVoters, lostDemotions := 0, 0
	// lost: raft does not reach it, and gossip agrees or the leader reached
	// it earlier in the term (it has progress). Gone voters are lost too.
	lost := func(id raft.ServerID) bool {
		m, ok := members[id]
		_, hasProgress := in.Progress[id]
		return id != in.Self && !in.Policy.reachable(in.Now, in.Progress[id]) &&
			(!ok || m.State == StateDead || m.State == StateLeft || hasProgress)
	}
	anyLostVoter := false
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter && lost(s.ID) {
			anyLostVoter = true
		}
	}
	maxVoters := in.Policy.maxVotersOdd()
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
			// An address claim is never a reason on its own; when the
			// reason names a claimant, it must be one that may claim.
			if _, by, ok := strings.Cut(a.Reason, "taken over by "); ok && in.RequireVerified && !in.Verified[raft.ServerID(by)] {
				return fmt.Errorf("removal for an unverified claimant: %v", a)
			}
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
		case DemoteVoter:
			// A healthy voter is demoted only if it asks to be, or for the
			// cap once no voter is lost; never to make the count odd.
			switch {
			case hasMember && m.State == StateAlive && !m.Leaving && m.NonVoter:
			case lost(a.ID):
				lostDemotions++
			case maxVoters >= 0 && v0 > maxVoters && !anyLostVoter:
			default:
				return fmt.Errorf("unjustified demotion %v (member %v %+v, progress %+v, %d voters)", a, hasMember, m, pr, v0)
			}
		}
	}
	// Adds of members that do not ask to stay non-voters fit under the cap
	// on pending non-voters, counted on the configuration after the round's
	// removals (none of the round's adds is ready yet).
	if limit := in.Policy.maxPending(); limit >= 0 {
		adds := 0
		for _, a := range actions {
			if a.Kind == AddNonvoter && !members[a.ID].NonVoter {
				adds++
			}
		}
		afterRemovals := in.Config.Clone()
		afterRemovals.Servers = slices.DeleteFunc(afterRemovals.Servers, func(s raft.Server) bool {
			return slices.ContainsFunc(actions, func(a Action) bool { return a.Kind == RemoveServer && a.ID == s.ID })
		})
		if pending := pendingNonVoters(in, afterRemovals); adds > 0 && pending+adds > limit {
			return fmt.Errorf("%d adds onto %d pending non-voters exceed the cap of %d", adds, pending, limit)
		}
	}
	if maxRemovals := max(0, (v0-1)/2); removedVoters > maxRemovals || lostDemotions > maxRemovals {
		return fmt.Errorf("removed %d and demoted %d lost of %d voters in one round", removedVoters, lostDemotions, v0)
	}
	if kinds[PromoteVoter] > 0 {
		// Promotions aim at an odd number of healthy voters, within the
		// cap; lost and gone voters do not count.
		healthy := 0
		for _, s := range cfg.Servers {
			if s.Suffrage == raft.Voter && !lost(s.ID) {
				healthy++
			}
		}
		if healthy%2 == 0 || (maxVoters >= 0 && healthy > maxVoters) {
			return fmt.Errorf("promotions leave %d healthy voters (cap %d)", healthy, maxVoters)
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
// where applied, voters never below min(MinQuorum, current), removals,
// promotions and demotions justified (an address claim never justifies a
// removal; a healthy voter is demoted only when it asks to be or for the
// cap, never for parity), at most (V-1)/2 voters removed and at most as
// many lost voters demoted per round, promotions leaving an odd number of
// healthy voters within the cap, adds,
// address updates and promotions only of verified members when
// RequireVerified, adds within the cap on pending non-voters, and the
// output independent of input order. With RequireVerified, the output must
// not change when the unverified members' claims are taken away (so none of
// them can cause any action, a voter's removal least of all); without it,
// Verified must not matter.
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
		other := in
		if in.RequireVerified {
			other = withoutUnverified(in)
		} else {
			other.Verified = nil
		}
		if again := Reconcile(other); !slices.Equal(actions, again) {
			t.Fatalf("iteration %d (seed %d): unverified members (RequireVerified %v) change the output:\n%s\nvs, without them:\n%s\ninput: %+v",
				iter, seed, in.RequireVerified, formatActions(actions, "  "), formatActions(again, "  "), in)
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

// scenario drives Reconcile as the leader's loop does, round by round:
// Tracker.Prepare, Reconcile, then the actions applied to the
// configuration, which carries over. Between rounds a test edits members
// (the gossip view) and reachable (the servers raft reaches, healthy and
// caught up, at each round's time). A server raft reached in an earlier
// round and no longer does keeps its last contact, unhealthy, as the
// leader's own replication view does (package cluster, collectProgress).
type scenario struct {
	t           *testing.T
	in          Input
	tracker     *Tracker
	members     map[string]Member
	reachable   map[raft.ServerID]bool
	lastContact map[raft.ServerID]time.Time
	last        Input // the last round's input, prepared
}

func newScenario(t *testing.T, pol Policy, voterIDs ...string) *scenario {
	sc := &scenario{t: t, tracker: NewTracker(), members: map[string]Member{}, reachable: map[raft.ServerID]bool{},
		lastContact: map[raft.ServerID]time.Time{}}
	sc.in = Input{Self: raft.ServerID(voterIDs[0]), Config: voters(voterIDs...), LeaderLastIndex: 1000, Policy: pol}
	for _, id := range voterIDs {
		sc.member(id, StateAlive, 0, "")
		sc.reachable[raft.ServerID(id)] = true
	}
	return sc
}

// member sets a member of the gossip view: state since at, claiming raft
// address addr ("" for <id>:7000).
func (sc *scenario) member(id string, state State, at time.Duration, addr string) {
	if addr == "" {
		addr = id + ":7000"
	}
	sc.members[id] = Member{Meta: Meta{ID: id, RaftAddr: addr}, State: state, StateChangedAt: t0.Add(at)}
}

// round runs one round at t0+now and returns its actions, formatted.
func (sc *scenario) round(now time.Duration) []string {
	sc.t.Helper()
	in := sc.in
	in.Now = t0.Add(now)
	in.Members = nil
	for _, m := range sc.members {
		in.Members = append(in.Members, m)
	}
	in.Progress = map[raft.ServerID]ServerProgress{}
	for id, ok := range sc.reachable {
		if ok {
			sc.lastContact[id] = in.Now
		}
	}
	for id, at := range sc.lastContact {
		in.Progress[id] = ServerProgress{LastIndex: in.LeaderLastIndex, LastContact: at, Healthy: sc.reachable[id]}
	}
	sc.tracker.Prepare(&in)
	sc.last = in
	actions := Reconcile(in)
	if err := checkActions(in, actions); err != nil {
		sc.t.Fatalf("at %v: %v\n%s", now, err, formatActions(actions, "  "))
	}
	var err error
	if sc.in.Config, err = applyToConfig(in.Config, actions); err != nil {
		sc.t.Fatalf("at %v: %v", now, err)
	}
	out := make([]string, len(actions))
	for i, a := range actions {
		out[i] = fmt.Sprintf("%s %s", a.Kind, a.ID)
	}
	return out
}

// quiet runs a round every second in [from, to) and fails on any action.
func (sc *scenario) quiet(from, to time.Duration) {
	sc.t.Helper()
	for now := from; now < to; now += time.Second {
		if got := sc.round(now); len(got) > 0 {
			sc.t.Fatalf("at %v: %v, want no actions", now, got)
		}
	}
}

func (sc *scenario) expect(now time.Duration, want ...string) {
	sc.t.Helper()
	if got := sc.round(now); !slices.Equal(got, want) {
		sc.t.Fatalf("at %v: %q, want %q", now, got, want)
	}
}

// TestReconcileImpostor replays the security review's attack on a
// five-voter cluster by someone holding only the gossip key: twelve fake
// members, then one claiming the raft address of n3 two seconds after n3
// went dead in gossip (a restart). That used to add the fakes as
// non-voters, remove n3 as taken over, and leave it out when it came back.
func TestReconcileImpostor(t *testing.T) {
	pol := DefaultPolicy() // a one-minute grace period
	pol.MinQuorum = 1
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	fakes := func(sc *scenario) {
		for i := 1; i <= 12; i++ {
			sc.member(fmt.Sprintf("f%02d", i), StateAlive, sec(1), "")
		}
	}
	verified := map[raft.ServerID]bool{"n1": true, "n2": true, "n3": true, "n4": true, "n5": true}

	t.Run("unverified", func(t *testing.T) {
		sc := newScenario(t, pol, "n1", "n2", "n3", "n4", "n5")
		sc.in.RequireVerified, sc.in.Verified = true, verified
		fakes(sc)
		sc.quiet(sec(1), sec(10))
		sc.member("n3", StateDead, sec(10), "")
		sc.reachable["n3"] = false
		sc.member("evil", StateAlive, sec(12), "n3:7000")
		sc.quiet(sec(10), sec(40))
		sc.member("n3", StateAlive, sec(40), "") // back from its restart
		sc.reachable["n3"] = true
		sc.quiet(sec(40), sec(300))
		if got := formatConfig(sc.in.Config); got != formatConfig(voters("n1", "n2", "n3", "n4", "n5")) {
			t.Fatalf("configuration changed:\n%s", got)
		}
		// Past the grace period, n3 goes as failed; the claim has no part.
		sc.member("n3", StateDead, sec(300), "")
		sc.reachable["n3"] = false
		sc.quiet(sec(300), sec(360))
		sc.expect(sec(360), "remove-server n3")
	})

	t.Run("verified claimant waits for the grace period", func(t *testing.T) {
		sc := newScenario(t, pol, "n1", "n2", "n3", "n4", "n5")
		sc.in.RequireVerified, sc.in.Verified = true, maps.Clone(verified)
		sc.in.Verified["n6"] = true
		sc.member("n3", StateDead, sec(10), "")
		sc.reachable["n3"] = false
		sc.member("n6", StateAlive, sec(12), "n3:7000")
		sc.quiet(sec(12), sec(70))
		sc.expect(sec(70), "remove-server n3", "add-nonvoter n6")
	})

	t.Run("without verification", func(t *testing.T) {
		// A caller that does not require verification still gets the grace
		// period and the cap: three fakes join, n3 stays through its restart.
		sc := newScenario(t, pol, "n1", "n2", "n3", "n4", "n5")
		fakes(sc)
		sc.expect(sec(1), "add-nonvoter f01", "add-nonvoter f02", "add-nonvoter f03")
		sc.quiet(sec(2), sec(10))
		sc.member("n3", StateDead, sec(10), "")
		sc.reachable["n3"] = false
		sc.member("evil", StateAlive, sec(12), "n3:7000")
		sc.quiet(sec(10), sec(40))
		sc.member("n3", StateAlive, sec(40), "")
		sc.reachable["n3"] = true
		sc.quiet(sec(40), sec(300))
	})
}

// TestReconcilePendingCap follows twelve new members through the cap on
// pending non-voters: three join, and another only as one of those becomes
// ready or is removed; a member asking to stay a non-voter is not held up.
func TestReconcilePendingCap(t *testing.T) {
	pol := DefaultPolicy()
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	sc := newScenario(t, pol, "n1")
	for i := 1; i <= 12; i++ {
		sc.member(fmt.Sprintf("m%02d", i), StateAlive, sec(1), "")
	}
	sc.member("x1", StateAlive, sec(1), "")
	m := sc.members["x1"]
	m.NonVoter = true
	sc.members["x1"] = m

	sc.expect(sec(1), "add-nonvoter m01", "add-nonvoter m02", "add-nonvoter m03", "add-nonvoter x1")
	sc.quiet(sec(2), sec(10))
	sc.reachable["m01"] = true // caught up: no longer pending
	sc.expect(sec(10), "add-nonvoter m04")
	sc.quiet(sec(11), sec(20))
	sc.reachable["m02"] = true // with m01, a pair to promote onto one voter
	sc.expect(sec(20), "add-nonvoter m05")
	sc.quiet(sec(21), sec(30))
	sc.expect(sec(30), "promote-voter m01", "promote-voter m02") // ready for 10s
	sc.quiet(sec(31), sec(40))
	sc.member("m03", StateDead, sec(40), "") // a pending one fails
	sc.quiet(sec(40), sec(100))
	sc.expect(sec(100), "remove-server m03", "add-nonvoter m06") // its grace period is over
	sc.quiet(sec(101), sec(200))
	if n := pendingNonVoters(sc.last, sc.in.Config); n != 3 {
		t.Fatalf("%d pending non-voters, want 3:\n%s", n, formatConfig(sc.in.Config))
	}
}

// TestReconcileReplacesFailedVoter follows a killed voter of a three-voter
// cluster with a ready non-voter (issue [ops2] item 8). The non-voter is
// promoted as soon as raft loses the voter, and the failed voter demoted
// the next round, so the cluster tolerates a failure again within two
// rounds instead of running on two of three voters for the whole grace
// period; the failed server is removed after the grace period, or is the
// new spare if it returns. No healthy voter is ever demoted.
func TestReconcileReplacesFailedVoter(t *testing.T) {
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	// setup returns a cluster n1-n3 with n4 added and ready, at 20s.
	setup := func(t *testing.T) *scenario {
		sc := newScenario(t, DefaultPolicy(), "n1", "n2", "n3") // grace 1m, stabilization 10s
		sc.member("n4", StateAlive, sec(1), "")
		sc.reachable["n4"] = true
		sc.expect(sec(1), "add-nonvoter n4")
		sc.quiet(sec(2), sec(20)) // one spare onto three voters: it waits
		return sc
	}
	want := func(t *testing.T, sc *scenario, cfg string) {
		t.Helper()
		if got := strings.TrimSpace(formatConfig(sc.in.Config)); got != cfg {
			t.Fatalf("configuration:\n%s\nwant:\n%s", got, cfg)
		}
	}

	t.Run("killed", func(t *testing.T) {
		sc := setup(t)
		// Raft loses n3 first (two heartbeat timeouts); gossip declares it
		// dead a few seconds later.
		sc.reachable["n3"] = false
		sc.expect(sec(20), "promote-voter n4")
		sc.expect(sec(21), "demote-voter n3")
		sc.member("n3", StateDead, sec(24), "")
		sc.quiet(sec(22), sec(84))
		sc.expect(sec(84), "remove-server n3") // its grace period is over
		sc.quiet(sec(85), sec(300))
		want(t, sc, "n1 voter n1:7000\n  n2 voter n2:7000\n  n4 voter n4:7000")
	})

	t.Run("returns within the grace period", func(t *testing.T) {
		sc := setup(t)
		sc.reachable["n3"] = false
		sc.member("n3", StateDead, sec(20), "")
		sc.expect(sec(20), "promote-voter n4")
		sc.expect(sec(21), "demote-voter n3")
		sc.quiet(sec(22), sec(40))
		// Back from a restart: n3 is the spare now, and waits as n4 did.
		sc.member("n3", StateAlive, sec(40), "")
		sc.reachable["n3"] = true
		sc.quiet(sec(40), sec(300))
		want(t, sc, "n1 voter n1:7000\n  n2 voter n2:7000\n  n3 nonvoter n3:7000\n  n4 voter n4:7000")
	})

	t.Run("returns before its demotion", func(t *testing.T) {
		sc := setup(t)
		sc.reachable["n3"] = false
		sc.expect(sec(20), "promote-voter n4")
		sc.reachable["n3"] = true
		// Four healthy voters: none is demoted to make the count odd (that
		// used to demote n2, an original voter, the lowest ID of the
		// caught-up ones).
		sc.quiet(sec(21), sec(100))
		want(t, sc, "n1 voter n1:7000\n  n2 voter n2:7000\n  n3 voter n3:7000\n  n4 voter n4:7000")
		// A fifth member joins and, ready, is promoted alone: five.
		sc.member("n5", StateAlive, sec(100), "")
		sc.reachable["n5"] = true
		sc.expect(sec(100), "add-nonvoter n5")
		sc.quiet(sec(101), sec(110))
		sc.expect(sec(110), "promote-voter n5")
		sc.quiet(sec(111), sec(200))
	})

	t.Run("no spare", func(t *testing.T) {
		// Without a ready non-voter the failed voter keeps its vote: three
		// voters, one failed, is odd, and demoting it would gain nothing
		// (and MinQuorum 3 forbids it).
		sc := newScenario(t, DefaultPolicy(), "n1", "n2", "n3")
		sc.quiet(0, sec(5))
		sc.reachable["n3"] = false
		sc.member("n3", StateDead, sec(6), "")
		sc.quiet(sec(5), sec(300))
		want(t, sc, "n1 voter n1:7000\n  n2 voter n2:7000\n  n3 voter n3:7000")
	})
}
