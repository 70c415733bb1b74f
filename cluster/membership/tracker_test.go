package membership

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func voters(ids ...string) raft.Configuration {
	var cfg raft.Configuration
	for _, id := range ids {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":7000")})
	}
	return cfg
}

func aliveMembers(ids ...string) []Member {
	var ms []Member
	for _, id := range ids {
		ms = append(ms, Member{Meta: Meta{ID: id, RaftAddr: id + ":7000"}, State: StateAlive})
	}
	return ms
}

func TestTrackerMissingSince(t *testing.T) {
	tr := NewTracker()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, step := range []struct {
		now     int
		config  []string
		members []string
		want    string // MissingSince, sorted
	}{
		{0, []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, "n3@0"},
		{10, []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, "n3@0"},                // still missing since 0
		{20, []string{"n1", "n2", "n3"}, []string{"n1", "n3"}, "n2@20"},               // n2 goes missing, n3 is back
		{30, []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3"}, ""},              // both back
		{40, []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, "n3@40"},               // the clock restarts
		{50, []string{"n1", "n2"}, []string{"n1", "n2"}, ""},                          // n3 removed: forgotten
		{60, []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, "n3@60"},               // re-added: new history
		{70, []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3", "n4"}, ""},        // members not configured: ignored
		{80, []string{"n1", "n2", "n3", "n5"}, []string{"n1", "n2", "n3"}, "n5@80"},   // never seen at all
		{90, []string{"n1", "n2", "n3", "n5"}, []string{"n1", "n2", "n3"}, "n5@80"},   // still
		{90, []string{"n1", "n2", "n3", "n5"}, []string{"n1", "n2", "n3"}, "n5@80"},   // same time twice
		{100, []string{"n1", "n2", "n3", "n5"}, []string{"n2", "n3", "n5"}, "n1@100"}, // even self
	} {
		in := Input{Now: at(step.now), Config: voters(step.config...), Members: aliveMembers(step.members...)}
		tr.Prepare(&in)
		got := ""
		for _, id := range []raft.ServerID{"n1", "n2", "n3", "n4", "n5"} {
			if since, ok := in.MissingSince[id]; ok {
				if got != "" {
					got += " "
				}
				got += fmt.Sprintf("%s@%d", id, int(since.Sub(t0).Seconds()))
			}
		}
		if got != step.want {
			t.Fatalf("at %ds: MissingSince %q, want %q", step.now, got, step.want)
		}
	}
}

func TestTrackerStableSince(t *testing.T) {
	tr := NewTracker()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	pol := Policy{CatchUpThreshold: 10, MaxLastContact: 5 * time.Second}
	const leaderLast = 100
	ready := func(now int) ServerProgress {
		return ServerProgress{LastIndex: leaderLast, LastContact: at(now), Healthy: true}
	}
	for _, step := range []struct {
		now  int
		p    *ServerProgress // progress of n2; nil: none
		want int             // StableSince in seconds; -1: zero
	}{
		{0, ptr(ready(0)), 0},
		{10, ptr(ready(10)), 0},
		{20, &ServerProgress{LastIndex: leaderLast - 11, LastContact: at(20), Healthy: true}, -1}, // too far behind
		{30, ptr(ready(30)), 30},
		{40, &ServerProgress{LastIndex: leaderLast - 10, LastContact: at(40), Healthy: true}, 30}, // at the threshold
		{50, &ServerProgress{LastIndex: leaderLast, LastContact: at(44), Healthy: true}, -1},      // contact 6s old
		{60, ptr(ready(60)), 60},
		{70, &ServerProgress{LastIndex: leaderLast, LastContact: at(70)}, -1}, // unhealthy
		{80, ptr(ready(80)), 80},
		{90, nil, -1}, // no progress: forgotten
		{100, ptr(ready(100)), 100},
	} {
		orig := map[raft.ServerID]ServerProgress{}
		if step.p != nil {
			orig["n2"] = *step.p
		}
		in := Input{Now: at(step.now), Policy: pol, LeaderLastIndex: leaderLast, Config: voters("n1", "n2"),
			Members: aliveMembers("n1", "n2"), Progress: orig}
		tr.Prepare(&in)
		got := in.Progress["n2"].StableSince
		want := time.Time{}
		if step.want >= 0 {
			want = at(step.want)
		}
		if !got.Equal(want) {
			t.Fatalf("at %ds: StableSince %v, want %v", step.now, got, want)
		}
		if step.p != nil && !orig["n2"].StableSince.IsZero() {
			t.Fatalf("at %ds: Prepare modified the caller's progress map", step.now)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestTrackerWithReconcile drives rounds of Tracker+Reconcile with a
// simulated clock: two members join a lone leader, are added, and promoted
// only once they have been ready for the stabilization time; later a
// server vanishes from gossip and is removed only after the grace period.
func TestTrackerWithReconcile(t *testing.T) {
	pol := Policy{FailedGracePeriod: 30 * time.Second, MinQuorum: 1, CatchUpThreshold: 10,
		StabilizationTime: 10 * time.Second, MaxVoters: 5, MaxLastContact: 5 * time.Second}
	tr := NewTracker()
	cfg := voters("n1")
	members := aliveMembers("n1", "n2", "n3")
	round := func(sec int) []Action {
		now := t0.Add(time.Duration(sec) * time.Second)
		progress := map[raft.ServerID]ServerProgress{}
		for _, s := range cfg.Servers {
			progress[s.ID] = ServerProgress{LastIndex: 100, LastContact: now, Healthy: true}
		}
		in := Input{Now: now, Self: "n1", Members: members, Config: cfg, Progress: progress, LeaderLastIndex: 100, Policy: pol}
		tr.Prepare(&in)
		actions := Reconcile(in)
		var err error
		if cfg, err = applyToConfig(cfg, actions); err != nil {
			t.Fatalf("at %ds: %v", sec, err)
		}
		return actions
	}
	kinds := func(as []Action) string {
		s := ""
		for _, a := range as {
			s += fmt.Sprintf("%s:%s ", a.Kind, a.ID)
		}
		return s
	}
	expect := func(sec int, want string) {
		t.Helper()
		if got := kinds(round(sec)); got != want {
			t.Fatalf("at %ds: actions %q, want %q", sec, got, want)
		}
	}
	expect(0, "add-nonvoter:n2 add-nonvoter:n3 ")
	expect(1, "") // ready since 1s
	expect(5, "")
	expect(10, "") // ready for 9s
	expect(11, "promote-voter:n2 promote-voter:n3 ")
	expect(12, "")

	members = aliveMembers("n1", "n2") // n3 vanishes from gossip
	expect(20, "")                     // missing since 20s
	// Rounds in which raft has lost n3 too.
	unreachable := func(sec int) string {
		now := t0.Add(time.Duration(sec) * time.Second)
		progress := map[raft.ServerID]ServerProgress{
			"n1": {LastIndex: 100, LastContact: now, Healthy: true},
			"n2": {LastIndex: 100, LastContact: now, Healthy: true},
		}
		in := Input{Now: now, Self: "n1", Members: members, Config: cfg, Progress: progress, LeaderLastIndex: 100, Policy: pol}
		tr.Prepare(&in)
		return kinds(Reconcile(in))
	}
	if got := unreachable(49); got != "" { // missing for 29s
		t.Fatalf("at 49s: %q", got)
	}
	expect(50, "") // missing for 30s, but raft still reaches it
	if got := unreachable(50); got != "remove-server:n3 " {
		t.Fatalf("at 50s: %q", got)
	}
}
