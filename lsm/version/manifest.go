package version

import (
	"bytes"
	"io"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// maxCurrentSize bounds what readCurrent reads: CURRENT holds one short line.
const maxCurrentSize = 4 << 10

// createManifest writes a new manifest numbered num holding edits (the first
// is a snapshot of the whole state), makes it durable, and switches CURRENT
// to it. On success the new manifest replaces the old one, which is closed
// and reported by ObsoleteManifests. On failure the old manifest stays the
// writer's; the new file is left behind (CURRENT may already name it if the
// failure came after the rename), and the DB removes stray manifests when it
// next opens.
//
// REQUIRES: the caller owns the manifest writer (see VersionSet).
func (vs *VersionSet) createManifest(num base.FileNum, edits ...*VersionEdit) (err error) {
	name := base.MakeFilepath(vs.dir, base.FileTypeManifest, num)
	f, err := vs.fs.Create(name)
	if err != nil {
		return err
	}
	w := record.NewWriter(f)
	defer func() {
		if err != nil {
			_ = w.Close()
			_ = f.Close()
		}
	}()
	for _, e := range edits {
		if _, err := w.WriteRecord(e.Encode()); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// The manifest's name must be durable before CURRENT can name it.
	if err := vs.syncDir(); err != nil {
		return err
	}
	if err := vs.setCurrent(num); err != nil {
		return err
	}

	oldNum := vs.manifest.num
	_ = vs.closeManifest() // the old manifest is synced; nothing more to lose
	vs.manifest.num, vs.manifest.file, vs.manifest.w = num, f, w
	if oldNum != 0 {
		vs.list.Lock()
		vs.list.obsoleteManifests = append(vs.list.obsoleteManifests, oldNum)
		vs.list.Unlock()
	}
	return nil
}

// appendToManifest appends edit to the manifest and syncs it.
//
// REQUIRES: the caller owns the manifest writer.
func (vs *VersionSet) appendToManifest(edit *VersionEdit) error {
	if _, err := vs.manifest.w.WriteRecord(edit.Encode()); err != nil {
		return err
	}
	if err := vs.manifest.w.Flush(); err != nil {
		return err
	}
	return vs.manifest.file.Sync()
}

// closeManifest closes the manifest writer and file, if any.
//
// REQUIRES: the caller owns the manifest writer.
func (vs *VersionSet) closeManifest() error {
	if vs.manifest.w == nil {
		return nil
	}
	err := vs.manifest.w.Close()
	if cerr := vs.manifest.file.Close(); err == nil {
		err = cerr
	}
	vs.manifest.file, vs.manifest.w = nil, nil
	return err
}

// setCurrent points CURRENT at MANIFEST-num atomically: it writes a temporary
// file, syncs it, renames it over CURRENT and syncs the directory.
func (vs *VersionSet) setCurrent(num base.FileNum) error {
	return setCurrent(vs.fs, vs.dir, num)
}

func setCurrent(fs vfs.FS, dir string, num base.FileNum) error {
	tmp := base.MakeFilepath(dir, base.FileTypeTemp, num)
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, base.MakeFilename(base.FileTypeManifest, num)+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, base.MakeFilepath(dir, base.FileTypeCurrent, 0))
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return vfs.SyncDir(fs, dir)
}

// WriteManifest makes dir a DB whose state is edit: it writes manifest num
// holding edit alone (a snapshot of a whole version, with the comparer name,
// log number, next file number and last sequence number), syncs it and its
// directory entry, and points CURRENT at it atomically. Checkpoints use it;
// the tables edit names must already be in dir.
func WriteManifest(fs vfs.FS, dir string, num base.FileNum, edit *VersionEdit) error {
	f, err := fs.Create(base.MakeFilepath(dir, base.FileTypeManifest, num))
	if err != nil {
		return err
	}
	w := record.NewWriter(f)
	_, err = w.WriteRecord(edit.Encode())
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vfs.SyncDir(fs, dir)
	}
	if err != nil {
		return err
	}
	return setCurrent(fs, dir, num)
}

func (vs *VersionSet) syncDir() error { return vfs.SyncDir(vs.fs, vs.dir) }

// readCurrent returns the manifest number CURRENT names. CURRENT must hold
// exactly "MANIFEST-<number>\n" as setCurrent writes it.
func readCurrent(fs vfs.FS, dir string) (base.FileNum, error) {
	name := base.MakeFilepath(dir, base.FileTypeCurrent, 0)
	f, err := fs.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCurrentSize+1))
	if err != nil {
		return 0, err
	}
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(b) > maxCurrentSize {
		return 0, base.CorruptionErrorf("version: %s is malformed: %q", name, truncateForMessage(b))
	}
	ft, num, ok := base.ParseFilename(string(line))
	if !ok || ft != base.FileTypeManifest || string(line) != base.MakeFilename(base.FileTypeManifest, num) || num == 0 {
		return 0, base.CorruptionErrorf("version: %s names no manifest: %q", name, truncateForMessage(line))
	}
	return num, nil
}

func truncateForMessage(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
