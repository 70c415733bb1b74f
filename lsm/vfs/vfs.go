// Package vfs is the engine's one seam to the disk. Every file the engine
// reads or writes goes through an FS: the real operating system's (Default),
// an in-memory one that can simulate a crash by keeping only what was synced
// (NewMem), and an error-injecting wrapper (package vfs/errorfs).
package vfs

import (
	"io"
	"os"
)

// File is an open file. Writes are durable only after Sync returns nil.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's written contents durable. For a directory
	// opened with OpenDir, it makes the directory's entries (creations,
	// removals, renames, links) durable.
	Sync() error
	Stat() (os.FileInfo, error)
}

// FS is a file system. Names are slash-separated paths as filepath uses them.
//
// Durability contract (what NewMem's crash simulation enforces and what the
// engine must assume of a real disk): a file's data is durable up to its last
// successful Sync; a new name, a removal, a rename or a link is durable only
// once the parent directory has been synced through OpenDir(dir).Sync().
type FS interface {
	// Create creates or truncates the named file, opened for writing.
	Create(name string) (File, error)
	// Open opens the named file for reading.
	Open(name string) (File, error)
	// OpenDir opens a directory so that it can be synced.
	OpenDir(name string) (File, error)
	// Remove removes the named file or empty directory.
	Remove(name string) error
	// RemoveAll removes a directory tree.
	RemoveAll(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Link creates newname as a hard link to oldname.
	Link(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the base names of the entries of dir, in no order.
	List(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (os.FileInfo, error)
	// Lock takes an exclusive lock on the named file, creating it if
	// needed. A second Lock of the same name, from this process or
	// another, fails until the returned Closer is closed.
	Lock(name string) (io.Closer, error)
}

// SyncDir makes the entries of directory dir durable: the creations,
// removals, renames and links made in it so far.
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
