package lsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/version"
)

// LevelMetrics describe one level.
type LevelMetrics struct {
	NumFiles  int
	SizeBytes int64
	// Score is the level's compaction urgency: size / target (L0: files /
	// L0CompactionThreshold); above 1 the level wants compaction.
	Score float64
	// TargetBytes is the level's dynamic target size (0 above the base
	// level).
	TargetBytes int64
	// BytesRead and BytesWritten count compaction (and, for L0, flush)
	// traffic at this level.
	BytesRead, BytesWritten int64
}

// FilterMetrics count Bloom filter probes.
type FilterMetrics struct {
	// Checked is the number of probes; Useful the probes that answered
	// "absent" and so saved a lookup.
	Checked, Useful int64
}

// Metrics describe the DB's state and activity since Open.
type Metrics struct {
	Levels    [version.NumLevels]LevelMetrics
	BaseLevel int
	// CompactionPendingBytes estimates the bytes compactions must rewrite
	// to bring every level back within its target (RocksDB's
	// estimate-pending-compaction-bytes): see pendingCompactionBytes.
	CompactionPendingBytes int64

	Flushes, Compactions   int64
	FlushBytes             int64
	CompactionBytesRead    int64
	CompactionBytesWritten int64
	// BytesIngested is the size of the batches written by users since
	// Open.
	BytesIngested int64
	// BytesAtOpen is the size of the tables the DB opened with (those it
	// recovered from the WAL included): data it did not ingest since Open
	// but that its compactions rewrite, such as a checkpoint it was opened
	// on.
	BytesAtOpen int64
	// WriteAmplification is (WAL + flush + compaction bytes written) /
	// (BytesIngested + BytesAtOpen): every byte written per byte of data
	// the DB was given. (Over BytesIngested alone, a DB opened on a large
	// checkpoint that then compacts it reports millions.)
	WriteAmplification float64

	WALBytes, WALSyncs int64
	// CommitGroups and Writes give the group-commit batching factor.
	CommitGroups, Writes int64

	// Slowdowns counts writes delayed by L0SlowdownWritesThreshold;
	// Stops counts waits for a flush or compaction.
	Slowdowns, Stops           int64
	SlowdownTime, StopDuration time.Duration

	MemTables      int
	MemTableBytes  int64
	BlockCache     cache.Metrics
	MemtableFilter FilterMetrics
	TableFilter    FilterMetrics
	BackgroundErr  error

	// MemTableArenaBytes is the capacity of the memtable arenas not yet
	// released: those of MemTables, and of flushed memtables that a reader
	// (an open iterator) or a flush still holds. On unix the arenas are
	// mapped outside the Go heap, and only their touched pages are
	// resident. It drops to 0 once the DB is closed and its iterators too.
	MemTableArenaBytes int64

	// Blob holds key-value separation's figures.
	Blob BlobMetrics
}

// BlobMetrics describe key-value separation (Options.MinBlobSize).
type BlobMetrics struct {
	// Files is the current version's blob files; FileBytes their size on
	// disk; LiveBytes and GarbageBytes their record bytes still referenced
	// and already dropped by compactions.
	Files                              int
	FileBytes, LiveBytes, GarbageBytes int64
	// BytesWritten counts blob file bytes written by flushes, compactions
	// and GC; it is part of WriteAmplification.
	BytesWritten int64
	// GCBytesRead and GCBytesWritten count blob GC's traffic.
	GCBytesRead, GCBytesWritten int64
	// GCUnpacedJobs counts GC jobs that ran, for a while at least, without
	// BlobGCBytesPerSec's pacing because GC had fallen behind the writes.
	GCUnpacedJobs int64
	// RelocatedBytesRead and RelocatedBytesWritten count the blob records
	// compactions relocated (blob GC by compaction); ForcedCompactions the
	// compactions picked to do so when none was due for the levels.
	RelocatedBytesRead, RelocatedBytesWritten int64
	ForcedCompactions                         int64
	// Slowdowns counts the writes delayed because compactions had fallen
	// behind relocating blob garbage (see Options.DisableBlobCompactionGC).
	Slowdowns int64
	// Cache is the blob cache (hits, misses, size, off-heap memory).
	Cache blob.CacheMetrics
	// FileCacheLookups counts lookups in the cache of open blob readers:
	// only blob cache misses make them.
	FileCacheLookups int64
}

// BlockCacheHitRate returns hits / (hits + misses), or 0.
func (m *Metrics) BlockCacheHitRate() float64 {
	if t := m.BlockCache.Hits + m.BlockCache.Misses; t > 0 {
		return float64(m.BlockCache.Hits) / float64(t)
	}
	return 0
}

// Metrics returns the DB's current metrics.
func (d *DB) Metrics() *Metrics {
	m := &Metrics{}
	d.mu.Lock()
	v := d.mu.versions.Current()
	base, targets := levelTargets(v, d.opts)
	m.BaseLevel = base
	m.CompactionPendingBytes = pendingCompactionBytes(v, d.opts, base, targets)
	for l := range v.Levels {
		lm := &m.Levels[l]
		lm.NumFiles = len(v.Levels[l])
		lm.SizeBytes = levelSize(v, l)
		lm.TargetBytes = targets[l]
		if l == 0 {
			lm.Score = float64(lm.NumFiles) / float64(d.opts.L0CompactionThreshold)
		} else if targets[l] > 0 {
			lm.Score = float64(lm.SizeBytes) / float64(targets[l])
		}
		lm.BytesRead = d.mu.stats.levelBytesRead[l]
		lm.BytesWritten = d.mu.stats.levelBytesWritten[l]
	}
	s := &d.mu.stats
	m.Flushes, m.Compactions = s.flushes, s.compactions
	m.FlushBytes = s.flushBytes
	m.CompactionBytesRead, m.CompactionBytesWritten = s.compactionBytesRead, s.compactionBytesWritten
	m.BytesIngested, m.BytesAtOpen = s.bytesIngested, s.bytesAtOpen
	if in := s.bytesIngested + s.bytesAtOpen; in > 0 {
		m.WriteAmplification = float64(s.walBytes+s.flushBytes+s.compactionBytesWritten+s.blobBytesWritten) / float64(in)
	}
	m.Blob.BytesWritten = s.blobBytesWritten
	m.Blob.GCBytesRead, m.Blob.GCBytesWritten = s.blobGCBytesRead, s.blobGCBytesWritten
	m.Blob.GCUnpacedJobs = d.mu.blobGC.unpacedJobs
	m.Blob.RelocatedBytesRead, m.Blob.RelocatedBytesWritten = s.blobRelocatedBytesRead, s.blobRelocatedBytesWritten
	m.Blob.ForcedCompactions = s.blobForcedCompactions
	m.Blob.Slowdowns = s.blobSlowdowns
	for _, b := range v.BlobFiles {
		m.Blob.Files++
		m.Blob.FileBytes += int64(b.Size)
		m.Blob.LiveBytes += int64(b.LiveBytes())
		m.Blob.GarbageBytes += int64(b.GarbageBytes)
	}
	m.WALBytes, m.WALSyncs = s.walBytes, s.walSyncs
	m.CommitGroups, m.Writes = s.groups, s.writes
	m.Slowdowns, m.Stops = s.slowdowns, s.stops
	m.SlowdownTime, m.StopDuration = s.slowdownTime, s.stopTime
	m.BackgroundErr = d.mu.bgErr
	mems := append([]*memTable{d.mu.mem}, d.mu.imm...)
	d.mu.Unlock()

	m.MemTables = len(mems)
	m.MemTableArenaBytes = d.memArenaBytes.Load()
	for _, mt := range mems {
		m.MemTableBytes += mt.approximateBytes()
		m.MemtableFilter.Checked += mt.bloomChecked.Load()
		m.MemtableFilter.Useful += mt.bloomUseful.Load()
	}
	m.MemtableFilter.Checked += d.retiredMemFilter.checked.Load()
	m.MemtableFilter.Useful += d.retiredMemFilter.useful.Load()
	m.TableFilter.Checked = d.tableFilter.checked.Load()
	m.TableFilter.Useful = d.tableFilter.useful.Load()
	m.BlockCache = d.cache.Metrics()
	m.Blob.Cache = d.blobs.cache.Metrics()
	m.Blob.FileCacheLookups = d.blobs.files.Lookups()
	return m
}

// String renders the metrics as a table, one row per level.
func (m *Metrics) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "level  files      size     score  target      read   written\n")
	for l, lm := range m.Levels {
		fmt.Fprintf(&b, "L%d  %8d  %8s  %8.2f  %8s  %8s  %8s\n", l, lm.NumFiles,
			humanBytes(lm.SizeBytes), lm.Score, humanBytes(lm.TargetBytes),
			humanBytes(lm.BytesRead), humanBytes(lm.BytesWritten))
	}
	fmt.Fprintf(&b, "base level L%d, write amp %.2f, flushes %d, compactions %d\n",
		m.BaseLevel, m.WriteAmplification, m.Flushes, m.Compactions)
	fmt.Fprintf(&b, "stalls: %d slowdowns (%s), %d stops (%s)\n", m.Slowdowns, m.SlowdownTime, m.Stops, m.StopDuration)
	fmt.Fprintf(&b, "memtables %d (%s); block cache %s / %s, hit rate %.3f\n", m.MemTables,
		humanBytes(m.MemTableBytes), humanBytes(m.BlockCache.Size), humanBytes(m.BlockCache.Capacity), m.BlockCacheHitRate())
	if m.Blob.Files > 0 {
		fmt.Fprintf(&b, "blob files %d (%s; live %s, garbage %s); blob cache %s, %d hits, %d misses\n", m.Blob.Files,
			humanBytes(m.Blob.FileBytes), humanBytes(m.Blob.LiveBytes), humanBytes(m.Blob.GarbageBytes),
			humanBytes(m.Blob.Cache.Size), m.Blob.Cache.Hits, m.Blob.Cache.Misses)
	}
	fmt.Fprintf(&b, "filters: memtable %d/%d useful, table %d/%d useful\n",
		m.MemtableFilter.Useful, m.MemtableFilter.Checked, m.TableFilter.Useful, m.TableFilter.Checked)
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
