package fsm

import (
	"fmt"
	"io"
	"log"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Options configure an FSM. The zero value of every field means its
// default.
//
// MaxSessions, SessionTTL, MaxValueSize and MaxSessionResultBytes change
// what a command does, so every replica of a cluster must use the same
// values (like raft's own configuration); changing them is a rolling
// restart that may make replicas diverge on the commands applied during it,
// only in which sessions they retain.
type Options struct {
	// Engine configures the storage engine; its FS is also the file system
	// of the FSM's own directories. Default: the engine's defaults.
	//
	// Engine.MinBlobSize is key-value separation's threshold (values of at
	// least that many bytes go to blob files, see lsm/blob): the engine's
	// default, 4 KiB, applies; a negative value turns separation off. It
	// is a local storage choice, so replicas may differ in it. Snapshots carry the blob files:
	// they are files of the engine's checkpoint like its tables, listed and
	// checksummed with them.
	Engine *lsm.Options

	// MaxSessions bounds the client sessions remembered for at-most-once
	// writes; beyond it the least recently active session is evicted.
	// Default 10,000.
	MaxSessions int
	// SessionTTL expires a session that has not written for this long, as
	// measured by the leader's clock carried in the log
	// (raft.Log.AppendedAt). Default 10 minutes.
	SessionTTL time.Duration
	// MaxSessionResultBytes bounds the encoded result a session retains;
	// a larger result (say a Put returning a large prev_kv) is not
	// retained, and a duplicate of its write gets ErrResultUnavailable.
	// Default 1 MiB.
	MaxSessionResultBytes int

	// MaxValueSize is the largest value a Put accepts. Default
	// cairnpb.DefaultMaxValueSize (16 MiB).
	MaxValueSize int

	// SyncWrites makes every applied batch durable (fsynced) before
	// ApplyBatch returns. It is not needed for safety: the raft log is
	// durable and is replayed past the engine's durable applied index
	// after a crash (see doc.go). Default false.
	SyncWrites bool

	// EngineWAL keeps the engine's own write-ahead log. Off by default:
	// behind the durable raft log it is a second copy of every entry, and
	// the engine recovers to its last flushed state instead (doc.go,
	// "Restart without re-ingesting a snapshot"). SyncWrites turns it on.
	EngineWAL bool

	// Checkpoints, if set, is the snapshot store raft uses when it keeps
	// snapshots as checkpoint directories: Restore then hard-links a
	// snapshot's files from it instead of copying its stream. It must be
	// on the engine's FS (hard links).
	Checkpoints CheckpointSource

	// Logger receives notable events (restores, cleanups). Default:
	// discard.
	Logger *log.Logger
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var eng lsm.Options
	if c.Engine != nil {
		eng = *c.Engine
	}
	if eng.FS == nil {
		eng.FS = vfs.Default
	}
	if !c.EngineWAL && !c.SyncWrites {
		eng.DisableWAL = true
	}
	c.Engine = &eng
	if c.MaxSessions == 0 {
		c.MaxSessions = 10000
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 10 * time.Minute
	}
	if c.MaxSessionResultBytes == 0 {
		c.MaxSessionResultBytes = 1 << 20
	}
	if c.MaxValueSize == 0 {
		c.MaxValueSize = cairnpb.DefaultMaxValueSize
	}
	if c.Logger == nil {
		c.Logger = log.New(io.Discard, "", 0)
	}
	switch {
	case c.MaxSessions < 1:
		return c, fmt.Errorf("%w: option MaxSessions = %d", ErrInvalidArgument, c.MaxSessions)
	case c.SessionTTL < 0:
		return c, fmt.Errorf("%w: option SessionTTL = %v", ErrInvalidArgument, c.SessionTTL)
	case c.MaxSessionResultBytes < 0 || c.MaxSessionResultBytes > lsm.MaxValueSize/2:
		return c, fmt.Errorf("%w: option MaxSessionResultBytes = %d", ErrInvalidArgument, c.MaxSessionResultBytes)
	case c.MaxValueSize < 0 || c.MaxValueSize > lsm.MaxValueSize-maxRecordOverhead:
		return c, fmt.Errorf("%w: option MaxValueSize = %d (maximum %d)",
			ErrInvalidArgument, c.MaxValueSize, lsm.MaxValueSize-maxRecordOverhead)
	}
	return c, nil
}
