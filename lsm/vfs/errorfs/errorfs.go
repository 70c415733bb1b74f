// Package errorfs wraps a vfs.FS so that tests can make any of its
// operations fail: an Injector is asked before every FS and File operation
// whether to fail it, and an injected error replaces the operation, which
// then does not happen (see Wrap for the one exception, Close).
//
// The usual fault sweep counts the operations of a run, then fails each in
// turn:
//
//	counter := errorfs.OnIndex(-1)
//	run(errorfs.Wrap(vfs.NewMem(), counter))
//	for i := int64(0); i < counter.Count(); i++ {
//		err := run(errorfs.Wrap(vfs.NewMem(), errorfs.OnIndex(i)))
//		// err must wrap errorfs.ErrInjected; the store must reopen.
//	}
package errorfs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// ErrInjected is wrapped by every injected error:
// errors.Is(err, ErrInjected) tells an injected failure from a real one.
var ErrInjected = errors.New("errorfs: injected error")

// Op is a kind of FS or File operation.
type Op uint8

// The operations an Injector is asked about. File operations on a file
// opened through the FS carry the file's name as path; Rename and Link carry
// the old name; Close of a Lock's Closer is OpClose on the lock file.
const (
	OpCreate Op = iota
	OpOpen
	OpOpenDir
	OpRemove
	OpRemoveAll
	OpRename
	OpLink
	OpMkdirAll
	OpList
	OpStat
	OpLock
	OpRead
	OpReadAt
	OpWrite
	OpSync
	OpClose
	OpFileStat
	numOps
)

var opNames = [numOps]string{
	OpCreate: "Create", OpOpen: "Open", OpOpenDir: "OpenDir", OpRemove: "Remove",
	OpRemoveAll: "RemoveAll", OpRename: "Rename", OpLink: "Link", OpMkdirAll: "MkdirAll",
	OpList: "List", OpStat: "Stat", OpLock: "Lock", OpRead: "Read", OpReadAt: "ReadAt",
	OpWrite: "Write", OpSync: "Sync", OpClose: "Close", OpFileStat: "FileStat",
}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// IsWrite reports whether the operation changes the file system (its data,
// its durability or its names), as opposed to only reading it.
func (o Op) IsWrite() bool {
	switch o {
	case OpCreate, OpRemove, OpRemoveAll, OpRename, OpLink, OpMkdirAll, OpLock, OpWrite, OpSync, OpClose:
		return true
	}
	return false
}

// AllOps lists every Op.
func AllOps() []Op {
	ops := make([]Op, numOps)
	for i := range ops {
		ops[i] = Op(i)
	}
	return ops
}

// WriteOps lists the Ops for which IsWrite is true.
func WriteOps() []Op {
	var ops []Op
	for _, o := range AllOps() {
		if o.IsWrite() {
			ops = append(ops, o)
		}
	}
	return ops
}

// Injector decides whether an operation fails. MaybeError is called before
// the operation with its kind and path; a non-nil error is returned in place
// of the operation's result. It must be safe for concurrent use.
type Injector interface {
	MaybeError(op Op, path string) error
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(op Op, path string) error

// MaybeError implements Injector.
func (f InjectorFunc) MaybeError(op Op, path string) error { return f(op, path) }

// FS is a vfs.FS that consults an Injector before every operation.
type FS struct {
	fs  vfs.FS
	inj Injector
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns fs with errors injected by inj (a nil inj injects nothing).
//
// An injected error is returned instead of performing the operation: a Write
// that fails wrote nothing, a Sync that fails synced nothing, a Rename that
// fails renamed nothing. The exception is Close (of a file or of a lock):
// the underlying file is closed (the lock released) anyway, as a real close
// that fails still releases the descriptor, and the injected error is
// returned.
func Wrap(fs vfs.FS, inj Injector) *FS {
	if inj == nil {
		inj = InjectorFunc(func(Op, string) error { return nil })
	}
	return &FS{fs: fs, inj: inj}
}

// Unwrap returns the wrapped FS.
func (fs *FS) Unwrap() vfs.FS { return fs.fs }

// Create implements vfs.FS.
func (fs *FS) Create(name string) (vfs.File, error) {
	if err := fs.inj.MaybeError(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := fs.fs.Create(name)
	if err != nil {
		return nil, err
	}
	return &file{File: f, name: name, inj: fs.inj}, nil
}

// Open implements vfs.FS.
func (fs *FS) Open(name string) (vfs.File, error) {
	if err := fs.inj.MaybeError(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := fs.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &file{File: f, name: name, inj: fs.inj}, nil
}

// OpenDir implements vfs.FS.
func (fs *FS) OpenDir(name string) (vfs.File, error) {
	if err := fs.inj.MaybeError(OpOpenDir, name); err != nil {
		return nil, err
	}
	f, err := fs.fs.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &file{File: f, name: name, inj: fs.inj}, nil
}

// Remove implements vfs.FS.
func (fs *FS) Remove(name string) error {
	if err := fs.inj.MaybeError(OpRemove, name); err != nil {
		return err
	}
	return fs.fs.Remove(name)
}

// RemoveAll implements vfs.FS.
func (fs *FS) RemoveAll(name string) error {
	if err := fs.inj.MaybeError(OpRemoveAll, name); err != nil {
		return err
	}
	return fs.fs.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *FS) Rename(oldname, newname string) error {
	if err := fs.inj.MaybeError(OpRename, oldname); err != nil {
		return err
	}
	return fs.fs.Rename(oldname, newname)
}

// Link implements vfs.FS.
func (fs *FS) Link(oldname, newname string) error {
	if err := fs.inj.MaybeError(OpLink, oldname); err != nil {
		return err
	}
	return fs.fs.Link(oldname, newname)
}

// MkdirAll implements vfs.FS.
func (fs *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.inj.MaybeError(OpMkdirAll, dir); err != nil {
		return err
	}
	return fs.fs.MkdirAll(dir, perm)
}

// List implements vfs.FS.
func (fs *FS) List(dir string) ([]string, error) {
	if err := fs.inj.MaybeError(OpList, dir); err != nil {
		return nil, err
	}
	return fs.fs.List(dir)
}

// Stat implements vfs.FS.
func (fs *FS) Stat(name string) (os.FileInfo, error) {
	if err := fs.inj.MaybeError(OpStat, name); err != nil {
		return nil, err
	}
	return fs.fs.Stat(name)
}

// Lock implements vfs.FS.
func (fs *FS) Lock(name string) (io.Closer, error) {
	if err := fs.inj.MaybeError(OpLock, name); err != nil {
		return nil, err
	}
	l, err := fs.fs.Lock(name)
	if err != nil {
		return nil, err
	}
	return &lock{Closer: l, name: name, inj: fs.inj}, nil
}

type lock struct {
	io.Closer
	name string
	inj  Injector
}

func (l *lock) Close() error {
	injErr := l.inj.MaybeError(OpClose, l.name)
	err := l.Closer.Close()
	if injErr != nil {
		return injErr
	}
	return err
}

// file is a vfs.File that consults the Injector before every operation.
type file struct {
	vfs.File
	name string
	inj  Injector
}

func (f *file) Read(p []byte) (int, error) {
	if err := f.inj.MaybeError(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.inj.MaybeError(OpReadAt, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *file) Write(p []byte) (int, error) {
	if err := f.inj.MaybeError(OpWrite, f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *file) Sync() error {
	if err := f.inj.MaybeError(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *file) Stat() (os.FileInfo, error) {
	if err := f.inj.MaybeError(OpFileStat, f.name); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *file) Close() error {
	injErr := f.inj.MaybeError(OpClose, f.name)
	err := f.File.Close()
	if injErr != nil {
		return injErr
	}
	return err
}
