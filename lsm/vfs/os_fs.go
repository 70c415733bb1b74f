package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Default is the operating system's file system.
var Default FS = osFS{}

// ErrLocked is wrapped by the error Lock returns when the lock is held
// elsewhere (another process, or another Lock call in this process).
var ErrLocked = errors.New("vfs: lock held")

// osFS implements FS with package os. Files are *os.File.
type osFS struct{}

var _ FS = osFS{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (osFS) Open(name string) (File, error) { return os.Open(name) }

func (osFS) OpenDir(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !fi.IsDir() {
		_ = f.Close()
		return nil, &os.PathError{Op: "opendir", Path: name, Err: errNotDir}
	}
	return f, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) Link(oldname, newname string) error          { return os.Link(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return names, err
}

// osLocks is the registry of lock files held by this process, keyed by
// absolute path. flock(2) alone already makes a second Lock through a second
// open file description fail on Linux, but not on every platform (and not
// through the same descriptor); the registry makes the in-process rule hold
// everywhere and gives a clearer error.
var osLocks struct {
	mu   sync.Mutex
	held map[string]bool // REQUIRES: mu held
}

// Lock takes an exclusive, non-blocking lock on name: first in the process
// registry, then with the platform's file lock (flock(2) LOCK_EX|LOCK_NB on
// Unix). The lock file is created if needed and never removed.
func (osFS) Lock(name string) (io.Closer, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	osLocks.mu.Lock()
	defer osLocks.mu.Unlock()
	if osLocks.held[abs] {
		return nil, &lockError{path: name, cause: errHeldInProcess}
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	if err := lockFile(f); err != nil {
		_ = f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, &lockError{path: name, cause: err}
		}
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	if osLocks.held == nil {
		osLocks.held = make(map[string]bool)
	}
	osLocks.held[abs] = true
	return &osLock{abs: abs, f: f}, nil
}

var errHeldInProcess = errors.New("already held by this process")

// lockError reports a lock held elsewhere. It wraps ErrLocked and the cause.
type lockError struct {
	path  string
	cause error
}

func (e *lockError) Error() string {
	if e.cause == errHeldInProcess {
		return fmt.Sprintf("vfs: lock %s: %v", e.path, e.cause)
	}
	return fmt.Sprintf("vfs: lock %s: %v (is another process using the directory?)", e.path, e.cause)
}

func (e *lockError) Unwrap() []error { return []error{ErrLocked, e.cause} }

type osLock struct {
	abs string
	mu  sync.Mutex
	f   *os.File // nil once released
}

// Close releases the lock. A second Close returns an error.
func (l *osLock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("vfs: lock %s: %w", l.abs, os.ErrClosed)
	}
	err := unlockFile(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	osLocks.mu.Lock()
	delete(osLocks.held, l.abs)
	osLocks.mu.Unlock()
	return err
}
