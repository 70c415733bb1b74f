package membership

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// ActionKind is a kind of raft configuration change. The constants are in
// the order a round's actions must be applied: shrink first, then change
// suffrage, then grow.
type ActionKind uint8

const (
	// RemoveServer removes the server from the configuration.
	RemoveServer ActionKind = iota + 1
	// UpdateAddress gives a configured server a new raft address, keeping
	// its suffrage.
	UpdateAddress
	// DemoteVoter makes a voter a non-voter.
	DemoteVoter
	// PromoteVoter makes a non-voter a voter.
	PromoteVoter
	// AddNonvoter adds a new server as a non-voter.
	AddNonvoter
)

func (k ActionKind) String() string {
	switch k {
	case RemoveServer:
		return "remove-server"
	case UpdateAddress:
		return "update-address"
	case DemoteVoter:
		return "demote-voter"
	case PromoteVoter:
		return "promote-voter"
	case AddNonvoter:
		return "add-nonvoter"
	default:
		return fmt.Sprintf("action(%d)", uint8(k))
	}
}

// Action is one configuration change Reconcile asks for.
type Action struct {
	Kind ActionKind
	ID   raft.ServerID
	// Addr is the server's raft address: the one to add or switch to for
	// AddNonvoter, UpdateAddress and PromoteVoter, the configured one
	// otherwise.
	Addr   raft.ServerAddress
	Reason string
	// Left is set on a RemoveServer of a server whose member left
	// gracefully; Incarnation is then that member's Meta.Incarnation. The
	// caller records the departure (Input.Departed) in replicated state
	// before it removes the server, so that no later leader re-adds it on a
	// stale gossip view.
	Left        bool
	Incarnation uint64
}

func (a Action) String() string {
	return fmt.Sprintf("%s %s %s: %s", a.Kind, a.ID, a.Addr, a.Reason)
}

// ServerProgress is the leader's view of one server's raft progress.
type ServerProgress struct {
	// LastIndex is the last log index the server has.
	LastIndex uint64
	// LastContact is when the leader last heard from the server.
	LastContact time.Time
	// Healthy is the caller's verdict on the server's raft health (it
	// answers, on the leader's term).
	Healthy bool
	// StableSince is when the server last became ready (Healthy, caught up
	// and in recent contact, see Policy) and has stayed so; zero if it is
	// not ready. Tracker.Prepare fills it in.
	StableSince time.Time
}

// Policy holds the tunables of Reconcile.
type Policy struct {
	// FailedGracePeriod is how long a failed server (memberlist says dead,
	// or it has no memberlist entry at all) may stay in the configuration
	// before it is removed, whether or not another member claims its raft
	// address.
	FailedGracePeriod time.Duration
	// MinQuorum is the number of voters Reconcile never takes the
	// configuration below by removing or demoting (if it is already below,
	// Reconcile never lowers it further).
	MinQuorum int
	// CatchUpThreshold is the largest lag behind the leader's last index
	// at which a server counts as caught up.
	CatchUpThreshold uint64
	// StabilizationTime is how long a non-voter must have been ready before
	// it is promoted.
	StabilizationTime time.Duration
	// MaxVoters caps the number of voters; an even cap is rounded down to
	// the odd number below it. Zero means no cap. Promotions count only
	// healthy voters against it (see Reconcile, rules 5 and 6): a ready
	// non-voter that replaces a lost voter takes the configuration over the
	// cap until the lost voter is demoted, the next round.
	MaxVoters int
	// MaxLastContact is the oldest leader contact a ready server may have;
	// zero disables the check.
	MaxLastContact time.Duration
	// MaxPendingNonVoters caps the pending non-voters: servers in the
	// configuration as non-voters that are not ready (healthy, caught up
	// and in recent contact) and whose member does not ask to stay a
	// non-voter (Meta.NonVoter). A round adds new members (AddNonvoter)
	// only while there is room under the cap, counting each such add as
	// pending, lowest member ID first; the others wait for a later round,
	// when pending servers have become ready or been removed. Members that
	// ask to stay non-voters are added regardless and never count. It
	// bounds the replication work (snapshots, log catch-up) new members
	// put on the leader; it does not keep fake members out
	// (Input.RequireVerified does). Zero means DefaultMaxPendingNonVoters;
	// negative means no cap.
	MaxPendingNonVoters int
}

// DefaultMaxPendingNonVoters is the cap on pending non-voters when
// Policy.MaxPendingNonVoters is zero.
const DefaultMaxPendingNonVoters = 3

// DefaultPolicy returns the policy a node uses unless configured otherwise.
func DefaultPolicy() Policy {
	return Policy{
		FailedGracePeriod:   time.Minute,
		MinQuorum:           3,
		CatchUpThreshold:    1024,
		StabilizationTime:   10 * time.Second,
		MaxVoters:           5,
		MaxLastContact:      5 * time.Second,
		MaxPendingNonVoters: DefaultMaxPendingNonVoters,
	}
}

// maxPending is the effective cap on pending non-voters, or -1 for no cap.
func (p Policy) maxPending() int {
	switch {
	case p.MaxPendingNonVoters == 0:
		return DefaultMaxPendingNonVoters
	case p.MaxPendingNonVoters < 0:
		return -1
	default:
		return p.MaxPendingNonVoters
	}
}

// maxVotersOdd is the effective voter cap: MaxVoters rounded down to odd, or
// -1 for no cap.
func (p Policy) maxVotersOdd() int {
	switch {
	case p.MaxVoters <= 0:
		return -1
	case p.MaxVoters%2 == 0:
		return p.MaxVoters - 1
	default:
		return p.MaxVoters
	}
}

// contactFresh reports whether a contact at t is recent enough at now.
func (p Policy) contactFresh(now, t time.Time) bool {
	return p.MaxLastContact <= 0 || now.Sub(t) <= p.MaxLastContact
}

// reachable reports whether raft itself says the server is up: healthy and
// in recent contact, regardless of its lag.
func (p Policy) reachable(now time.Time, pr ServerProgress) bool {
	return pr.Healthy && p.contactFresh(now, pr.LastContact)
}

// ready reports whether the server is healthy, caught up and in recent
// contact right now.
func (p Policy) ready(now time.Time, pr ServerProgress, leaderLastIndex uint64) bool {
	return p.reachable(now, pr) && pr.LastIndex+p.CatchUpThreshold >= leaderLastIndex
}

// Input is everything Reconcile decides from. Reconcile keeps no state: the
// two pieces of history it needs (since when a server has been missing from
// gossip, since when it has been ready) come in MissingSince and
// Progress[*].StableSince; Tracker maintains them.
type Input struct {
	Now time.Time
	// Self is the leader running the reconcile. It is never removed or
	// demoted: a leader that leaves does so on its shutdown path.
	Self raft.ServerID
	// Members is the gossip view, one entry per ID (if an ID repeats, the
	// entry with the latest StateChangedAt wins).
	Members []Member
	// Config is the latest raft configuration.
	Config raft.Configuration
	// Progress is the raft progress of configured servers; a server without
	// an entry is unhealthy.
	Progress map[raft.ServerID]ServerProgress
	// LeaderLastIndex is the leader's last log index.
	LeaderLastIndex uint64
	// MissingSince holds, for configured servers with no member entry, when
	// the caller first saw them missing. A missing server without an entry
	// counts as missing since Now.
	MissingSince map[raft.ServerID]time.Time
	// Departed holds the servers removed because they left gracefully,
	// with the Meta.Incarnation they left with (replicated through raft by
	// the caller, so every leader has it). Such a server is not added back
	// while its member's Incarnation is at most that: a leader whose
	// gossip has not yet heard of the leave still sees the old run alive.
	Departed map[raft.ServerID]uint64
	// RequireVerified makes gossip alone insufficient to join: with it set,
	// an alive member that Verified does not list is never added, never
	// given an UpdateAddress, never promoted if it is somehow configured as
	// a non-voter, and does not count as claiming its raft address (so it
	// cannot make another server taken over, or keep a verified member
	// from claiming that address). Gossip membership needs only the gossip
	// encryption key; this needs proof that the member is a peer. Servers
	// configured as voters are never demoted or removed for not being
	// verified. With RequireVerified unset, Verified is ignored.
	RequireVerified bool
	// Verified holds the members the caller (package cluster, verify.go)
	// has verified as peers: over a connection it opened itself to the
	// member's advertised gRPC address, the member presented a TLS
	// certificate naming its ID, or proved it holds the peer token. An ID
	// absent or false is not verified.
	Verified map[raft.ServerID]bool
	Policy   Policy
}

// verified reports whether the member id may join, claim an address or be
// promoted: always when RequireVerified is unset, else if Verified lists it.
func (in *Input) verified(id raft.ServerID) bool {
	return !in.RequireVerified || in.Verified[id]
}

// heldBack reports whether m is a run of a server that departed (Input.Departed)
// and has not rejoined since: its Incarnation is known and not newer than
// the one it left with.
func (in *Input) heldBack(m Member) bool {
	inc, ok := in.Departed[raft.ServerID(m.ID)]
	return ok && m.Incarnation != 0 && m.Incarnation <= inc
}

// serverView is Reconcile's working state for one configured server.
type serverView struct {
	raft.Server
	member      Member
	hasMember   bool
	progress    ServerProgress
	hasProgress bool // Input.Progress has an entry: raft reached it in this term
	// gone: the server will not serve again (left, or failed past the
	// grace period) and is to be removed.
	gone bool
	// lost: not Self, not gone, and raft does not reach it, which gossip
	// confirms (dead, left or unknown) or this leader saw happen (it reached
	// the server earlier in its term: hasProgress). A lost voter is not a
	// healthy voter (rule 5) and is the first to be demoted (rule 6).
	lost bool
	// goneRank orders removals when not all are allowed: left (0) before
	// taken over (1, failed and its address claimed) before failed (2).
	goneRank int
	since    time.Time // for failed servers: start of the failure
	why      string
	removed  bool
	// touched: the round already has an action on this server (at most one
	// per server per round).
	touched bool
}

func (s *serverView) voter() bool { return s.Suffrage == raft.Voter }

// removal returns the RemoveServer action of a gone server.
func (s *serverView) removal() Action {
	a := Action{Kind: RemoveServer, ID: s.ID, Addr: s.Address, Reason: s.why}
	if s.goneRank == 0 {
		a.Left, a.Incarnation = true, s.member.Incarnation
	}
	return a
}

// aliveMember reports whether s has a member that is alive and not leaving.
func (s *serverView) aliveMember() bool {
	return s.hasMember && s.member.State == StateAlive && !s.member.Leaving
}

// Reconcile returns the configuration changes that bring the raft
// configuration in line with the gossip view, sorted by (Kind, ID), which is
// also the order to apply them. It is a pure function of its input. The
// policy, rule by rule (doc.go has the reasoning):
//
//  1. A configured server (never Self) is gone if its member left
//     gracefully and raft does not still reach it; or if it failed (memberlist says dead since
//     StateChangedAt, or it has no member since MissingSince) at least
//     FailedGracePeriod ago and raft does not still reach it (Progress
//     Healthy with a fresh LastContact). Nothing else makes a server gone:
//     an alive member claiming its raft address does not, however long the
//     server has failed (a claim is gossip, and anyone holding the gossip
//     key can make one).
//  2. Gone non-voters are removed. Gone voters are removed (left first, then
//     taken over, i.e. failed and their raft address claimed under rule 3,
//     then longest failed, then by ID) while the voter count stays at or
//     above MinQuorum, and at most (V-1)/2 of the V voters per round: a
//     leader that can commit has lost no more than that.
//  3. An alive member that is not leaving, not Self, verified (if
//     RequireVerified) and whose raft address is free, or held by a gone
//     server removed in this round, is added as a non-voter if not
//     configured, or gets an UpdateAddress if configured elsewhere; of
//     several such members claiming one address, the first by ID has it. A
//     member not configured that departed (Departed) is added only once
//     gossip shows a newer Incarnation (it rejoined). Adds of members that
//     do not ask to stay non-voters (Meta.NonVoter) are emitted, lowest ID
//     first, only while the pending non-voters stay within
//     MaxPendingNonVoters: configured non-voters that are not ready, not
//     NonVoter and not removed in this round, plus this round's adds; the
//     others wait. Removals for a graceful leave carry the member's
//     Incarnation (Action.Left).
//  4. Voters whose member asks to be a non-voter (Meta.NonVoter) are demoted,
//     floor permitting. A round that demotes does not promote.
//  5. Otherwise non-voters whose member is alive, not leaving, not NonVoter
//     and verified (if RequireVerified), and that have been ready for
//     StabilizationTime, are promoted, most caught up first, as many as
//     keep the count of healthy voters at or under the (odd) voter cap and
//     odd: if that count is odd and one non-voter is ready it waits for a
//     second. Healthy voters are those neither gone nor lost. A voter other
//     than Self is lost if raft does not reach it and either gossip says it
//     is dead, left or unknown, or it has Progress (raft reached it earlier
//     in the leader's term) that is unhealthy or stale; a voter alive in
//     gossip with no Progress is not lost. So a ready non-voter replaces a
//     lost voter at once, while the lost voter's grace period runs.
//  6. If nothing else happens in a round (no removal, no promotion), voters
//     are demoted, floor permitting, while the count of voters that are not
//     gone exceeds the cap, or one voter if that count is even and four or
//     more. Lost voters go first, least caught up first, at most (V-1)/2 of
//     the V voters per round. Healthy voters (never Self) are demoted only
//     for the cap, and only if every voter is alive, not leaving, not gone
//     and not lost; least caught up first. A healthy voter is never demoted
//     to make the count odd.
func Reconcile(in Input) []Action {
	p := in.Policy
	members := indexMembers(in.Members)

	// Classify every configured server.
	var servers []*serverView
	byID := make(map[raft.ServerID]*serverView, len(in.Config.Servers))
	byAddr := make(map[raft.ServerAddress]*serverView, len(in.Config.Servers))
	for _, rs := range in.Config.Servers {
		if _, dup := byID[rs.ID]; dup {
			continue // raft never produces this; keep the first
		}
		s := &serverView{Server: rs}
		s.progress, s.hasProgress = in.Progress[rs.ID]
		s.member, s.hasMember = members[rs.ID]
		servers = append(servers, s)
		byID[rs.ID] = s
		if _, dup := byAddr[rs.Address]; !dup {
			byAddr[rs.Address] = s
		}
		if rs.ID == in.Self {
			continue
		}
		var failedWhat string
		switch {
		case s.hasMember && s.member.State == StateLeft:
			// Anyone with the gossip key can broadcast a leave in another
			// member's name (memberlist takes it until the member refutes
			// it): a server raft still reaches has not gone. A node that
			// really leaves stops its raft right after (Node.Shutdown).
			if p.reachable(in.Now, s.progress) {
				continue
			}
			s.gone, s.goneRank, s.why = true, 0, fmt.Sprintf("left gracefully (incarnation %d)", s.member.Incarnation)
			continue
		case s.hasMember && s.member.State == StateDead:
			s.since = s.member.StateChangedAt
			failedWhat = "failed"
		case !s.hasMember:
			s.since = in.Now
			if t, ok := in.MissingSince[rs.ID]; ok {
				s.since = t
			}
			failedWhat = "unknown to gossip"
		default:
			continue // alive or suspect
		}
		if failedFor := in.Now.Sub(s.since); failedFor >= p.FailedGracePeriod && !p.reachable(in.Now, s.progress) {
			s.gone, s.goneRank = true, 2
			s.why = fmt.Sprintf("%s for %s (grace %s)", failedWhat, failedFor, p.FailedGracePeriod)
		}
	}

	// Decide in ID order from here on, whatever the configuration's order.
	slices.SortFunc(servers, func(a, b *serverView) int { return strings.Compare(string(a.ID), string(b.ID)) })

	// Lost servers: raft does not reach them, and either gossip agrees or
	// raft reached them earlier in this term. A server alive in gossip that
	// has not answered this leader yet (a new leader's first rounds) is not
	// lost: nothing is known against it.
	for _, s := range servers {
		if s.ID == in.Self || s.gone || p.reachable(in.Now, s.progress) {
			continue
		}
		downInGossip := !s.hasMember || s.member.State == StateDead || s.member.State == StateLeft
		s.lost = downInGossip || s.hasProgress
	}

	// Alive (and, if required, verified) members that need a configuration
	// entry or a new address. An address held by another server blocks them
	// unless that server is gone; a failed one is then taken over.
	type want struct {
		kind    ActionKind
		m       Member
		blocker *serverView // must be removed first, or nil
		from    raft.ServerAddress
	}
	var wants []want
	claimed := make(map[raft.ServerAddress]bool)
	for _, m := range sortedMembers(members) {
		id, addr := raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr)
		if id == in.Self || m.State != StateAlive || m.Leaving || addr == "" || !in.verified(id) {
			continue
		}
		w := want{kind: AddNonvoter, m: m}
		if s, ok := byID[id]; ok {
			if s.Address == addr {
				continue
			}
			w.kind, w.from = UpdateAddress, s.Address
		} else if in.heldBack(m) {
			continue // departed; this is a stale view of its last run
		}
		if claimed[addr] {
			continue // another alive member claims it too; the first by ID wins
		}
		if owner := byAddr[addr]; owner != nil {
			if !owner.gone {
				continue // Self, or a server that may still serve (rule 1)
			}
			if owner.goneRank == 2 {
				owner.goneRank = 1
				owner.why = fmt.Sprintf("%s, raft address %s taken over by %s", owner.why, addr, id)
			}
			w.blocker = owner
		}
		claimed[addr] = true
		wants = append(wants, w)
	}

	var actions []Action

	// Removals: non-voters freely, voters within the floor and the cap.
	voters := 0
	var goneVoters []*serverView
	for _, s := range servers {
		if s.voter() {
			voters++
		}
		if !s.gone {
			continue
		}
		if !s.voter() {
			s.removed, s.touched = true, true
			actions = append(actions, s.removal())
			continue
		}
		goneVoters = append(goneVoters, s)
	}
	slices.SortFunc(goneVoters, func(a, b *serverView) int {
		return cmp.Or(cmp.Compare(a.goneRank, b.goneRank), a.since.Compare(b.since), strings.Compare(string(a.ID), string(b.ID)))
	})
	maxVoterRemovals := (voters - 1) / 2
	v := voters // voters in the configuration as the round's actions apply
	for _, s := range goneVoters {
		if v-1 < p.MinQuorum || voters-v >= maxVoterRemovals {
			continue
		}
		s.removed, s.touched = true, true
		v--
		actions = append(actions, s.removal())
	}
	removals := len(actions)

	// Adds and address updates whose address is free; adds only within the
	// cap on pending non-voters.
	maxPending, pending := p.maxPending(), 0
	for _, s := range servers {
		if !s.voter() && !s.removed && !(s.hasMember && s.member.NonVoter) && !p.ready(in.Now, s.progress, in.LeaderLastIndex) {
			pending++
		}
	}
	for _, w := range wants {
		if w.blocker != nil && !w.blocker.removed {
			continue
		}
		a := Action{Kind: w.kind, ID: raft.ServerID(w.m.ID), Addr: raft.ServerAddress(w.m.RaftAddr)}
		if w.kind == AddNonvoter {
			if maxPending >= 0 && !w.m.NonVoter {
				if pending >= maxPending {
					continue // waits for a pending non-voter to become ready or go
				}
				pending++
			}
			a.Reason = "alive member not in the configuration"
		} else {
			a.Reason = fmt.Sprintf("raft address changed from %s", w.from)
			byID[a.ID].touched = true
		}
		actions = append(actions, a)
	}

	// Voters that asked to be non-voters.
	demoted := false
	for _, s := range servers {
		if s.ID == in.Self || !s.voter() || s.gone || s.touched || !s.aliveMember() || !s.member.NonVoter {
			continue
		}
		if v-1 < p.MinQuorum {
			break
		}
		v--
		demoted = true
		actions = append(actions, Action{Kind: DemoteVoter, ID: s.ID, Addr: s.Address, Reason: "member asked to be a non-voter"})
	}
	if demoted {
		return sortActions(actions)
	}

	// Promotions.
	live := 0    // voters that are not gone
	healthy := 0 // voters that are neither gone nor lost
	settled := true
	var candidates []*serverView
	for _, s := range servers {
		if s.voter() {
			if !s.gone {
				live++
				if !s.lost {
					healthy++
				}
			}
			if s.ID != in.Self && (!s.aliveMember() || s.gone || s.lost) {
				settled = false
			}
			continue
		}
		if s.removed || s.gone || s.touched || !s.aliveMember() || s.member.NonVoter || !in.verified(s.ID) {
			continue
		}
		if !p.ready(in.Now, s.progress, in.LeaderLastIndex) || s.progress.StableSince.IsZero() ||
			in.Now.Sub(s.progress.StableSince) < p.StabilizationTime {
			continue
		}
		candidates = append(candidates, s)
	}
	slices.SortFunc(candidates, func(a, b *serverView) int {
		return cmp.Or(cmp.Compare(b.progress.LastIndex, a.progress.LastIndex), strings.Compare(string(a.ID), string(b.ID)))
	})
	maxVoters := p.maxVotersOdd()
	k := len(candidates)
	if maxVoters >= 0 {
		k = max(0, min(k, maxVoters-healthy))
	}
	if k > 0 && (healthy+k)%2 == 0 {
		k--
	}
	for _, s := range candidates[:k] {
		actions = append(actions, Action{Kind: PromoteVoter, ID: s.ID, Addr: s.Address, Reason: fmt.Sprintf(
			"caught up (last index %d of %d) and ready for %s", s.progress.LastIndex, in.LeaderLastIndex, in.Now.Sub(s.progress.StableSince))})
	}
	if k > 0 || removals > 0 {
		return sortActions(actions)
	}

	// Shrink to the cap, or to odd, demoting lost voters first. Healthy
	// voters are demoted only for the cap, and only once every voter is
	// settled; never for parity, which would buy no fault tolerance.
	excess, why := 0, ""
	switch {
	case maxVoters >= 0 && live > maxVoters:
		excess, why = live-maxVoters, fmt.Sprintf("%d voters exceed the cap of %d", live, maxVoters)
	case live%2 == 0 && live >= 4:
		excess, why = 1, fmt.Sprintf("even number of voters (%d)", live)
	}
	if excess == 0 {
		return sortActions(actions)
	}
	// The victims are lost voters or, for the cap and only once settled
	// (so none is lost), healthy ones.
	var victims []*serverView
	for _, s := range servers {
		if !s.voter() || s.ID == in.Self || s.touched || s.gone {
			continue
		}
		if s.lost || (settled && maxVoters >= 0 && live > maxVoters) {
			victims = append(victims, s)
		}
	}
	slices.SortFunc(victims, func(a, b *serverView) int {
		return cmp.Or(cmp.Compare(a.progress.LastIndex, b.progress.LastIndex), strings.Compare(string(a.ID), string(b.ID)))
	})
	lostDemotions := 0
	for _, s := range victims {
		if excess == 0 || v-1 < p.MinQuorum || (s.lost && lostDemotions >= maxVoterRemovals) {
			break
		}
		reason := why
		if s.lost {
			lostDemotions++
			reason += ", and raft does not reach this one"
		}
		excess--
		v--
		actions = append(actions, Action{Kind: DemoteVoter, ID: s.ID, Addr: s.Address, Reason: reason})
	}
	return sortActions(actions)
}

// indexMembers maps members by ID. Of several members with one ID the one
// with the latest state change wins; remaining ties are broken on the other
// fields so the result does not depend on the order of ms.
func indexMembers(ms []Member) map[raft.ServerID]Member {
	out := make(map[raft.ServerID]Member, len(ms))
	for _, m := range ms {
		if m.ID == "" {
			continue
		}
		id := raft.ServerID(m.ID)
		if prev, ok := out[id]; ok && comparePrecedence(m, prev) >= 0 {
			continue
		}
		out[id] = m
	}
	return out
}

// comparePrecedence orders two members with the same ID, the preferred one
// first.
func comparePrecedence(a, b Member) int {
	return cmp.Or(
		b.StateChangedAt.Compare(a.StateChangedAt),
		cmp.Compare(a.State, b.State),
		strings.Compare(a.RaftAddr, b.RaftAddr),
		strings.Compare(a.Addr, b.Addr),
		strings.Compare(a.GRPCAddr, b.GRPCAddr),
		cmp.Compare(a.Version, b.Version),
		compareBool(a.Leaving, b.Leaving),
		compareBool(a.NonVoter, b.NonVoter),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

func sortedMembers(ms map[raft.ServerID]Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func sortActions(as []Action) []Action {
	slices.SortFunc(as, func(a, b Action) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(string(a.ID), string(b.ID)))
	})
	return as
}
