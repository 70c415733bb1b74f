package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"

	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
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
	br := bufio.NewReaderSize(rc, 256<<10)
	m, err := ReadSnapshotManifest(br)
	if err == nil {
		err = f.stage(br, m, staging)
	}
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

// CheckpointSource is a snapshot store that keeps its snapshots as
// verified checkpoint directories (package fsm/snapstore). Restore asks it
// for the directory of the snapshot whose stream it is given and, if it has
// one, hard-links the files from there instead of copying the stream: the
// stream's reader is wrapped by raft (it counts bytes), so the stream
// itself cannot say where it comes from, but its head (the manifest) can.
type CheckpointSource interface {
	// FindCheckpoint returns the directory holding the files of a
	// stored snapshot whose manifest equals m (every file verified
	// against m's sizes and checksums when it was stored), or ok false.
	FindCheckpoint(m *fsmpb.SnapshotManifest) (dir string, ok bool)
}

// stage fills the staging directory with the snapshot's files: hard links
// from Options.Checkpoints if it holds the snapshot, else the stream's
// bytes (br, positioned after the manifest).
func (f *FSM) stage(br io.Reader, m *fsmpb.SnapshotManifest, staging string) error {
	if src := f.opts.Checkpoints; src != nil {
		if dir, ok := src.FindCheckpoint(m); ok {
			err := LinkCheckpoint(f.fs, dir, staging, m)
			if err == nil {
				return nil
			}
			// The store may have reaped it meanwhile: read the stream.
			f.opts.Logger.Printf("fsm: restore: linking the snapshot from %s: %v; reading the stream instead", dir, err)
			if err := f.fs.RemoveAll(staging); err != nil {
				return fmt.Errorf("fsm: restore: %w", err)
			}
		}
	}
	return receiveFiles(f.fs, br, staging, m)
}

// ReceiveSnapshot reads a snapshot stream from r into the new directory
// dir, checking every size and checksum and that the stream ends after the
// last file, and syncs the files and dir. On error dir may hold part of
// the files; the caller removes it.
func ReceiveSnapshot(fs vfs.FS, r io.Reader, dir string) (*fsmpb.SnapshotManifest, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	m, err := ReadSnapshotManifest(br)
	if err != nil {
		return nil, err
	}
	if err := receiveFiles(fs, br, dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// receiveFiles writes the files of a snapshot stream, read from r just
// after its manifest m, into dir.
func receiveFiles(fs vfs.FS, r io.Reader, dir string, m *fsmpb.SnapshotManifest) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	for _, fi := range m.Files {
		if err := receiveFile(fs, r, filepath.Join(dir, fi.Name), fi); err != nil {
			return err
		}
	}
	var one [1]byte
	if n, err := io.ReadFull(r, one[:]); n > 0 {
		return corruptionf("snapshot stream: bytes after the last file")
	} else if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	return syncDir(fs, dir)
}

// LinkCheckpoint makes dst (which must not exist) a copy of the
// checkpoint files of manifest m held in src: tables and blob files, which
// the engine never modifies, are hard links; the others (manifest,
// CURRENT; small, and appended to by an engine that opens them) are copied
// and checked against m. Every size is checked against m.
func LinkCheckpoint(fs vfs.FS, src, dst string, m *fsmpb.SnapshotManifest) error {
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("fsm: %w", err)
	}
	for _, fi := range m.Files {
		from, to := filepath.Join(src, fi.Name), filepath.Join(dst, fi.Name)
		st, err := fs.Stat(from)
		if err != nil {
			return fmt.Errorf("fsm: %w", err)
		}
		if uint64(st.Size()) != fi.Size {
			return corruptionf("checkpoint file %s is %d bytes, its manifest says %d", from, st.Size(), fi.Size)
		}
		if Immutable(fi.Name) {
			if err := fs.Link(from, to); err != nil {
				return fmt.Errorf("fsm: %w", err)
			}
			continue
		}
		in, err := fs.Open(from)
		if err != nil {
			return fmt.Errorf("fsm: %w", err)
		}
		err = receiveFile(fs, in, to, fi)
		in.Close()
		if err != nil {
			return err
		}
	}
	return syncDir(fs, dst)
}

// Immutable reports whether the engine file name is one the engine never
// modifies once written (a table or a blob file), so that a hard link to it
// is as good as a copy.
func Immutable(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

func receiveFile(fs vfs.FS, r io.Reader, name string, fi *fsmpb.SnapshotFile) error {
	out, err := fs.Create(name)
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
