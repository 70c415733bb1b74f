package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
)

// Restore replaces the state with a snapshot stream written by Persist:
//
//  1. it receives the files into a staging directory, checking every size
//     and checksum and that the stream ends after the last file;
//  2. it opens the staged engine and checks that it holds a state machine
//     at the manifest's applied index;
//  3. with reads held off, it closes the engine, renames the engine
//     directory aside and the staging directory in its place, syncs the
//     parent directory, reopens, and removes the old directory.
//
// A stream that fails steps 1 or 2 (corruption errors satisfy IsCorruption)
// leaves the current state untouched. A crash during step 3 is repaired by
// New (see doc.go).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.RLock()
	err := f.usableLocked()
	f.mu.RUnlock()
	if err != nil {
		return err
	}
	staging := f.path(fmt.Sprintf("%s%d", restorePrefix, f.seq.Add(1)))
	if err := f.fs.RemoveAll(staging); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	m, err := f.receive(rc, staging)
	if err == nil {
		err = f.checkStaged(staging, m)
	}
	if err != nil {
		if rerr := f.fs.RemoveAll(staging); rerr != nil {
			f.opts.Logger.Printf("fsm: removing %s: %v", staging, rerr)
		}
		return err
	}
	if err := f.swap(staging); err != nil {
		return err
	}
	f.opts.Logger.Printf("fsm: restored a snapshot at index %d (term %d)", m.AppliedIndex, m.AppliedTerm)
	return nil
}

// receive writes the files of a snapshot stream into dir.
func (f *FSM) receive(r io.Reader, dir string) (*fsmpb.SnapshotManifest, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	m, err := ReadSnapshotManifest(br)
	if err != nil {
		return nil, err
	}
	if err := f.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: restore: %w", err)
	}
	for _, fi := range m.Files {
		if err := f.receiveFile(br, filepath.Join(dir, fi.Name), fi); err != nil {
			return nil, err
		}
	}
	var one [1]byte
	if n, err := br.Read(one[:]); n > 0 {
		return nil, corruptionf("snapshot stream: bytes after the last file")
	} else if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	if err := syncDir(f.fs, dir); err != nil {
		return nil, err
	}
	return m, nil
}

func (f *FSM) receiveFile(r io.Reader, name string, fi *fsmpb.SnapshotFile) error {
	out, err := f.fs.Create(name)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	h := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, int64(fi.Size)))
	if err == nil && uint64(n) != fi.Size {
		err = corruptionf("snapshot stream truncated in file %s (%d of %d bytes)", fi.Name, n, fi.Size)
	}
	if err == nil && h.Sum32() != fi.Crc32C {
		err = corruptionf("snapshot file %s: checksum %08x, manifest says %08x", fi.Name, h.Sum32(), fi.Crc32C)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil && !IsCorruption(err) {
		err = fmt.Errorf("fsm: restore: file %s: %w", fi.Name, err)
	}
	return err
}

// checkStaged opens the staged engine and checks its contents against the
// manifest.
func (f *FSM) checkStaged(dir string, m *fsmpb.SnapshotManifest) error {
	o := *f.opts.Engine
	o.ErrorIfNotExists = true
	db, err := lsm.Open(dir, &o)
	if err != nil {
		return fmt.Errorf("fsm: restore: opening the received engine: %w", err)
	}
	st, _, err := loadState(db, false)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("fsm: restore: %w", cerr)
	}
	if err != nil {
		return err
	}
	if st.index != m.AppliedIndex || st.term != m.AppliedTerm {
		return corruptionf("snapshot holds applied index %d term %d, its manifest says %d term %d",
			st.index, st.term, m.AppliedIndex, m.AppliedTerm)
	}
	return nil
}

// swap installs the staged engine. REQUIRES: applyMu held.
func (f *FSM) swap(staging string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	engineDir, oldDir := f.path(engineDirName), f.path(engineOldDirName)
	if err := f.mu.db.Close(); err != nil {
		f.opts.Logger.Printf("fsm: restore: closing the engine: %v", err)
	}
	f.mu.db = nil
	// reopen puts back whatever engine directory is in place; if it fails
	// the FSM has no engine and halts.
	reopen := func(cause error) error {
		if err := f.openLocked(); err != nil {
			return f.halt(fmt.Errorf("restore failed (%v) and reopening the engine failed: %w", cause, err))
		}
		return fmt.Errorf("fsm: restore: %w", cause)
	}
	if err := f.fs.RemoveAll(oldDir); err != nil {
		return reopen(err)
	}
	if err := f.fs.Rename(engineDir, oldDir); err != nil {
		return reopen(err)
	}
	if err := f.fs.Rename(staging, engineDir); err != nil {
		if rerr := f.fs.Rename(oldDir, engineDir); rerr != nil {
			return f.halt(fmt.Errorf("restore: %v; putting the engine back: %w", err, rerr))
		}
		return reopen(err)
	}
	if err := syncDir(f.fs, f.dir); err != nil {
		// The renames may not be durable; the new engine is in place in
		// memory. Keep going: New repairs either outcome after a crash.
		f.opts.Logger.Printf("fsm: restore: %v", err)
	}
	if err := f.openLocked(); err != nil {
		// The staged engine opened in checkStaged; put the old one back.
		if rerr := errors.Join(f.fs.Rename(engineDir, staging), f.fs.Rename(oldDir, engineDir)); rerr != nil {
			return f.halt(fmt.Errorf("restore: opening the new engine: %v; putting the old one back: %w", err, rerr))
		}
		f.fs.RemoveAll(staging)
		return reopen(err)
	}
	if err := f.fs.RemoveAll(oldDir); err != nil {
		f.opts.Logger.Printf("fsm: restore: removing the old engine: %v", err)
	}
	return nil
}
