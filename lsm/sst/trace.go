package sst

import (
	"encoding/binary"

	"github.com/cairnkv/cairn/trace"
)

// Block-cache tracing (package trace). A Reader reports:
//
//   - each data-block lookup in the block cache, from Get
//     (GetUnfilteredTraced) and iterators (NewIterTraced), when the caller
//     passes a trace.Access, which the engine does only while a trace runs;
//     block size is cap(block), what the cache charges less its fixed
//     per-entry overhead (cache.EntryOverhead); a Get's record carries the
//     block's key count, its last restart run estimated (numKeys);
//   - the index, filter and range-deletion blocks it reads at open, once:
//     they are pinned in the Reader, never in the cache, and their later
//     uses are plain memory reads that are not traced (Pinned records, a
//     miss not inserted, caller Flush: RocksDB's prefetch).
//
// Block keys are the cache's (CacheID, FileNum, offset): trace.AppendBlockKey.

// tracePinned reports the read, at open, of the pinned block at h.
func (r *Reader) tracePinned(typ trace.BlockType, h blockHandle, size int) {
	t := r.opts.Tracer
	if t == nil || !t.Active() {
		return
	}
	var kb [trace.MaxBlockKeyLen]byte
	rec := trace.Record{
		Type:       typ,
		BlockSize:  uint64(size),
		BlockKey:   trace.AppendBlockKey(kb[:0], r.opts.CacheID, uint64(r.opts.FileNum), h.offset),
		CFName:     trace.DefaultCFName,
		Caller:     trace.CallerFlush,
		Level:      -1,
		FileNumber: uint64(r.opts.FileNum),
		NoInsert:   true,
		Pinned:     true,
	}
	t.WriteBlockAccess(&rec)
}

// traceBlock reports an iterator's lookup of the data block at off.
func (r *Reader) traceBlock(acc *trace.Access, off uint64, block []byte, hit bool) {
	t := r.opts.Tracer
	if t == nil {
		return
	}
	var kb [trace.MaxBlockKeyLen]byte
	rec := r.dataRecord(acc, kb[:0], off, block, hit)
	if !t.ShouldTrace(rec.BlockKey) {
		return
	}
	t.WriteBlockAccess(&rec)
}

// traceGet reports a Get's lookup of the data block at off, with what the
// Get found in it: whether ukey is there, and the size of its entry.
func (r *Reader) traceGet(acc *trace.Access, off uint64, block []byte, hit bool, ukey []byte, exists bool, entrySize int) {
	t := r.opts.Tracer
	if t == nil {
		return
	}
	var kb [trace.MaxBlockKeyLen]byte
	rec := r.dataRecord(acc, kb[:0], off, block, hit)
	if !t.ShouldTrace(rec.BlockKey) {
		return
	}
	rec.ReferencedKey = ukey
	rec.ReferencedKeyExists = exists
	if exists {
		rec.ReferencedDataSize = uint64(entrySize)
	}
	rec.NumKeysInBlock = r.numKeys(block)
	t.WriteBlockAccess(&rec)
}

func (r *Reader) dataRecord(acc *trace.Access, kb []byte, off uint64, block []byte, hit bool) trace.Record {
	rec := trace.Record{
		Type:       trace.BlockData,
		BlockSize:  uint64(cap(block)),
		BlockKey:   trace.AppendBlockKey(kb, r.opts.CacheID, uint64(r.opts.FileNum), off),
		CFName:     trace.DefaultCFName,
		FileNumber: uint64(r.opts.FileNum),
		CacheHit:   hit,
	}
	acc.Fill(&rec)
	return rec
}

// numKeys returns the number of entries of a verified data block, for a
// traced Get's record, from the restart array, which the Get's seek has
// just read. The writer puts a restart point every restartInterval
// entries, so every run but the last holds the interval (learnt once per
// table, by counting the first run of a block with several); the last
// run's count is estimated from its length in bytes against the first
// run's, between 1 and the interval: exact when entries have one size,
// off by a key or two when their sizes vary. A block of one run, which
// the seek walked, is counted.
//
// Counting the last run instead read lines the seek had not: in a profile
// on a loaded machine those cache misses were 7.7% of a traced Get's CPU,
// two thirds of what tracing cost it; a memo per block, found through the
// index, still missed in its own array.
// RocksDB too estimates the count from the restart points (interval times
// restarts, less half an interval).
func (r *Reader) numKeys(block []byte) uint64 {
	var it blockIter
	if it.init(block) != nil || it.numRestarts == 0 {
		return 0
	}
	restart := func(run int) int {
		return int(binary.LittleEndian.Uint32(block[it.restartsOff+4*run:]))
	}
	n := it.numRestarts
	if n == 1 {
		return countEntries(block, restart(0), it.restartsOff)
	}
	interval := uint64(r.restartInterval.Load())
	if interval == 0 {
		interval = countEntries(block, restart(0), restart(1))
		r.restartInterval.Store(int64(interval))
	}
	last := uint64(1)
	if full, lastLen := restart(1)-restart(0), it.restartsOff-restart(n-1); full > 0 && lastLen > 0 {
		last = (uint64(lastLen)*interval + uint64(full)/2) / uint64(full) // Rounded.
	}
	return uint64(n-1)*interval + min(max(last, 1), interval)
}

// countEntries counts the entries in block[off:end] by their headers
// (shared, unshared and value lengths) alone, without assembling keys. It
// stops, with what it counted, at a malformed header or one that overruns
// end.
func countEntries(block []byte, off, end int) uint64 {
	if off < 0 || end > len(block) {
		return 0
	}
	var n uint64
	for off < end {
		var lens [3]int
		for j := range lens {
			v, k := readUvarint32(block, off, end)
			if k == 0 {
				return n
			}
			lens[j], off = v, off+k
		}
		if lens[1] > end-off || lens[2] > end-off-lens[1] {
			return n
		}
		off += lens[1] + lens[2]
		n++
	}
	return n
}
