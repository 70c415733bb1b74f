package lsm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
)

// Checkpoint writes a consistent copy of the DB into destDir, which must not
// exist: every write acknowledged before the call is in it. Tables and
// blob files are hard links where the file system allows (copies otherwise), so a checkpoint
// costs little space until compaction rewrites the originals. The result is
// a DB directory that Open accepts, and the directory is fsynced before
// Checkpoint returns.
func (d *DB) Checkpoint(destDir string) (err error) {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if _, err := d.fs.Stat(destDir); err == nil {
		return fmt.Errorf("lsm: checkpoint directory %s already exists", destDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lsm: checkpoint: %w", err)
	}
	// Flush so that the tables alone hold every acknowledged write.
	if err := d.Flush(); err != nil {
		return err
	}
	d.mu.Lock()
	v := d.mu.versions.Current()
	v.Ref()
	lastSeq := d.mu.versions.LastSeq()
	manifestNum := d.mu.versions.NewFileNum()
	nextFileNum := d.mu.versions.NewFileNum()
	d.mu.Unlock()
	defer v.Unref()

	if err := mkdirAllDurable(d.fs, destDir); err != nil {
		return fmt.Errorf("lsm: checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			d.fs.RemoveAll(destDir)
		}
	}()
	ve := &version.VersionEdit{
		ComparerName: version.DefaultComparerName,
		LogNumber:    nextFileNum,
		NextFileNum:  nextFileNum,
		LastSeq:      lastSeq,
	}
	for level, files := range v.Levels {
		for _, f := range files {
			name := base.MakeFilename(base.FileTypeTable, f.FileNum)
			if err := d.linkOrCopy(filepath.Join(d.dirname, name), filepath.Join(destDir, name)); err != nil {
				return fmt.Errorf("lsm: checkpoint of table %s: %w", f.FileNum, err)
			}
			ve.AddFile(level, f)
		}
	}
	for n := range v.BlobFiles {
		name := base.MakeFilename(base.FileTypeBlob, n)
		if err := d.linkOrCopy(filepath.Join(d.dirname, name), filepath.Join(destDir, name)); err != nil {
			return fmt.Errorf("lsm: checkpoint of blob file %s: %w", n, err)
		}
	}
	ve.AddBlobSnapshot(v)
	if err := version.WriteManifest(d.fs, destDir, manifestNum, ve); err != nil {
		return fmt.Errorf("lsm: checkpoint manifest: %w", err)
	}
	return nil
}

// linkOrCopy hard-links src to dst, or copies it (synced) if the file
// system refuses the link.
func (d *DB) linkOrCopy(src, dst string) error {
	if err := d.fs.Link(src, dst); err == nil {
		return nil
	}
	in, err := d.fs.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return d.writeFileSynced(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// writeFileSynced creates name, lets fill write it, syncs and closes it.
func (d *DB) writeFileSynced(name string, fill func(w io.Writer) error) error {
	f, err := d.fs.Create(name)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
