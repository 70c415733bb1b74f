// Package boltlog is cairn's raft log and stable store in a bbolt file of
// raft-boltdb/v2's format, whose log compaction never makes an append wait
// for a commit of its own.
//
// # Why not raft-boltdb
//
// raft calls LogStore.DeleteRange(first, n) after every snapshot to drop
// the compacted prefix of its log. raft-boltdb deletes the range in one
// bbolt write transaction, and bbolt admits one writer at a time: every
// append of the node waits for the whole deletion (seconds for a GiB of
// log). Cutting the deletion into short transactions (cairn did so before
// this package) bounds the wait by one transaction, but a bbolt commit is
// two fdatasyncs whatever it holds, and on a contended disk one commit took
// up to 742 ms (bench/RESULTS.md, 2026-12-01). raft-boltdb does not export
// its *bbolt.DB, so the deletion cannot join the appends' transactions
// there: this package owns the file instead.
//
// # Trimming inside the appends' transactions
//
// A DeleteRange of a prefix of the log (lo at or below the log's first
// index once the pending trim is done, hi below its last index) only
// records hi as the pending trim and returns. Every later StoreLogs
// transaction deletes, after writing its entries, a bounded slice of the
// pending range from the low end of the log (at most trimEntries entries
// plus twice as many as it appends, and trimBytes plus twice the bytes it
// appends, so an append's extra work is bounded by a constant plus its own
// size, and the pending range drains at least as fast as the log grows).
// The deletion commits with the append: no fsync is added, and no append
// waits for another transaction because of log compaction. When no append
// comes for trimIdle (2 s: an idle node, where nobody waits), a background
// goroutine drains the rest in transactions of the constant budget; an
// append that arrives during one of those waits for its commit.
//
// Deleting from the low end keeps the log one range [FirstIndex, LastIndex]
// after every commit (raft may leave gaps of its own after installing a
// snapshot; those stay as they are). FirstIndex and GetLog report what is
// on disk: an entry whose trim is pending is still served, which is correct
// (compacted entries are committed and never change) and is what raft sees
// after a crash before a trim. The pending range lives in memory only: a
// crash or Close forgets it, the log is then longer than raft asked for,
// which raft tolerates, and raft's next compaction (from FirstIndex) covers
// it again. A write at an index inside the pending range lowers the pending
// bound below it, so a trim never deletes an entry written after it was
// requested, nor any entry above the hi raft gave.
//
// Every other DeleteRange is done at once in one transaction, as
// raft-boltdb does it: a follower's removal of a conflicting suffix
// (DeleteRange(i, last), followed at once by the leader's entries from i),
// or a deletion of the whole log. Deferring those would leave stale
// entries above what raft writes next.
//
// # File format
//
// The file's buckets, keys and values are raft-boltdb/v2's, byte for
// byte, so a data directory moves between the two stores in both
// directions with nothing to convert:
//
//	raft.db (bbolt)
//	  bucket "logs": key = raft index, 8 bytes big-endian
//	                 value = raft.Log in msgpack (hashicorp/go-msgpack/v2,
//	                 time.Time not as a msgpack extension: raft-boltdb's
//	                 default, MsgpackUseNewTimeFormat false)
//	  bucket "conf": StableStore keys and values as raft gives them
//	                 (SetUint64: 8 bytes big-endian)
//
// The tests check both directions against raft-boltdb itself.
//
// # Metrics
//
// StoreLogs and GetLog emit raft-boltdb's go-metrics samples under its
// names (raft.boltdb.storeLogs, getLog, logsPerBatch, logBatchSize,
// logSize, writeCapacity), so existing dashboards keep working; its
// periodic bbolt statistics (RunMetrics) are not emitted.
package boltlog
