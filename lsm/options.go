package lsm

import (
	"fmt"
	"io"
	"log"
	"runtime"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Limits on what a write may carry. A request past them fails with
// ErrInvalidArgument and writes nothing.
const (
	MaxKeySize   = 64 << 10
	MaxValueSize = 256 << 20
)

// WALRecoveryMode says what Open does when a WAL is damaged.
type WALRecoveryMode int

const (
	// WALRecoverStrict (the default) replays every WAL completely. A torn
	// tail (an incomplete last record, as a crash leaves it) is dropped;
	// damage followed by valid records fails Open with a corruption error,
	// because dropping it would lose acknowledged writes silently. So does
	// damage below the size the manifest records the WAL as synced at, a
	// WAL shorter than that, and a missing WAL the manifest records (see
	// "Recovery" in the package documentation).
	WALRecoverStrict WALRecoveryMode = iota
	// WALRecoverPointInTime replays up to the first damage anywhere (or
	// up to a missing WAL that the manifest records) and drops everything
	// after it, in that WAL and in every later one. An
	// operator chooses it explicitly to recover a damaged DB to a
	// consistent earlier point.
	WALRecoverPointInTime
)

// Compression is the block compression of new SSTs.
type Compression uint8

// The block compressions. The zero value, DefaultCompression, is Snappy.
const (
	DefaultCompression Compression = iota
	NoCompression
	SnappyCompression
	ZstdCompression
)

func (c Compression) sst() sst.Compression {
	switch c {
	case NoCompression:
		return sst.NoCompression
	case ZstdCompression:
		return sst.ZstdCompression
	}
	return sst.SnappyCompression
}

// blob returns the compression of new blob files for a DB whose
// BlobCompression is c and whose tables use tables. Blob files offer
// Snappy only: any table compression but none gives Snappy.
func (c Compression) blob(tables Compression) blob.Compression {
	if c == DefaultCompression {
		c = tables
	}
	if c == NoCompression {
		return blob.CompressionNone
	}
	return blob.CompressionSnappy
}

func (c Compression) String() string {
	switch {
	case c == DefaultCompression:
		return "default(snappy)"
	case c > ZstdCompression:
		return fmt.Sprintf("Compression(%d)", uint8(c))
	}
	return c.sst().String()
}

// Options configure a DB. The zero value of every field means its default.
type Options struct {
	// FS is the file system every file access goes through. Default:
	// vfs.Default (the operating system's).
	FS vfs.FS
	// Cache is the block cache, which several DBs may share. Default: a
	// new cache of CacheSizeBytes, which the DB closes when it closes. A
	// cache given here stays its creator's: the DB only drops its own
	// blocks from it at Close, and the creator calls Cache.Close (which
	// unmaps its off-heap memory) once every DB using it is closed.
	Cache *cache.Cache
	// CacheSizeBytes sizes the block cache made when Cache is nil.
	// Default 64 MiB.
	CacheSizeBytes int64

	// MemTableSizeBytes is the size at which the mutable memtable is
	// switched out and queued for flushing. Default 16 MiB.
	MemTableSizeBytes int64
	// MemTableStopWritesThreshold is the number of memtables (mutable and
	// queued) at which writes stop until a flush finishes. Default 3.
	MemTableStopWritesThreshold int
	// MemtableBloomBitsPerKey sizes the memtable Bloom filter, assuming
	// an average entry of MemTableBloomAssumedEntryBytes. 0 means the
	// default of 10; a negative value disables the filter.
	MemtableBloomBitsPerKey float64

	// L0CompactionThreshold is the number of L0 files that triggers a
	// compaction into the base level. Default 4.
	L0CompactionThreshold int
	// L0SlowdownWritesThreshold is the number of L0 files at which each
	// write is delayed by 1 ms. Default 12.
	L0SlowdownWritesThreshold int
	// L0StopWritesThreshold is the number of L0 files at which writes stop
	// until compaction catches up. Default 20.
	L0StopWritesThreshold int
	// LBaseMaxBytes is the target size of the base level (the level L0
	// compacts into). Level targets grow by LevelMultiplier below it and
	// are derived from the size of the bottom level (dynamic level
	// sizes). Default 64 MiB.
	LBaseMaxBytes int64
	// LevelMultiplier is the size ratio of adjacent levels. Default 10.
	LevelMultiplier int
	// MaxSubcompactions bounds the key ranges one compaction writes in
	// parallel: a compaction with at least two TargetFileSizeBytes of input
	// is cut by key into up to this many parts of about equal size, each
	// merged and written by its own goroutine (a full Compact of a large
	// level uses every core). 1 writes every compaction on one goroutine.
	// Default: GOMAXPROCS at Open, at most 4.
	MaxSubcompactions int
	// MaxConcurrentCompactions bounds the background compactions that run
	// at once, each on its own goroutine (and each split further into
	// MaxSubcompactions parts). Compactions that run together never share
	// an input table and never write, or write and read, overlapping key
	// ranges of one level; at most one compacts L0. One runs while
	// compactions keep up; one more starts for each L0CompactionThreshold
	// tables L0 holds beyond its threshold, or for each 2×LBaseMaxBytes
	// of pending compaction bytes, whichever is more (Pebble's
	// CompactionConcurrencyRange, raised the same way), up to this bound.
	// 1 runs one compaction at a time. Default: GOMAXPROCS at Open, at
	// most 4 (RocksDB's max_background_compactions is 2 by default within
	// max_background_jobs; Pebble v2's upper bound defaults to 1).
	MaxConcurrentCompactions int
	// TargetFileSizeBytes is the size at which compaction cuts output
	// files. Default 4 MiB.
	TargetFileSizeBytes int64

	// BlockSizeBytes is the target uncompressed size of SST data blocks.
	// Default 4 KiB.
	BlockSizeBytes int
	// BlockRestartInterval is the number of keys between restart points in
	// a data block. Default 16.
	BlockRestartInterval int
	// Compression of new SSTs' blocks. Default Snappy.
	Compression Compression
	// FilterBitsPerKey sizes each SST's filter. 0 means the default of 10;
	// a negative value builds no filters.
	FilterBitsPerKey float64

	// WALRecovery chooses how Open treats a damaged WAL.
	WALRecovery WALRecoveryMode
	// WALSyncRecordBytes: a synced write also records the WAL's synced
	// size in the manifest (one more append and fsync, of the manifest)
	// once the WAL has grown by at least this many bytes since the size
	// last recorded. Recovery treats damage below a recorded size as
	// corruption and only damage past it as a torn tail (see "Recovery" in
	// the package documentation). A WAL's final size is always recorded
	// when it is closed (memtable switch, Flush, Close). 1 records at
	// every synced write; a negative value only at close. Default
	// DefaultWALSyncRecordBytes.
	WALSyncRecordBytes int64
	// DisableWAL skips the WAL: writes not yet flushed are lost in a crash.
	// Close flushes the memtables, so a clean Close loses nothing.
	DisableWAL bool
	// DisableWALMmap makes WAL appends use write(2). By default, on Linux
	// and the operating system's file system, the WAL is appended to
	// through a shared memory mapping of the file, 1 MiB chunk by chunk,
	// each reserved with fallocate before it is mapped: a write is a copy
	// into the kernel's page cache with no system call, and an
	// acknowledged NoSync write survives a kill of the process exactly as
	// with write(2). While the writes average 2 KiB or more (large
	// values), the WAL uses pwrite(2) anyway, chunk by chunk: there the
	// mapping's page faults cost more than the system calls they save.
	// Sync is fsync either way. Set it for file systems where mappings of
	// files are unwanted (e.g. network file systems); it is also the
	// fallback where fallocate is unsupported.
	DisableWALMmap bool
	// WALBufferedWrites trades the default durability of unsynced writes
	// for speed (as Pebble's WAL does). A write appends its WAL record to
	// a buffer in the process's memory and returns; a goroutine writes
	// the buffer to the WAL file (and fsyncs it when a write asks for
	// Sync). What it gives up: an acknowledged NoSync write may be lost if
	// the process is killed (or crashes) before that goroutine has handed
	// it to the operating system; at most WALBufferBytes (1 MiB) plus the
	// last commit group are in the buffer at any moment, and a byte waits
	// there about a millisecond at most (longer only if the goroutine is
	// not scheduled or the write to the file is slow). What it keeps: a
	// Sync write returns only when it and every write before it are
	// written and fsynced; a memtable switch, Flush and Close write out
	// and sync the buffer first; and what survives a crash is always a
	// prefix of the acknowledged writes, each batch whole or absent, never
	// a gap. A failed background write or sync becomes the DB's background
	// error: the next write returns it, and every later one. Default off:
	// an acknowledged NoSync write survives a process kill. Ignored with
	// DisableWAL.
	WALBufferedWrites bool
	// testInitialMemTableBytes, if > 0, replaces initialMemTableBytes
	// (tests that need one memtable, hence one WAL, from the start).
	testInitialMemTableBytes int64

	// MinBlobSize is key-value separation's threshold (lsm/blob): at
	// flush and at compaction, values of at least this many bytes are
	// written to blob files and the tables keep a small blob index in
	// their place. Default DefaultMinBlobSize; a negative value turns
	// separation off (every value stays in the tables). The WAL always
	// holds whole values; separation happens when a memtable is flushed.
	MinBlobSize int
	// BlobCompression of new blob files' values: NoCompression or
	// SnappyCompression (ZstdCompression means Snappy too). Default: what
	// Compression is. Files keep the compression they were written with;
	// blob GC rewrites records with the current one.
	BlobCompression Compression
	// BlobCache caches verified blob records, off the Go heap. If nil, the
	// DB creates one of BlobCacheSizeBytes and closes it at Close; a cache
	// given here may be shared by several DBs and is closed by its owner.
	BlobCache *blob.Cache
	// BlobCacheSizeBytes sizes the DB's own blob cache. Default 64 MiB
	// (only allocated as records are cached); negative: no blob cache.
	// It is separate from the block cache on purpose: a 4 KiB value read
	// once would otherwise push out the index and data blocks every read
	// needs.
	BlobCacheSizeBytes int64
	// BlobTargetFileSizeBytes is the size at which a flush or compaction
	// starts a new blob file. Default 64 MiB.
	BlobTargetFileSizeBytes int64
	// MaxOpenBlobFiles bounds the blob file readers kept open. Default 256.
	MaxOpenBlobFiles int
	// BlobGCDiscardRatio: a background job rewrites the live records of a
	// blob file once this fraction of its bytes is garbage (indexes that
	// compactions dropped). Default 0.5; negative turns automatic blob GC
	// off (DB.BlobGC still runs it on demand).
	BlobGCDiscardRatio float64
	// BlobMaxSpaceAmp: blob GC also runs, on the file with the most
	// garbage, whenever the blob files' total size exceeds this multiple
	// of their live bytes, so that space amplification stays bounded even
	// when garbage is spread evenly below BlobGCDiscardRatio. Only garbage
	// that compactions have found counts. Default DefaultBlobMaxSpaceAmp.
	BlobMaxSpaceAmp float64
	// BlobGCBytesPerSec limits blob GC's reads plus writes, so that it
	// does not starve foreground writes. Default 64 MiB/s; negative: no
	// limit. GC that has fallen behind the writes (the blob files exceed
	// 1.25× their live bytes, counting the garbage compactions have
	// found) runs unpaced until it has caught up.
	BlobGCBytesPerSec int64
	// DisableBlobCompactionGC turns off blob GC by compaction: by default
	// compactions relocate the live records of the blob files GC would
	// pick (BlobGCDiscardRatio, BlobMaxSpaceAmp), and the picker forces
	// compactions of the tables referencing them when none is due (see
	// lsm/blob_relocate.go); the background GC job then handles only what
	// compactions cannot reach. Disabled, the background job does it all.
	DisableBlobCompactionGC bool

	// Logger receives background errors and events. Default: discard.
	Logger *log.Logger
	// EventListener, if set, is told of background events as they happen
	// (see EventListener).
	EventListener *EventListener

	// ErrorIfExists makes Open fail when the directory already holds a DB.
	ErrorIfExists bool
	// ErrorIfNotExists makes Open fail when the directory holds no DB.
	ErrorIfNotExists bool
}

// DefaultMinBlobSize is the default MinBlobSize: values of 4 KiB and more
// are separated. Measured with 4 KiB values (bench/RESULTS.md, "Key-value
// separation"), separation wins every read and write benchmark against
// keeping them in the tables (readrandom 1.9×, readseq 6.7×, fillrandom
// 2.5×, write amplification 0.41× at 200,000 keys); smaller values were
// not measured to win (a Get pays an extra lookup and, on a miss, a read),
// and Titan's users found scans slower with a small threshold.
const DefaultMinBlobSize = 4096

// DefaultBlobMaxSpaceAmp is the default BlobMaxSpaceAmp. Garbage that
// compactions have not yet found (indexes shadowed by newer writes in
// upper levels) is not counted, so the true ratio runs above the counted
// one: values overwritten in L0 tables not yet compacted count as live
// until the next L0 compaction. With L0 compacted at every flush, 1.15
// keeps a steady random overwrite under 1.5 (measured worst 1.36-1.39;
// 1.25 reached 1.54; see TestBlobSpaceAmpBounded).
const DefaultBlobMaxSpaceAmp = 1.15

// DefaultWALSyncRecordBytes is the default WALSyncRecordBytes.
//
// Why not at every synced write: that adds a manifest append and fsync to
// each of them, doubling the fsyncs of the synced write path. In
// BenchmarkFillSyncWALRecord (one writer, every 100-byte Put synced, ext4
// on a shared 2-core VM) a synced Put took 5.2 ms with a record at every
// sync against 2.4 ms with the default, 2.3x (median of 10 interleaved
// rounds; before WAL tracking: 2.2 ms). Once per MiB is one extra fsync per
// ~7,700 such Puts (+0.01%, below the benchmark's noise), and it still
// bounds how much synced data only the torn-tail rule covers after a crash.
// See bench/RESULTS.md, 2026-12-01.
const DefaultWALSyncRecordBytes = 1 << 20

// MemTableBloomAssumedEntryBytes is the average entry size used to turn
// MemtableBloomBitsPerKey into a filter size for a memtable of
// MemTableSizeBytes.
const MemTableBloomAssumedEntryBytes = 64

// withDefaults returns a copy of o with every zero field set to its
// default, or an error naming the first invalid field.
func (o *Options) withDefaults() (*Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.CacheSizeBytes == 0 {
		c.CacheSizeBytes = 64 << 20
	}
	if c.MemTableSizeBytes == 0 {
		c.MemTableSizeBytes = 16 << 20
	}
	if c.MemTableStopWritesThreshold == 0 {
		c.MemTableStopWritesThreshold = 3
	}
	if c.MemtableBloomBitsPerKey == 0 {
		c.MemtableBloomBitsPerKey = 10
	}
	if c.L0CompactionThreshold == 0 {
		c.L0CompactionThreshold = 4
	}
	if c.L0SlowdownWritesThreshold == 0 {
		c.L0SlowdownWritesThreshold = 12
	}
	if c.L0StopWritesThreshold == 0 {
		c.L0StopWritesThreshold = 20
	}
	if c.LBaseMaxBytes == 0 {
		c.LBaseMaxBytes = 64 << 20
	}
	if c.LevelMultiplier == 0 {
		c.LevelMultiplier = 10
	}
	if c.MaxSubcompactions == 0 {
		c.MaxSubcompactions = min(runtime.GOMAXPROCS(0), 4)
	}
	if c.MaxConcurrentCompactions == 0 {
		c.MaxConcurrentCompactions = min(runtime.GOMAXPROCS(0), 4)
	}
	if c.TargetFileSizeBytes == 0 {
		c.TargetFileSizeBytes = 4 << 20
	}
	if c.BlockSizeBytes == 0 {
		c.BlockSizeBytes = 4 << 10
	}
	if c.BlockRestartInterval == 0 {
		c.BlockRestartInterval = 16
	}
	if c.FilterBitsPerKey == 0 {
		c.FilterBitsPerKey = 10
	}
	if c.Logger == nil {
		c.Logger = log.New(io.Discard, "", 0)
	}
	if c.MinBlobSize == 0 {
		c.MinBlobSize = DefaultMinBlobSize
	}
	if c.BlobCacheSizeBytes == 0 {
		c.BlobCacheSizeBytes = 64 << 20
	}
	if c.BlobTargetFileSizeBytes == 0 {
		c.BlobTargetFileSizeBytes = 64 << 20
	}
	if c.MaxOpenBlobFiles == 0 {
		c.MaxOpenBlobFiles = 256
	}
	if c.BlobGCDiscardRatio == 0 {
		c.BlobGCDiscardRatio = 0.5
	}
	if c.BlobMaxSpaceAmp == 0 {
		c.BlobMaxSpaceAmp = DefaultBlobMaxSpaceAmp
	}
	if c.BlobGCBytesPerSec == 0 {
		c.BlobGCBytesPerSec = 64 << 20
	}
	if c.WALSyncRecordBytes == 0 {
		c.WALSyncRecordBytes = DefaultWALSyncRecordBytes
	}
	bad := func(field string, v any) (*Options, error) {
		return nil, base.InvalidArgumentf("option %s = %v", field, v)
	}
	switch {
	case c.CacheSizeBytes < 0:
		return bad("CacheSizeBytes", c.CacheSizeBytes)
	case c.MaxSubcompactions < 0:
		return bad("MaxSubcompactions", c.MaxSubcompactions)
	case c.MaxConcurrentCompactions < 0:
		return bad("MaxConcurrentCompactions", c.MaxConcurrentCompactions)
	case c.MemTableSizeBytes < 64<<10:
		return bad("MemTableSizeBytes (minimum 64 KiB)", c.MemTableSizeBytes)
	case c.MemTableSizeBytes > 4<<30:
		return bad("MemTableSizeBytes (maximum 4 GiB)", c.MemTableSizeBytes)
	case c.MemTableStopWritesThreshold < 2:
		return bad("MemTableStopWritesThreshold (minimum 2)", c.MemTableStopWritesThreshold)
	case c.L0CompactionThreshold < 1:
		return bad("L0CompactionThreshold", c.L0CompactionThreshold)
	case c.L0SlowdownWritesThreshold < c.L0CompactionThreshold:
		return bad("L0SlowdownWritesThreshold (below L0CompactionThreshold)", c.L0SlowdownWritesThreshold)
	case c.L0StopWritesThreshold < c.L0SlowdownWritesThreshold:
		return bad("L0StopWritesThreshold (below L0SlowdownWritesThreshold)", c.L0StopWritesThreshold)
	case c.LBaseMaxBytes < 1:
		return bad("LBaseMaxBytes", c.LBaseMaxBytes)
	case c.LevelMultiplier < 2:
		return bad("LevelMultiplier (minimum 2)", c.LevelMultiplier)
	case c.TargetFileSizeBytes < 1:
		return bad("TargetFileSizeBytes", c.TargetFileSizeBytes)
	case c.BlockSizeBytes < 64:
		return bad("BlockSizeBytes (minimum 64)", c.BlockSizeBytes)
	case c.BlockRestartInterval < 1:
		return bad("BlockRestartInterval", c.BlockRestartInterval)
	case c.MinBlobSize > MaxValueSize:
		return bad("MinBlobSize", c.MinBlobSize)
	case c.BlobTargetFileSizeBytes < 1:
		return bad("BlobTargetFileSizeBytes", c.BlobTargetFileSizeBytes)
	case c.MaxOpenBlobFiles < 1:
		return bad("MaxOpenBlobFiles", c.MaxOpenBlobFiles)
	case c.BlobGCDiscardRatio > 1:
		return bad("BlobGCDiscardRatio", c.BlobGCDiscardRatio)
	case c.BlobMaxSpaceAmp < 1:
		return bad("BlobMaxSpaceAmp (minimum 1)", c.BlobMaxSpaceAmp)
	case c.Compression > ZstdCompression:
		return bad("Compression", c.Compression)
	case c.BlobCompression > ZstdCompression:
		return bad("BlobCompression", c.BlobCompression)
	case c.WALRecovery != WALRecoverStrict && c.WALRecovery != WALRecoverPointInTime:
		return bad("WALRecovery", c.WALRecovery)
	case c.ErrorIfExists && c.ErrorIfNotExists:
		return nil, fmt.Errorf("%w: ErrorIfExists and ErrorIfNotExists are both set", base.ErrInvalidArgument)
	}
	return &c, nil
}

func (o *Options) sstWriterOptions() sst.WriterOptions {
	bits := o.FilterBitsPerKey
	if bits < 0 {
		bits = 0
	}
	return sst.WriterOptions{
		BlockSize:            o.BlockSizeBytes,
		BlockRestartInterval: o.BlockRestartInterval,
		Compression:          o.Compression.sst(),
		FilterBitsPerKey:     bits,
	}
}

// WriteOptions control one write.
type WriteOptions struct {
	// Sync makes the write durable (the WAL is fsynced) before it is
	// acknowledged. Concurrent writers share one write and one fsync.
	Sync bool
}

// Sync and NoSync are the two common WriteOptions.
var (
	Sync   = &WriteOptions{Sync: true}
	NoSync = &WriteOptions{Sync: false}
)

// IterOptions bound an iterator and choose its snapshot.
type IterOptions struct {
	// LowerBound is inclusive; nil means unbounded.
	LowerBound []byte
	// UpperBound is exclusive; nil means unbounded.
	UpperBound []byte
	// Snapshot reads the DB as of a snapshot; nil reads the latest state
	// as of the iterator's creation.
	Snapshot *Snapshot
}
