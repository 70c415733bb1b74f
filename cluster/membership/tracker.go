package membership

import (
	"maps"
	"time"

	"github.com/hashicorp/raft"
)

// Tracker keeps, between reconcile rounds, the history Reconcile needs but
// must not keep itself: since when each configured server has been missing
// from gossip, and since when each server has been ready. It reads no clock
// (time comes in Input.Now), so it is tested without sleeps. A Tracker is
// used by one reconcile loop and is not safe for concurrent use.
type Tracker struct {
	missingSince map[raft.ServerID]time.Time
	readySince   map[raft.ServerID]time.Time
}

// NewTracker returns a Tracker with no history, as on a new leader.
func NewTracker() *Tracker {
	return &Tracker{
		missingSince: make(map[raft.ServerID]time.Time),
		readySince:   make(map[raft.ServerID]time.Time),
	}
}

// Prepare fills in in.MissingSince and the StableSince of every entry of
// in.Progress from the history and the observations in in (Members, Config,
// Progress, Now, Policy), and updates the history. Progress is copied, not
// modified in place. Call it once per round, just before Reconcile.
//
// A server missing from Members is missing since the first round it was seen
// missing, until it reappears or leaves the configuration. A server is ready
// since the first round it was seen ready (Policy: healthy, caught up and in
// recent contact), until a round sees it not ready or without progress.
func (t *Tracker) Prepare(in *Input) {
	present := make(map[raft.ServerID]bool, len(in.Members))
	for _, m := range in.Members {
		present[raft.ServerID(m.ID)] = true
	}
	configured := make(map[raft.ServerID]bool, len(in.Config.Servers))
	for _, s := range in.Config.Servers {
		configured[s.ID] = true
		if present[s.ID] {
			delete(t.missingSince, s.ID)
		} else if _, ok := t.missingSince[s.ID]; !ok {
			t.missingSince[s.ID] = in.Now
		}
	}
	maps.DeleteFunc(t.missingSince, func(id raft.ServerID, _ time.Time) bool { return !configured[id] })
	in.MissingSince = maps.Clone(t.missingSince)

	progress := make(map[raft.ServerID]ServerProgress, len(in.Progress))
	for id, pr := range in.Progress {
		if in.Policy.ready(in.Now, pr, in.LeaderLastIndex) {
			if _, ok := t.readySince[id]; !ok {
				t.readySince[id] = in.Now
			}
			pr.StableSince = t.readySince[id]
		} else {
			delete(t.readySince, id)
			pr.StableSince = time.Time{}
		}
		progress[id] = pr
	}
	maps.DeleteFunc(t.readySince, func(id raft.ServerID, _ time.Time) bool {
		_, ok := in.Progress[id]
		return !ok
	})
	in.Progress = progress
}
