// Package metamorphic tests the lsm engine as a whole: seeded random
// workloads run against the engine and against a plain map model, under
// several option sets whose results are also compared with each other, and
// a sweep that fails every file system operation of a fixed workload in
// turn.
//
// # Metamorphic test (TestMetamorphic)
//
// Generate(seed, n) draws a workload of n ops over a key space of
// DefaultNumKeys keys that share prefixes (some keys are prefixes of
// others, some hold 0x00 and 0xff bytes), so that overwrites, deletions and
// range deletions keep meeting each other. Values range from empty to tens
// of KiB. The ops:
//
//	put, delete, deleteRange, batch   writes; Sync per the workload's sync
//	                                  mode: "all", "none" or "mixed"
//	get, snapN.get                    checked against the model or the
//	                                  model as of the snapshot
//	newSnapshot, snapN.close          at most 6 open at once
//	iter, snapN.iter                  random bounds, then First/Last/SeekGE/
//	                                  SeekLT followed by runs of Next and Prev
//	                                  with direction changes; now and then a
//	                                  write, flush or compaction runs on the DB
//	                                  while the iterator is open, and the
//	                                  iterator must not see it
//	flush, compact(start, end)        a random range, either end unbounded
//	checkpoint                        opened as a DB and compared in full with
//	                                  the model; kept and checked again at the
//	                                  next checkpoint, after crashes (it must
//	                                  be durable) and at the end
//	reopen                            clean Close and Open, full comparison
//	crash                             Open on a CrashClone (or CrashCloneTorn)
//	                                  of the MemFS, full comparison
//	metrics                           sanity of Metrics
//	invalid                           writes that must fail with
//	                                  ErrInvalidArgument and change nothing
//
// Run executes a workload under one Config against a fresh vfs.MemFS,
// checking every read, and returns the run's history (one line per op and
// its result). The engine gets copies of keys, values and bounds that are
// scribbled over after each call, and values returned by Get are scribbled
// over after they are checked: neither side may keep the other's buffers.
//
// Crash semantics. The engine's contract is that a write acknowledged with
// Sync survives a crash, and that a write without Sync may be lost together
// with every later unsynced write but nothing before the last synced one.
// The runner therefore keeps the model as of the last point at which
// everything acknowledged was durable (a synced write, a flush, a
// compaction, a checkpoint, a reopen, a crash) and the list of writes
// acknowledged since; after a crash the recovered contents must equal that
// state plus some prefix of that list. In sync mode "all" the prefix is
// the whole list, so nothing acknowledged may be lost. Under the nowal
// config a crash op flushes first (only flushed data survives without a
// WAL) and then nothing may be lost; likewise reopen flushes before Close.
//
// Every workload runs under every config of Configs (default, tiny, nofilter,
// zstd, snappy, nowal); the histories are compared with the default config's,
// line by line, up to the first crash at which two configs recovered
// different numbers of unsynced writes (a config with smaller memtables
// syncs its WAL more often, so that is legitimate; each run is still
// checked against its own model to the end).
//
// Replay. A failure prints the seed, the config, the op index and the ops
// leading to it, and a command line:
//
//	go test ./lsm/metamorphic -run 'TestMetamorphic$' -seed N -ops M -config tiny
//
// Reduce. TestReduce shrinks a failing workload to a short op list (delta
// debugging over ops, batch entries and iterator steps; a candidate counts
// as failing if any of -reduce-tries runs fails, since background work
// makes some failures timing-dependent) and can write it out as a
// standalone Go test of package lsm for a bug report:
//
//	go test ./lsm/metamorphic -run TestReduce -reduce -seed N -ops M -config tiny -repro-out /tmp/repro_test.go
//
// Flags: -seed (replay one seed; default: random seeds),
// -seeds (default 3, 1 under -race or -short), -ops (workload length;
// default 4000, 800 under -race or -short), -config
// (comma-separated config names).
//
// # Error-injection sweep (TestErrorInjectionSweep)
//
// A fixed workload (open, synced writes, reads, flushes, a manual compaction,
// close, reopen replaying the WAL, a checkpoint, close) runs on errorfs over
// a MemFS: once counting its file system operations, then once per index n
// with the n-th operation failing. Every injected error must surface as an
// error of some API call (or of Metrics().BackgroundErr, for background
// work), except where the engine legitimately absorbs it: removing an
// obsolete file (retried at the next Open), closing a file opened
// read-only, a failed hard link in Checkpoint (it copies the table
// instead), and version.Create's re-check that CURRENT is absent right
// after Open found it absent. No API call may fail with
// any other error, and no read may return a wrong value. Then the DB is
// opened without injection, on the MemFS and on a crash clone taken before
// the final Close, and must hold every acknowledged write (all are synced),
// with any failed write either applied or not; it must then accept a write
// and a flush. Two configs: "manual" (no automatic compactions, so indexes
// are deterministic) and "background" (automatic compactions racing the
// workload). Under -race or -short every 7th index is failed.
//
// # Durability and regression tests
//
// TestSyncedWriteSurvivesCrashOfNewDirectory and TestCheckpointSurvivesCrash
// check that directories the engine creates (the DB's, a checkpoint's) are
// durable in their parents once Open or Checkpoint returns. The
// TestRegression* tests are hand-reduced reproductions of engine bugs the
// tests above found.
package metamorphic
