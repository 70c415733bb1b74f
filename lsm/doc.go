// Package lsm is cairn's storage engine: an embeddable, crash-safe
// log-structured merge tree.
//
//	db, err := lsm.Open("/path/to/dir", nil)
//	err = db.Put([]byte("k"), []byte("v"), lsm.Sync)
//	v, err := db.Get([]byte("k"))
//	it, err := db.NewIter(&lsm.IterOptions{LowerBound: []byte("a")})
//	for ok := it.First(); ok; ok = it.Next() { ... it.Key(), it.Value() ... }
//	err = it.Close()
//	err = db.Close()
//
// # Write path
//
// A write is a Batch. Writers queue; the one at the front leads a commit
// group: it appends every batch of the group to the WAL (lsm/record format,
// CRC32C per fragment), fsyncs once if any member asked for Sync, applies the
// batches to the mutable memtable (an arena-backed concurrent skiplist behind
// a DynamicBloom filter), and publishes the group's sequence numbers to
// readers all at once. On Linux the WAL is appended through a shared
// mapping of the file while its writes are small, and with pwrite(2) while
// they average 2 KiB or more, chosen per 1 MiB chunk (Options.DisableWALMmap,
// wal_mmap_linux.go): either way the bytes are in the page cache, and
// survive a kill of the process, before Write returns. Memtables start at 256 KiB and double up to
// MemTableSizeBytes; a full memtable is switched out with its WAL, and the
// queued memtables are flushed together to one L0 table in the background
// once they hold half of MemTableSizeBytes. Leveled compaction with dynamic
// level sizes moves data down; a large compaction is cut by key into up to
// MaxSubcompactions parts written in parallel. Its output tables are cut at
// TargetFileSizeBytes and wherever one would overlap more than ten of those
// in the level below (so that pushing it down later rewrites little);
// Options.EventListener hears of each flush and compaction installed, with
// the tables it replaced and how long it took. Writes slow down (1 ms each)
// when L0 holds L0SlowdownWritesThreshold files and stop while
// L0StopWritesThreshold files or MemTableStopWritesThreshold full
// memtables' worth of queued memtables wait; Metrics reports both.
//
// # Read path
//
// A read loads the current readState (memtables + version) with one atomic
// load and a reference count: no DB-wide lock. The readState holds a
// reference to each of its memtables, whose arenas are mapped outside the
// Go heap (on unix) and unmapped when the last reference goes: the DB's
// lists, a flush writing the memtable, or the last reader (an iterator at
// Close) of a readState naming it. Get probes memtables, then
// the L0 tables that may hold the key, then one table per deeper level; each
// table's cache-local Bloom filter is consulted first, the bottom level's
// included. Data blocks come through a sharded block cache shared by all
// tables; index, filter and range-deletion blocks are pinned in each open
// table reader.
//
// # Key-value separation
//
// With separation on (the default: Options.MinBlobSize is 4 KiB unless
// set negative), a flush (or a compaction meeting an inline value) writes
// values of at least that size to blob files (format in
// lsm/blob) and keeps in the table a blob index (file, offset, length)
// under base.KindBlobIndex; the WAL keeps whole values. A Get or iterator
// that meets a blob index asks the blob cache first, keyed by (file,
// offset): a hit takes no mutex and touches neither the blob file's
// metadata nor the reader cache; only a miss checks that the reader's
// version holds the file, takes a reader from a bounded cache, reads and
// verifies (CRC32C and key) the record into the cache's off-heap memory.
// Iterators hand out a view of the cached value (no copy) and, when blob
// indexes come in file order, read ahead in the blob file. Compactions
// record the indexes they drop as garbage of their blob files in the
// manifest; a file whose every index was dropped leaves the version.
// Compactions also relocate the live records of the files with too much
// garbage (blob_relocate.go, as RocksDB's integrated BlobDB does): the
// picker forces compactions of the tables that reference them (L0 first,
// which also reveals the garbage L0 hides) and writes slow down while that
// falls behind. Blob GC proper (blob_gc.go) rewrites what compactions
// cannot reach, updating each index only if it still points at the old
// place (checked atomically in the commit pipeline). Checkpoints hard-link
// blob files with the tables.
//
// # Recovery
//
// Open replays the WALs that the manifest does not yet cover and writes
// what it recovers to L0 before accepting writes. A torn WAL tail (an
// incomplete last record, as a crash leaves it) is dropped; damage followed
// by valid records fails Open with an error for which IsCorruption is true,
// unless Options.WALRecovery is WALRecoverPointInTime, which an operator
// chooses to recover up to the damage explicitly.
//
// A crash can tear only what was not yet synced, but a damaged last record
// looks the same as a torn one. So the manifest records, per live WAL, a
// size up to which the WAL is known durable (as RocksDB's
// track_and_verify_wals_in_manifest does; the format is in lsm/version):
//
//   - when the WAL is closed: at a memtable switch (which Flush does) and at
//     Close, after the WAL's final sync: a cleanly closed WAL is covered
//     entirely;
//   - at a synced write, once the WAL has grown by Options.WALSyncRecordBytes
//     (default 1 MiB) since the size last recorded. Recording at every
//     synced write would cover a crashed WAL up to its last synced record,
//     but costs a second fsync per write (2.3x the latency of a synced Put,
//     see DefaultWALSyncRecordBytes), so by default the last MiB or so of
//     a WAL that was synced but not closed when the machine crashed is
//     covered only by the torn-tail rule above.
//
// The recovery rule: a WAL the manifest records with a size must exist,
// and its intact records must reach at least that size. Damage or
// truncation below it, or a missing WAL, fails Open with a corruption
// error (with WALRecoverPointInTime: recovery stops at the damage, or
// before the missing WAL); only damage past the recorded size can be a torn
// tail. A WAL stops being tracked when the manifest's log number passes it
// (its memtable is flushed; that is the record of its deletion), so a WAL
// deleted after its flush is never missing. WALs of a DB whose manifest
// predates this record are untracked until they are closed.
//
// # Durability contract
//
// A write acknowledged with WriteOptions.Sync survives a crash of the
// process or the machine. A write without Sync survives a process crash
// (the WAL is written before the write is acknowledged) but may be lost
// with the machine, together with every later unsynced write and nothing
// before the last synced one.
//
// # Limits of this version
//
// Compactions of disjoint key ranges run side by side only once they fall
// behind (Options.MaxConcurrentCompactions), and at most one compacts L0;
// one flush runs at a time; every live table stays open (no bound on open
// files); a snapshot's release does not by itself
// schedule a compaction of the bottom level to drop what it held (Compact
// does, and so does the next compaction that reaches those files); blob
// values are stored uncompressed (the format has a compression byte, but
// only "none" is written); a blob GC whose index commit fails, or a crash
// between its two manifest edits, leaves its new blob file with records no
// index references, which are never counted as garbage: space, not
// values, is lost, and it is not reclaimed (a known gap).
package lsm
