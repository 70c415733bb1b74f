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
// readers all at once. A full memtable is switched out with its WAL and
// flushed to an L0 table in the background; leveled compaction with dynamic
// level sizes moves data down. Writes slow down (1 ms each) when L0 holds
// L0SlowdownWritesThreshold files and stop while L0StopWritesThreshold files
// or MemTableStopWritesThreshold memtables wait; Metrics reports both.
//
// # Read path
//
// A read loads the current readState (memtables + version) with one atomic
// load and a reference count: no DB-wide lock. Get probes memtables, then
// the L0 tables that may hold the key, then one table per deeper level; each
// table's cache-local Bloom filter is consulted first, the bottom level's
// included. Data blocks come through a sharded block cache shared by all
// tables; index, filter and range-deletion blocks are pinned in each open
// table reader.
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
// One compaction runs at a time (beside one flush); every live table stays
// open (no bound on open files); a snapshot's release does not by itself
// schedule a compaction of the bottom level to drop what it held (Compact
// does, and so does the next compaction that reaches those files); values
// are stored inline (key-value separation, lsm/blob, is not wired in yet).
package lsm
