package fsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
)

// Names inside the FSM's directory (see doc.go).
const (
	engineDirName      = "engine"
	engineOldDirName   = "engine.old"
	checkpointsDirName = "checkpoints"
	restorePrefix      = "restore-"
)

// FSM is the raft state machine of a cairn node: it applies committed
// commands to an lsm.DB and serves reads from it. It implements
// raft.BatchingFSM.
//
// Concurrency: raft calls ApplyBatch, Apply, Snapshot and Restore from one
// goroutine; FSMSnapshot.Persist runs concurrently with them. Reads (Get,
// Scan, Checksum, ...), AppliedIndex, WaitApplied, Checkpoint and Close may
// be called from any goroutine.
//
// Lock order: applyMu → mu.
type FSM struct {
	dir    string
	opts   Options
	fs     vfs.FS
	limits limits

	// applyMu serializes what changes the applied state: ApplyBatch,
	// Restore, Checkpoint (which must see a state at a known index) and
	// Close.
	applyMu sync.Mutex
	// The applied state. REQUIRES: applyMu held (and, when replacing
	// them in Restore, mu held too).
	state    appliedState
	sessions *sessionTable
	ap       applier

	// mu guards the engine pointer: readers hold mu.RLock while they use
	// db; Restore and Close hold mu.Lock while they replace or close it,
	// so a read waits for a restore to finish and never uses a closed
	// engine.
	mu struct {
		sync.RWMutex
		// db is the engine; nil once closed (or if a restore failed
		// to reopen it, in which case the FSM is halted).
		db *lsm.DB
	}

	// applied is state.index, readable without locks.
	// Invariant: it only increases, except when Restore installs an older
	// state (raft restoring a snapshot at startup).
	applied atomic.Uint64
	// halted is the sticky error that stopped the state machine.
	halted atomic.Pointer[error]
	closed atomic.Bool
	notify notifier
	// seq numbers checkpoint and staging directories.
	seq atomic.Uint64
	// duplicates counts the writes answered from their session (see
	// Duplicates).
	duplicates atomic.Uint64
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// New opens (creating it if needed) the state machine stored in dir and
// reads its applied index: raft entries at or below it are skipped, so the
// node need not re-ingest a snapshot on restart (see doc.go). It also
// finishes or undoes a restore a crash interrupted, and removes leftover
// checkpoints and staging directories.
func New(dir string, opts *Options) (*FSM, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &FSM{
		dir:  dir,
		opts: o,
		fs:   o.Engine.FS,
		limits: limits{
			maxValueSize:  o.MaxValueSize,
			maxResponseKV: cairnpb.MaxResponseKVBytes(o.MaxValueSize),
			maxScanPage:   maxScanPageBytes(o.MaxValueSize),
		},
	}
	f.notify.init()
	if err := f.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: creating %s: %w", dir, err)
	}
	// Make dir's entry (and its parents', if MkdirAll made them) durable.
	for d := filepath.Clean(dir); ; {
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		if err := syncDir(f.fs, parent); err != nil {
			return nil, err
		}
		d = parent
	}
	if err := f.recoverDirs(); err != nil {
		return nil, err
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.openLocked(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FSM) path(name string) string { return filepath.Join(f.dir, name) }

// recoverDirs repairs the directory after a crash: a restore interrupted
// between its two renames left engine.old without engine (put it back: the
// state is the old one, and raft still holds the snapshot); any other
// engine.old, checkpoint or staging directory is garbage.
func (f *FSM) recoverDirs() error {
	engineExists, err := exists(f.fs, f.path(engineDirName))
	if err != nil {
		return err
	}
	oldExists, err := exists(f.fs, f.path(engineOldDirName))
	if err != nil {
		return err
	}
	switch {
	case oldExists && !engineExists:
		f.opts.Logger.Printf("fsm: putting back %s after an interrupted restore", engineOldDirName)
		if err := f.fs.Rename(f.path(engineOldDirName), f.path(engineDirName)); err != nil {
			return fmt.Errorf("fsm: recovering from an interrupted restore: %w", err)
		}
		if err := syncDir(f.fs, f.dir); err != nil {
			return err
		}
	case oldExists:
		if err := f.fs.RemoveAll(f.path(engineOldDirName)); err != nil {
			return fmt.Errorf("fsm: %w", err)
		}
	}
	names, err := f.fs.List(f.dir)
	if err != nil {
		return fmt.Errorf("fsm: %w", err)
	}
	for _, name := range names {
		if name == checkpointsDirName || strings.HasPrefix(name, restorePrefix) {
			if err := f.fs.RemoveAll(f.path(name)); err != nil {
				return fmt.Errorf("fsm: removing leftover %s: %w", name, err)
			}
		}
	}
	return nil
}

// openLocked opens the engine and loads the applied state and sessions.
// REQUIRES: applyMu and mu held.
func (f *FSM) openLocked() error {
	db, err := lsm.Open(f.path(engineDirName), f.opts.Engine)
	if err != nil {
		return fmt.Errorf("fsm: opening engine: %w", err)
	}
	st, sessions, err := loadState(db, true)
	if err != nil {
		db.Close()
		return err
	}
	f.mu.db = db
	f.state = st
	f.sessions = sessions
	f.applied.Store(st.index)
	f.notify.notify()
	return nil
}

// loadState checks the engine's layout version (writing it into an empty
// engine if init) and reads the applied state and the sessions.
func loadState(db *lsm.DB, init bool) (appliedState, *sessionTable, error) {
	var st appliedState
	v, err := db.Get(keyFormat)
	switch {
	case errors.Is(err, lsm.ErrNotFound) && init:
		it, err := db.NewIter(nil)
		if err != nil {
			return st, nil, err
		}
		nonEmpty := it.First()
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return st, nil, err
		}
		if nonEmpty {
			return st, nil, fmt.Errorf("fsm: the engine holds data but no format marker: not a cairn state machine")
		}
		var b [4]byte
		putUint32(b[:], formatVersion)
		if err := db.Put(keyFormat, b[:], lsm.Sync); err != nil {
			return st, nil, fmt.Errorf("fsm: initializing engine: %w", err)
		}
	case err != nil:
		return st, nil, fmt.Errorf("fsm: reading format marker: %w", err)
	case len(v) != 4:
		return st, nil, corruptionf("format marker of %d bytes", len(v))
	case getUint32(v) != formatVersion:
		return st, nil, fmt.Errorf("fsm: engine layout version %d, this build reads %d", getUint32(v), formatVersion)
	}
	v, err = db.Get(keyApplied)
	switch {
	case errors.Is(err, lsm.ErrNotFound):
	case err != nil:
		return st, nil, fmt.Errorf("fsm: reading applied index: %w", err)
	default:
		if st, err = decodeAppliedState(v); err != nil {
			return st, nil, err
		}
	}
	sessions := newSessionTable()
	if err := sessions.load(db); err != nil {
		return st, nil, fmt.Errorf("fsm: loading sessions: %w", err)
	}
	return st, sessions, nil
}

// AppliedIndex returns the raft index of the last entry applied. Every
// entry at or below it is reflected in reads.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// WaitApplied blocks until the FSM has applied index (or ctx is done, or
// the FSM is closed or halted). raft does not pass LogNoop and LogBarrier
// entries to the FSM: wait for the last command or configuration entry at
// or below the index of interest (see doc.go, "Reads").
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		ch := f.notify.wait()
		if f.applied.Load() >= index {
			return nil
		}
		if err := f.Err(); err != nil {
			return err
		}
		if f.closed.Load() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Err returns the error that halted the FSM (wrapping ErrHalted), or nil.
func (f *FSM) Err() error {
	if p := f.halted.Load(); p != nil {
		return *p
	}
	return nil
}

// halt stops the state machine with err.
func (f *FSM) halt(err error) error {
	herr := fmt.Errorf("%w: %w", ErrHalted, err)
	if f.halted.CompareAndSwap(nil, &herr) {
		f.opts.Logger.Printf("%v", herr)
	}
	f.notify.notify()
	return f.Err()
}

// usableLocked returns why the FSM cannot apply, snapshot or restore.
// REQUIRES: mu held (read or write).
func (f *FSM) usableLocked() error {
	if err := f.Err(); err != nil {
		return err
	}
	if f.mu.db == nil {
		return ErrClosed
	}
	return nil
}

// noEngineErr says why there is no engine: closed, or halted by a restore
// that could not reopen it.
func (f *FSM) noEngineErr() error {
	if f.closed.Load() {
		return ErrClosed
	}
	if err := f.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// Close closes the engine. Reads and waits in progress or later return
// ErrClosed. Close raft (raft.Shutdown) first.
func (f *FSM) Close() error {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Swap(true) {
		return ErrClosed
	}
	defer f.notify.notify()
	if f.mu.db == nil {
		return nil
	}
	err := f.mu.db.Close()
	f.mu.db = nil
	return err
}

// Duplicates returns how many writes this FSM recognized, since it was
// opened, as already applied (their client_id and seq in a session) and
// answered with the remembered result, or ErrResultUnavailable, instead of
// applying them again. Every replica counts the duplicates it applies,
// and entries replayed after a restart count again.
func (f *FSM) Duplicates() uint64 { return f.duplicates.Load() }

// Metrics returns the engine's metrics.
func (f *FSM) Metrics() (*lsm.Metrics, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.db == nil {
		return nil, f.noEngineErr()
	}
	return f.mu.db.Metrics(), nil
}

// notifier wakes every waiter when the applied index moves (or the FSM
// closes or halts): waiters take the current channel, check their
// condition, and wait on the channel, which notify closes and replaces.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) init() { n.ch = make(chan struct{}) }

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

func exists(fs vfs.FS, name string) (bool, error) {
	_, err := fs.Stat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("fsm: %w", err)
}

func syncDir(fs vfs.FS, dir string) error {
	if err := vfs.SyncDir(fs, dir); err != nil {
		return fmt.Errorf("fsm: syncing %s: %w", dir, err)
	}
	return nil
}

func putUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func getUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
