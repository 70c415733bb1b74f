package vfs

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS that enforces the durability contract of FS
// strictly, so that tests can simulate a power loss with CrashClone:
//
//   - every file keeps its current contents and, separately, its contents as
//     of its last Sync;
//   - every directory keeps its current entries and, separately, its entries
//     as of its last Sync through OpenDir(dir).Sync(). Creating, removing,
//     renaming or linking a name, and creating a directory with MkdirAll, are
//     durable only after the parent directory is synced.
//
// CrashClone returns what a machine would find after a power loss: the
// durable directory entries, each file with its durable contents.
//
// Writes always append at the end of the file (as with O_APPEND); the engine
// writes every file sequentially from one handle, where this is the same as
// writing at the handle's offset. Hard links share contents. A file opened
// for reading sees data appended after it was opened. Paths are cleaned and
// resolved from the root: "a/b", "/a/b" and "./a//b" name the same file.
//
// A MemFS is safe for concurrent use.
type MemFS struct {
	// mu protects the tree: the children and durable maps of every
	// directory, and locks. Lock order: mu before any memNode.mu.
	mu    sync.Mutex
	root  *memNode
	locks map[string]bool // cleaned path → held
}

var _ FS = (*MemFS)(nil)

// NewMem returns an empty in-memory FS holding only its root directory.
func NewMem() *MemFS {
	return &MemFS{root: newDirNode(), locks: make(map[string]bool)}
}

// memNode is a file or a directory. Hard links are several directory entries
// pointing at the same node.
type memNode struct {
	isDir bool

	// Directories only. REQUIRES: MemFS.mu held.
	children map[string]*memNode // current entries
	durable  map[string]*memNode // entries as of the last directory Sync

	// Files only.
	mu struct {
		sync.RWMutex
		// data is the current contents. It only grows by append, or is
		// replaced wholesale by a truncating Create: bytes already in it
		// are never modified, so synced may share its backing array.
		data []byte
		// synced is the durable contents. Invariant: never modified in
		// place (it may alias a prefix of data).
		synced []byte
		// syncedIsPrefix is true if synced is a prefix of data, i.e. the
		// file was not truncated since its last Sync.
		syncedIsPrefix bool
		modTime        time.Time
	}
}

func newDirNode() *memNode {
	return &memNode{
		isDir:    true,
		children: make(map[string]*memNode),
		durable:  make(map[string]*memNode),
	}
}

func newFileNode() *memNode {
	n := &memNode{}
	n.mu.syncedIsPrefix = true
	n.mu.modTime = time.Now()
	return n
}

// splitPath cleans name into its components; the root has none.
func splitPath(name string) []string {
	p := path.Clean("/" + filepath.ToSlash(name))
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// walkLocked returns the node at the given components.
// REQUIRES: fs.mu held.
func (fs *MemFS) walkLocked(parts []string) (*memNode, error) {
	n := fs.root
	for _, p := range parts {
		if !n.isDir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[p]
		if !ok {
			return nil, os.ErrNotExist
		}
		n = c
	}
	return n, nil
}

// parentLocked returns the directory holding name and name's base. The base
// is "" for the root.
// REQUIRES: fs.mu held.
func (fs *MemFS) parentLocked(name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", nil
	}
	dir, err := fs.walkLocked(parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	if !dir.isDir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// Create implements FS. An existing file is truncated in place, so its hard
// links see the truncation; its durable contents stay what they were until
// the next Sync.
func (fs *MemFS) Create(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.createLocked(name, true)
	if err != nil {
		return nil, pathErr("create", name, err)
	}
	return &memFile{name: name, n: n, writable: true}, nil
}

// createLocked returns the file node at name, creating it if needed and
// truncating it if truncate is set.
// REQUIRES: fs.mu held.
func (fs *MemFS) createLocked(name string, truncate bool) (*memNode, error) {
	dir, base, err := fs.parentLocked(name)
	if err != nil {
		return nil, err
	}
	if dir == nil {
		return nil, syscall.EISDIR
	}
	n, ok := dir.children[base]
	switch {
	case !ok:
		n = newFileNode()
		dir.children[base] = n
	case n.isDir:
		return nil, syscall.EISDIR
	case truncate:
		n.mu.Lock()
		// Never reslice data to zero length: synced may alias it.
		n.mu.data = nil
		n.mu.syncedIsPrefix = len(n.mu.synced) == 0
		n.mu.modTime = time.Now()
		n.mu.Unlock()
	}
	return n, nil
}

// Open implements FS. Opening a directory returns a handle that can be
// synced but not read.
func (fs *MemFS) Open(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.walkLocked(splitPath(name))
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &memFile{name: name, n: n, fs: fs}, nil
}

// OpenDir implements FS.
func (fs *MemFS) OpenDir(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.walkLocked(splitPath(name))
	if err != nil {
		return nil, pathErr("opendir", name, err)
	}
	if !n.isDir {
		return nil, pathErr("opendir", name, syscall.ENOTDIR)
	}
	return &memFile{name: name, n: n, fs: fs}, nil
}

// Remove implements FS. Open handles of a removed file keep working.
func (fs *MemFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parentLocked(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	if dir == nil {
		return pathErr("remove", name, syscall.EBUSY)
	}
	n, ok := dir.children[base]
	if !ok {
		return pathErr("remove", name, os.ErrNotExist)
	}
	if n.isDir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.children, base)
	return nil
}

// RemoveAll implements FS. Like os.RemoveAll, a missing name is not an error.
func (fs *MemFS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parentLocked(name)
	if err != nil {
		if err == syscall.ENOTDIR {
			return pathErr("removeall", name, err)
		}
		return nil
	}
	if dir == nil {
		clear(fs.root.children)
		return nil
	}
	delete(dir.children, base)
	return nil
}

// Rename implements FS.
func (fs *MemFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	linkErr := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	oldDir, oldBase, err := fs.parentLocked(oldname)
	if err != nil {
		return linkErr(err)
	}
	newDir, newBase, err := fs.parentLocked(newname)
	if err != nil {
		return linkErr(err)
	}
	if oldDir == nil || newDir == nil {
		return linkErr(syscall.EBUSY)
	}
	src, ok := oldDir.children[oldBase]
	if !ok {
		return linkErr(os.ErrNotExist)
	}
	if src.isDir {
		oldParts, newParts := splitPath(oldname), splitPath(newname)
		if len(newParts) > len(oldParts) && slices.Equal(oldParts, newParts[:len(oldParts)]) {
			return linkErr(syscall.EINVAL)
		}
	}
	if dst, ok := newDir.children[newBase]; ok {
		if dst == src {
			return nil
		}
		switch {
		case !src.isDir && dst.isDir:
			return linkErr(syscall.EISDIR)
		case src.isDir && !dst.isDir:
			return linkErr(syscall.ENOTDIR)
		case dst.isDir && len(dst.children) > 0:
			return linkErr(syscall.ENOTEMPTY)
		}
	}
	delete(oldDir.children, oldBase)
	newDir.children[newBase] = src
	return nil
}

// Link implements FS. The new name shares the old name's contents, current
// and durable.
func (fs *MemFS) Link(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	linkErr := func(err error) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	src, err := fs.walkLocked(splitPath(oldname))
	if err != nil {
		return linkErr(err)
	}
	if src.isDir {
		return linkErr(syscall.EPERM)
	}
	newDir, newBase, err := fs.parentLocked(newname)
	if err != nil {
		return linkErr(err)
	}
	if newDir == nil {
		return linkErr(os.ErrExist)
	}
	if _, ok := newDir.children[newBase]; ok {
		return linkErr(os.ErrExist)
	}
	newDir.children[newBase] = src
	return nil
}

// MkdirAll implements FS. Each directory it creates is an entry of its
// parent, durable only once the parent is synced.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.root
	for _, p := range splitPath(dir) {
		c, ok := n.children[p]
		if !ok {
			c = newDirNode()
			n.children[p] = c
		} else if !c.isDir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		n = c
	}
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.walkLocked(splitPath(dir))
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	if !n.isDir {
		return nil, pathErr("readdir", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	return names, nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.walkLocked(splitPath(name))
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.stat(name), nil
}

// Lock implements FS. The lock file is created (not truncated) if needed;
// like any new name it is durable only once its directory is synced. Locks
// are not carried over by CrashClone.
func (fs *MemFS) Lock(name string) (io.Closer, error) {
	key := "/" + strings.Join(splitPath(name), "/")
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.locks[key] {
		return nil, &lockError{path: name, cause: errHeldInProcess}
	}
	if _, err := fs.createLocked(name, false); err != nil {
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	fs.locks[key] = true
	return &memLock{fs: fs, key: key}, nil
}

type memLock struct {
	fs  *MemFS
	key string
	// released is set by Close. REQUIRES: fs.mu held.
	released bool
}

func (l *memLock) Close() error {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	if l.released {
		return fmt.Errorf("vfs: lock %s: %w", l.key, os.ErrClosed)
	}
	l.released = true
	delete(l.fs.locks, l.key)
	return nil
}

// CrashClone returns a new MemFS holding only what is durable in fs: what a
// machine would find after losing power now. fs itself is unchanged and keeps
// working.
func (fs *MemFS) CrashClone() *MemFS { return fs.crashClone(nil) }

// CrashCloneTorn is CrashClone, except that each file whose unsynced data
// extends its durable contents also keeps a prefix of that unsynced tail,
// of a length drawn uniformly from rng (zero up to all of it): a torn
// write. Files are visited in name order, so a seeded rng gives a
// reproducible clone.
func (fs *MemFS) CrashCloneTorn(rng *rand.Rand) *MemFS { return fs.crashClone(rng) }

func (fs *MemFS) crashClone(rng *rand.Rand) *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	clones := make(map[*memNode]*memNode) // hard links stay shared
	var cloneNode func(n *memNode) *memNode
	cloneNode = func(n *memNode) *memNode {
		if c, ok := clones[n]; ok {
			return c
		}
		var c *memNode
		if n.isDir {
			c = newDirNode()
			clones[n] = c
			for _, name := range slices.Sorted(maps.Keys(n.durable)) {
				cc := cloneNode(n.durable[name])
				c.children[name] = cc
				c.durable[name] = cc
			}
			return c
		}
		c = newFileNode()
		n.mu.RLock()
		keep := len(n.mu.synced)
		data := n.mu.synced
		if rng != nil && n.mu.syncedIsPrefix && len(n.mu.data) > keep {
			keep += rng.IntN(len(n.mu.data) - keep + 1)
			data = n.mu.data
		}
		c.mu.data = slices.Clone(data[:keep])
		c.mu.modTime = n.mu.modTime
		n.mu.RUnlock()
		c.mu.synced = c.mu.data[:keep:keep]
		clones[n] = c
		return c
	}
	return &MemFS{root: cloneNode(fs.root), locks: make(map[string]bool)}
}

// String lists the tree, one line per entry with its current size and, for
// files, its durable size; a '*' marks an entry not yet durable in its
// directory. For debugging tests.
func (fs *MemFS) String() string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var b strings.Builder
	var walk func(dir *memNode, prefix string)
	walk = func(dir *memNode, prefix string) {
		for _, name := range slices.Sorted(maps.Keys(dir.children)) {
			n := dir.children[name]
			mark := " "
			if dir.durable[name] != n {
				mark = "*"
			}
			if n.isDir {
				fmt.Fprintf(&b, "%s%s%s/\n", mark, prefix, name)
				walk(n, prefix+name+"/")
				continue
			}
			n.mu.RLock()
			fmt.Fprintf(&b, "%s%s%s (%d bytes, %d synced)\n", mark, prefix, name, len(n.mu.data), len(n.mu.synced))
			n.mu.RUnlock()
		}
	}
	walk(fs.root, "/")
	return b.String()
}

// stat describes n under the name name.
func (n *memNode) stat(name string) os.FileInfo {
	fi := &memFileInfo{name: path.Base("/" + filepath.ToSlash(name))}
	if n.isDir {
		fi.mode = os.ModeDir | 0o755
		return fi
	}
	fi.mode = 0o666
	n.mu.RLock()
	fi.size = int64(len(n.mu.data))
	fi.modTime = n.mu.modTime
	n.mu.RUnlock()
	return fi
}

type memFileInfo struct {
	name    string
	size    int64
	mode    os.FileMode
	modTime time.Time
}

func (fi *memFileInfo) Name() string       { return fi.name }
func (fi *memFileInfo) Size() int64        { return fi.size }
func (fi *memFileInfo) Mode() os.FileMode  { return fi.mode }
func (fi *memFileInfo) ModTime() time.Time { return fi.modTime }
func (fi *memFileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *memFileInfo) Sys() any           { return nil }

// memFile is an open handle on a memNode.
type memFile struct {
	name     string
	n        *memNode
	fs       *MemFS // set for directory handles: Sync takes fs.mu
	writable bool

	mu struct {
		sync.Mutex
		pos    int64 // read offset
		closed bool
	}
}

var _ File = (*memFile)(nil)

func (f *memFile) checkOpen(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	return nil
}

// Read implements io.Reader from the handle's offset.
func (f *memFile) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return 0, pathErr("read", f.name, os.ErrClosed)
	}
	if f.n.isDir {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if f.mu.pos >= int64(len(f.n.mu.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.mu.data[f.mu.pos:])
	f.mu.pos += int64(n)
	return n, nil
}

// ReadAt implements io.ReaderAt: a read that reaches the end of the file
// returns io.EOF with the bytes it got.
func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.checkOpen("read"); err != nil {
		return 0, err
	}
	if f.n.isDir {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	if off < 0 {
		return 0, pathErr("readat", f.name, syscall.EINVAL)
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if off >= int64(len(f.n.mu.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.mu.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Write appends p to the file.
func (f *memFile) Write(p []byte) (int, error) {
	if err := f.checkOpen("write"); err != nil {
		return 0, err
	}
	if !f.writable {
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	f.n.mu.data = append(f.n.mu.data, p...)
	f.n.mu.modTime = time.Now()
	return len(p), nil
}

// Sync makes the file's contents durable; for a directory, its entries.
func (f *memFile) Sync() error {
	if err := f.checkOpen("sync"); err != nil {
		return err
	}
	if f.n.isDir {
		f.fs.mu.Lock()
		defer f.fs.mu.Unlock()
		f.n.durable = maps.Clone(f.n.children)
		return nil
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	d := f.n.mu.data
	f.n.mu.synced = d[:len(d):len(d)]
	f.n.mu.syncedIsPrefix = true
	return nil
}

// Stat implements File.
func (f *memFile) Stat() (os.FileInfo, error) {
	if err := f.checkOpen("stat"); err != nil {
		return nil, err
	}
	return f.n.stat(f.name), nil
}

// Close implements io.Closer. A second Close returns an error.
func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.mu.closed = true
	return nil
}
