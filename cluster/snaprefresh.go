package cluster

import (
	"time"

	"github.com/cairnkv/cairn/fsm/snapstore"
)

// Snapshot refresh: bounding what the newest snapshot keeps on disk.
//
// A snapshot in fsm/snapstore is hard links to the engine's tables; once
// compaction replaces them in the engine, the snapshot alone keeps the old
// ones. After a bulk load compaction rewrites nearly everything, and the
// newest snapshot then holds a second copy of the data (bench/RESULTS.md,
// [ops]: 1.61x the engine and raft log at 1 GiB). Every
// snapshotRefreshInterval the node compares what the newest snapshot pins
// with the live engine, and when it exceeds snapshotRefreshRatio of it
// (and snapshotRefreshMinBytes), replaces the snapshot by one of the same
// raft position holding a fresh checkpoint of the engine
// (snapstore.Store.Refresh explains why that is a valid snapshot for that
// position). A checkpoint is a flush and hard links: it writes the
// memtable, not the data. A check lists the snapshots' and the engine's
// files and stats them, reading nothing. Between a compaction's end and
// the next check (and the refresh's flush) its inputs stay pinned: after
// a bulk load, one compaction can free half the engine at once.
const (
	snapshotRefreshInterval = time.Second
	snapshotRefreshRatio    = 0.15
	snapshotRefreshMinBytes = 32 << 20
)

// refreshSnapshotsLoop runs maybeRefreshSnapshot every
// snapshotRefreshInterval until the node stops.
func (n *Node) refreshSnapshotsLoop(ss *snapstore.Store, engineDir string) {
	defer n.wg.Done()
	t := time.NewTicker(snapshotRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.maybeRefreshSnapshot(ss, engineDir, snapshotRefreshRatio, snapshotRefreshMinBytes)
	}
}

// maybeRefreshSnapshot refreshes the snapshots of ss that pin engine
// files if together they pin more than ratio of the engine in engineDir
// and at least minBytes. It reports whether it refreshed any.
func (n *Node) maybeRefreshSnapshot(ss *snapstore.Store, engineDir string, ratio float64, minBytes int64) bool {
	byID, pinned, live, err := ss.Pinned(engineDir)
	if err != nil || len(byID) == 0 || pinned < minBytes || float64(pinned) < ratio*float64(live) {
		return false
	}
	c, err := n.fsm.Checkpoint()
	if err != nil {
		n.log.Warn("cluster: snapshot refresh: checkpoint", "err", err)
		return false
	}
	defer func() {
		if err := c.Release(); err != nil {
			n.log.Warn("cluster: snapshot refresh: releasing checkpoint", "err", err)
		}
	}()
	refreshed := false
	for id, p := range byID {
		if p == 0 {
			continue
		}
		newID, err := ss.Refresh(id, c)
		if err != nil {
			// Reaped meanwhile, or a snapshot received ahead of the
			// engine (a restore under way): the next round looks again.
			n.log.Info("cluster: snapshot refresh skipped", "snapshot", id, "err", err)
			continue
		}
		refreshed = true
		n.log.Info("cluster: refreshed snapshot: it kept engine files compaction had replaced",
			"old", id, "new", newID, "pinned_bytes", p, "engine_bytes", live, "applied_index", c.AppliedIndex)
	}
	return refreshed
}
