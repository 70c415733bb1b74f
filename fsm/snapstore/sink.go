package snapstore

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cairnkv/cairn/fsm"
	"github.com/cairnkv/cairn/fsm/fsmpb"
)

// errCancelled ends a receive whose sink was cancelled.
var errCancelled = errors.New("snapstore: snapshot cancelled")

// sink is a snapshot being made in <id>.tmp. It is filled one of two ways:
//
//   - AdoptCheckpoint (the local FSM's Persist): hard links to the
//     checkpoint's files;
//   - Write (raft copying a leader's stream): the stream is parsed as it
//     arrives by fsm.ReceiveSnapshot, in a goroutine fed through a pipe.
//
// Close verifies that one of them completed, writes head and meta.json and
// commits; Cancel removes the directory. Close and Cancel may be called
// more than once (raft closes a sink Persist already closed).
type sink struct {
	s    *Store
	tmp  string
	meta meta
	// replaces is the snapshot a Refresh replaces: the commit removes
	// it instead of reaping beyond Retain.
	replaces string

	mu       sync.Mutex
	manifest *fsmpb.SnapshotManifest // set by AdoptCheckpoint or the receive
	known    []bool                  // per manifest file: checksum known (nil: all are)
	pw       *io.PipeWriter          // set by the first Write
	recvErr  chan error              // the receive's outcome
	done     bool                    // closed or cancelled
	err      error                   // Close's result
}

func (k *sink) ID() string { return k.meta.ID }

// Write feeds the stream to the receive, starting it on the first call.
func (k *sink) Write(p []byte) (int, error) {
	k.mu.Lock()
	if k.done || k.manifest != nil && k.pw == nil {
		k.mu.Unlock()
		return 0, errors.New("snapstore: write to a closed or adopted snapshot sink")
	}
	if k.pw == nil {
		pr, pw := io.Pipe()
		k.pw, k.recvErr = pw, make(chan error, 1)
		go func() {
			m, err := fsm.ReceiveSnapshot(k.s.fs, pr, filepath.Join(k.tmp, engineDirName))
			if err == nil {
				k.mu.Lock()
				k.manifest = m
				k.mu.Unlock()
			}
			// Unblock the writer if the receive stopped early.
			pr.CloseWithError(errors.Join(err, errors.New("snapstore: snapshot stream ended")))
			k.recvErr <- err
		}()
	}
	pw := k.pw
	k.mu.Unlock()
	return pw.Write(p)
}

// AdoptCheckpoint makes c the snapshot: hard links to its files and their
// manifest (fsm.CheckpointSink). It reads no file: a file the newest
// snapshot holds too (the same inode; tables and blob files are immutable)
// keeps the checksum recorded there, and the others are summed when the
// snapshot is first opened (see Store.Open).
func (k *sink) AdoptCheckpoint(c *fsm.Checkpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done || k.pw != nil || k.manifest != nil {
		return errors.New("snapstore: adopting a checkpoint into a used sink")
	}
	dst := filepath.Join(k.tmp, engineDirName)
	if err := k.s.fs.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	prevID, prev := k.s.newestFiles()
	files := c.FileSizes()
	known := make([]bool, len(files))
	for i, fi := range files {
		src, to := filepath.Join(c.Dir(), fi.Name), filepath.Join(dst, fi.Name)
		if err := k.s.fs.Link(src, to); err != nil {
			return fmt.Errorf("snapstore: linking checkpoint file: %w", err)
		}
		if p, ok := prev[fi.Name]; ok && p.known && p.Size == fi.Size && fsm.Immutable(fi.Name) &&
			sameFile(k.s.fs, to, filepath.Join(k.s.dir, prevID, engineDirName, fi.Name)) {
			fi.Crc32C, known[i] = p.Crc32C, true
		}
	}
	if err := syncDir(k.s, dst); err != nil {
		return err
	}
	k.manifest = &fsmpb.SnapshotManifest{Files: files, AppliedIndex: c.AppliedIndex, AppliedTerm: c.AppliedTerm}
	k.known = known
	return nil
}

// Close finishes the snapshot and commits it.
func (k *sink) Close() error {
	k.mu.Lock()
	if k.done {
		defer k.mu.Unlock()
		return k.err
	}
	k.done = true
	pw, recvErr := k.pw, k.recvErr
	k.mu.Unlock()
	var err error
	if pw != nil {
		pw.Close()
		err = <-recvErr
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil && k.manifest == nil {
		err = errors.New("snapstore: snapshot closed before anything was written")
	}
	if err == nil {
		err = k.finishLocked()
	}
	if err != nil {
		if rerr := k.s.fs.RemoveAll(k.tmp); rerr != nil {
			k.s.logf("snapstore: removing %s: %v", k.tmp, rerr)
		}
	}
	k.err = err
	return err
}

// finishLocked writes the manifest (head, or pending.json while some
// checksums are unknown) and meta.json, and commits. REQUIRES: k.mu held.
func (k *sink) finishLocked() error {
	k.meta.AppliedIndex, k.meta.AppliedTerm = k.manifest.AppliedIndex, k.manifest.AppliedTerm
	if slices.Contains(k.known, false) {
		if err := writePending(k.s.fs, k.tmp, k.manifest, k.known); err != nil {
			return err
		}
		k.meta.Size = streamSize(nil, k.manifest) // exact once summed
	} else {
		head, err := fsm.EncodeSnapshotHead(k.manifest)
		if err != nil {
			return err
		}
		if err := writeFileSynced(k.s.fs, filepath.Join(k.tmp, headFileName), head); err != nil {
			return err
		}
		k.meta.Size = streamSize(head, k.manifest)
	}
	if err := writeMeta(k.s.fs, k.tmp, &k.meta); err != nil {
		return err
	}
	return k.s.commit(k.tmp, k.meta.ID, k.replaces)
}

// Cancel abandons the snapshot.
func (k *sink) Cancel() error {
	k.mu.Lock()
	if k.done {
		k.mu.Unlock()
		return nil
	}
	k.done = true
	pw, recvErr := k.pw, k.recvErr
	k.mu.Unlock()
	if pw != nil {
		pw.CloseWithError(errCancelled)
		<-recvErr
	}
	k.mu.Lock()
	k.err = errCancelled
	k.mu.Unlock()
	if err := k.s.fs.RemoveAll(k.tmp); err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	return nil
}

func syncDir(s *Store, dir string) error {
	d, err := s.fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("snapstore: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapstore: syncing %s: %w", dir, err)
	}
	return nil
}
