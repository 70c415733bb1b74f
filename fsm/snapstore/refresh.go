package snapstore

import (
	"errors"
	"fmt"
	"path/filepath"
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

// Pinned returns the bytes of the newest snapshot's files that are not
// also (the same inode) in liveDir, the engine's directory: what the
// snapshot alone keeps on disk. It reads no data, only directory entries
// and file metadata. id is the newest snapshot's ID ("" if none).
func (s *Store) Pinned(liveDir string) (id string, pinned int64, err error) {
	ms, err := s.list()
	if err != nil || len(ms) == 0 {
		return "", 0, err
	}
	id = ms[0].ID
	dir := filepath.Join(s.dir, id, engineDirName)
	names, err := s.fs.List(dir)
	if err != nil {
		return id, 0, fmt.Errorf("snapstore: %w", err)
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		if sameFile(s.fs, p, filepath.Join(liveDir, name)) {
			continue
		}
		fi, err := s.fs.Stat(p)
		if err != nil {
			continue // reaped meanwhile
		}
		pinned += fi.Size()
	}
	return id, pinned, nil
}

// ErrRefreshBehind is returned by Refresh for a checkpoint older than the
// snapshot it would replace.
var ErrRefreshBehind = errors.New("snapstore: checkpoint is behind the newest snapshot")

// Refresh replaces the newest snapshot, id (as Pinned returned it), by a
// snapshot of the same raft position whose contents are c, a checkpoint
// of this node's engine taken after it (see above). It returns the new
// snapshot's ID. It does nothing and returns an error if id is no longer
// the newest snapshot (a new one was taken or received meanwhile) or if
// c's applied index is behind the snapshot's (ErrRefreshBehind). A crash
// leaves the old snapshot, or both (the next reap removes one).
func (s *Store) Refresh(id string, c *fsm.Checkpoint) (string, error) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	ms, err := s.list()
	if err != nil {
		return "", err
	}
	if len(ms) == 0 || ms[0].ID != id {
		return "", fmt.Errorf("snapstore: snapshot %s is no longer the newest", id)
	}
	old := ms[0]
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
	if err := k.AdoptCheckpoint(c); err != nil {
		k.Cancel()
		return "", err
	}
	if err := k.Close(); err != nil {
		return "", err
	}
	// commit reaped beyond Retain; the replaced snapshot goes in any case
	// (unless a reader holds it: a later reap removes it).
	if err := s.remove(id); err != nil {
		s.logf("snapstore: removing refreshed snapshot %s: %v", id, err)
	}
	return k.ID(), nil
}
