package lsm

import (
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
)

// EventListener receives background events of a DB. Every field is
// optional.
type EventListener struct {
	// CompactionInstalled is called when a compaction has installed a
	// version in which its input tables are no longer live (the DB
	// deletes them as soon as no reader holds an older version, which may
	// be during the call). The owner of hard links to those tables (a
	// checkpoint kept as a snapshot) learns at once that its links now
	// keep replaced data on disk, instead of finding out by polling.
	//
	// It runs on the goroutine that ran the compaction (the background
	// one, or Compact's caller) with no lock held, so it holds up the
	// next compaction until it returns: it must return quickly and
	// must not wait for writes, Flush or Checkpoint of this DB (a write
	// may be waiting for this very compaction). Hand the work to another
	// goroutine. Compactions that run at once
	// (Options.MaxConcurrentCompactions) call it concurrently.
	CompactionInstalled func(CompactionInfo)

	// FlushInstalled is called when a flush has installed its L0 table
	// (none if the memtables held nothing), on the flush goroutine with no
	// lock held: the same rules as CompactionInstalled apply.
	FlushInstalled func(FlushInfo)
}

// FlushInfo describes an installed flush.
type FlushInfo struct {
	// Output is the L0 table written; FileName is empty when the flushed
	// memtables held nothing.
	Output TableInfo
	// Duration is the time from the start of the table's write to its
	// installation in the manifest.
	Duration time.Duration
}

// CompactionInfo describes an installed compaction.
type CompactionInfo struct {
	// StartLevel and OutputLevel are the levels the compaction read and
	// wrote (equal when Compact rewrites the bottom level in place).
	StartLevel, OutputLevel int
	// Inputs are the tables the compaction made obsolete, Outputs the
	// tables it installed. A trivial move installs its input table at
	// the output level: Inputs is then empty.
	Inputs, Outputs []TableInfo
	// Duration is the time from the start of the compaction's write (for
	// a trivial move: of its manifest edit) to its installation.
	Duration time.Duration
}

// TableInfo names a table of the DB and gives its size.
type TableInfo struct {
	// FileName is the table's file name in the DB directory.
	FileName string
	Size     int64
}

func tableInfos(files []*version.FileMetadata) []TableInfo {
	out := make([]TableInfo, len(files))
	for i, f := range files {
		out[i] = TableInfo{FileName: base.MakeFilename(base.FileTypeTable, f.FileNum), Size: int64(f.Size)}
	}
	return out
}

// compactionInstalled tells the listener, if any, that c was installed.
// REQUIRES: d.mu not held.
func (d *DB) compactionInstalled(c *compaction, duration time.Duration) {
	l := d.opts.EventListener
	if l == nil || l.CompactionInstalled == nil {
		return
	}
	info := CompactionInfo{StartLevel: c.startLevel, OutputLevel: c.outputLevel, Outputs: tableInfos(c.outputs), Duration: duration}
	if !c.trivialMove {
		info.Inputs = tableInfos(append(append([]*version.FileMetadata(nil), c.inputs[0]...), c.inputs[1]...))
	}
	l.CompactionInstalled(info)
}

// flushInstalled tells the listener, if any, that a flush that took
// duration installed meta (nil: no table).
// REQUIRES: d.mu not held.
func (d *DB) flushInstalled(meta *version.FileMetadata, duration time.Duration) {
	l := d.opts.EventListener
	if l == nil || l.FlushInstalled == nil {
		return
	}
	info := FlushInfo{Duration: duration}
	if meta != nil {
		info.Output = tableInfos([]*version.FileMetadata{meta})[0]
	}
	l.FlushInstalled(info)
}
