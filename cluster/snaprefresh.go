package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cairnkv/cairn/fsm/snapstore"
	"github.com/cairnkv/cairn/lsm"
)

// Snapshot refresh: bounding what the newest snapshot keeps on disk.
//
// A snapshot in fsm/snapstore is hard links to the engine's tables; once
// compaction replaces them in the engine, the snapshot alone keeps the old
// ones. After a bulk load compaction rewrites nearly everything, and the
// newest snapshot then holds a second copy of the data (bench/RESULTS.md,
// [ops]: 1.61x the engine and raft log at 1 GiB). When the snapshots pin
// more than Ratio of the live engine (and MinBytes), the node replaces
// each by a snapshot of the same raft position holding a fresh checkpoint
// of the engine (snapstore.Store.Refresh explains why that is a valid
// snapshot for that position). A checkpoint is a flush and hard links: it
// writes the memtable, not the data. A check lists the snapshots' and the
// engine's files and stats them, reading nothing.
//
// The node checks as soon as the engine reports a compaction
// (lsm.EventListener.CompactionInstalled), counting that compaction's
// inputs as replaced before the engine has deleted them, as soon as a
// snapshot is committed (one taken while a compaction ran may link its
// inputs, replaced before the snapshot existed), and every Interval
// besides (blob files that blob GC replaces are not reported).
// Polling alone left a compaction's inputs pinned until the next check.
// That alone did not remove the 1.4x peaks of bench/restart, though: the
// refresh itself (a flush, links and fsyncs under the load of the
// compaction) and the unlinking of what the old snapshot alone held take
// seconds. What did is that no compaction replaces most of the engine at
// once any more (lsm's grandparent cut, bench/RESULTS.md [ops]); an L0
// compaction into a base level that is the bottom one still rewrites all
// of it (below 640 MiB of engine by default).
type refreshPolicy struct {
	Interval time.Duration
	Ratio    float64
	MinBytes int64
}

// snapshotRefresh is the policy of every node (tests change it).
var snapshotRefresh = refreshPolicy{Interval: time.Second, Ratio: 0.15, MinBytes: 32 << 20}

// compactionEvents collects the tables the engine's compactions replaced
// since the refresh loop last looked, and wakes the loop. The engine calls
// it on its compaction goroutine, which must not wait.
type compactionEvents struct {
	mu       sync.Mutex
	replaced []string
	poke     chan struct{} // capacity one
}

func newCompactionEvents() *compactionEvents {
	return &compactionEvents{poke: make(chan struct{}, 1)}
}

// listener returns the engine's event listener: next (the configured one,
// if any) with its CompactionInstalled preceded by e's.
func (e *compactionEvents) listener(next *lsm.EventListener) *lsm.EventListener {
	l := &lsm.EventListener{}
	if next != nil {
		*l = *next
	}
	nextCompaction := l.CompactionInstalled
	l.CompactionInstalled = func(info lsm.CompactionInfo) {
		if len(info.Inputs) > 0 {
			e.mu.Lock()
			for _, in := range info.Inputs {
				e.replaced = append(e.replaced, in.FileName)
			}
			e.mu.Unlock()
			e.wake()
		}
		if nextCompaction != nil {
			nextCompaction(info)
		}
	}
	return l
}

// wake wakes the refresh loop without waiting.
func (e *compactionEvents) wake() {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// take returns the tables reported since the last call.
func (e *compactionEvents) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.replaced
	e.replaced = nil
	return r
}

// refreshSnapshotsLoop runs maybeRefreshSnapshot whenever the engine
// reports a compaction and every p.Interval, until the node stops.
func (n *Node) refreshSnapshotsLoop(ss *snapstore.Store, engineDir string, p refreshPolicy) {
	defer n.wg.Done()
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	// A first check at once: snapshots may pin files since before a
	// restart.
	n.compactions.wake()
	// replaced are the reported tables still in the engine's directory:
	// a reader of an older version may keep one there long after the
	// report, and it must not count as live meanwhile.
	var replaced []string
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.compactions.poke:
		}
		replaced = append(replaced, n.compactions.take()...)
		n.maybeRefreshSnapshot(ss, engineDir, p.Ratio, p.MinBytes, replaced...)
		replaced = slices.DeleteFunc(replaced, func(name string) bool {
			_, err := os.Lstat(filepath.Join(engineDir, name))
			return errors.Is(err, fs.ErrNotExist)
		})
	}
}

// maybeRefreshSnapshot refreshes the snapshots of ss that pin engine
// files if together they pin more than ratio of the engine in engineDir
// and at least minBytes, counting the files named in replaced (which the
// engine is about to delete) as no longer the engine's. It reports
// whether it refreshed any.
func (n *Node) maybeRefreshSnapshot(ss *snapstore.Store, engineDir string, ratio float64, minBytes int64, replaced ...string) bool {
	byID, pinned, live, err := ss.Pinned(engineDir, replaced...)
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
