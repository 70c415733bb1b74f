package snapstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnkv/cairn/fsm"
)

// Refreshing a snapshot.
//
// A snapshot's files are hard links to the engine's tables, so it costs
// no space until compaction replaces those tables in the engine; from then
// on it keeps the replaced ones alive. Right after a bulk load, compaction
// rewrites most of the data, and a snapshot taken then keeps a whole
// second copy (bench/RESULTS.md: 1.61x the engine and raft log at 1 GiB,
// with one retained snapshot as with two).
//
// A raft snapshot at index I only has to hold a state machine that
// includes every entry up to I: raft installs it on a follower, sets the
// follower's log to start after I and replays the entries after I, which
// the state machine skips up to its own applied index (fsm/doc.go). So
// the state of a later checkpoint of the same engine serves for the same
// raft position, as long as it is a checkpoint of this node's engine at
// or after the snapshot's applied index (its entries are committed: the
// state machine applies nothing else). Refresh replaces the newest
// snapshot by such a one: a new snapshot with the same raft metadata
// (index, term, configuration) whose files are the live engine's, so that
// it pins nothing the engine does not hold too; the old one is removed.

// Pinned returns, per snapshot ID, the bytes of its files that are not
// also (the same inode) in liveDir, the engine's directory: what the
// snapshots keep on disk beyond the engine; total counts each inode once
// (snapshots share files); live is the bytes of the files in liveDir. It
// reads no data, only directory entries and file metadata.
//
// replaced names files of liveDir that the engine no longer uses and is
// about to delete (the inputs of a compaction it just installed): they
// count as pinned where a snapshot links them, and not as live, so that
// the caller need not wait for their deletion to see what the snapshots
// will keep.
func (s *Store) Pinned(liveDir string, replaced ...string) (pinned map[string]int64, total, live int64, err error) {
	ms, err := s.list()
	if err != nil {
		return nil, 0, 0, err
	}
	liveNames, err := s.fs.List(liveDir)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("snapstore: %w", err)
	}
	for _, name := range liveNames {
		if slices.Contains(replaced, name) {
			continue
		}
		if fi, err := s.fs.Stat(filepath.Join(liveDir, name)); err == nil && !fi.IsDir() {
			live += fi.Size()
		}
	}
	pinned = map[string]int64{}
	var counted []os.FileInfo
	for _, m := range ms {
		dir := filepath.Join(s.dir, m.ID, engineDirName)
		names, err := s.fs.List(dir)
		if err != nil {
			continue // reaped meanwhile
		}
		for _, name := range names {
			p := filepath.Join(dir, name)
			if !slices.Contains(replaced, name) && sameFile(s.fs, p, filepath.Join(liveDir, name)) {
				continue
			}
			fi, err := s.fs.Stat(p)
			if err != nil {
				continue
			}
			pinned[m.ID] += fi.Size()
			if !slices.ContainsFunc(counted, func(c os.FileInfo) bool { return os.SameFile(c, fi) }) {
				counted = append(counted, fi)
				total += fi.Size()
			}
		}
	}
	return pinned, total, live, nil
}

// ErrRefreshBehind is returned by Refresh for a checkpoint older than the
// snapshot it would replace.
var ErrRefreshBehind = errors.New("snapstore: checkpoint is behind the newest snapshot")

// Refresh replaces snapshot id by a snapshot of the same raft position
// whose contents are c, a checkpoint of this node's engine taken after it
// (see above). It returns the new snapshot's ID. It does nothing and
// returns an error if id is gone (reaped meanwhile) or if c's applied
// index is behind the snapshot's (ErrRefreshBehind). A crash leaves the
// old snapshot, or both (the next Open or reap removes one).
//
// Every retained snapshot may be refreshed with the same checkpoint: they
// then share all their files with the engine, and each keeps its own
// metadata (an older one remains a fallback should the newest one's be
// damaged).
func (s *Store) Refresh(id string, c *fsm.Checkpoint) (string, error) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if !validID(id) {
		return "", fmt.Errorf("snapstore: bad snapshot ID %q", id)
	}
	old, err := s.readMeta(id)
	if err != nil {
		return "", err
	}
	if c.AppliedIndex < old.AppliedIndex {
		return "", fmt.Errorf("%w: checkpoint at %d, snapshot %s at %d", ErrRefreshBehind, c.AppliedIndex, id, old.AppliedIndex)
	}
	// The new ID must sort after the old one: the same term and index, a
	// later time.
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		if oldMs, err := strconv.ParseInt(id[i+1:], 10, 64); err == nil {
			for time.Now().UnixMilli() <= oldMs {
				time.Sleep(time.Millisecond)
			}
		}
	}
	sk, err := s.Create(old.Version, old.Index, old.Term, old.Configuration, old.ConfigurationIndex, nil)
	if err != nil {
		return "", err
	}
	k := sk.(*sink)
	k.replaces = id // removed at commit (unless a reader holds it: a later reap removes it)
	if err := k.AdoptCheckpoint(c); err != nil {
		k.Cancel()
		return "", err
	}
	if err := k.Close(); err != nil {
		return "", err
	}
	return k.ID(), nil
}
