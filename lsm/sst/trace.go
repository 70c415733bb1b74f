package sst

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/cairnkv/cairn/trace"
)

// Block-cache tracing (package trace). A Reader reports:
//
//   - each data-block lookup in the block cache, from Get
//     (GetUnfilteredTraced) and iterators (NewIterTraced), when the caller
//     passes a trace.Access, which the engine does only while a trace runs;
//     block size is cap(block), what the cache charges less its fixed
//     per-entry overhead (cache.EntryOverhead);
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

// traceGet reports a Get's lookup of the data block at off, whose index
// entry starts at indexOff in the index block, with what the Get found in
// it: whether ukey is there, and the size of its entry.
func (r *Reader) traceGet(acc *trace.Access, indexOff int, off uint64, block []byte, hit bool, ukey []byte, exists bool, entrySize int) {
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
	rec.NumKeysInBlock = r.numKeysAt(indexOff, block)
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

// numKeysAt returns the number of entries of the data block whose index
// entry starts at indexOff: memoized in r.keyCounts, by the block's
// position in the index, else counted (numEntries). Counting reads the
// block's last restart run, which the Get's seek seldom touched: on a
// loaded machine those cache misses were the largest part of a traced
// Get's overhead. Every index entry is a restart point (restart interval
// 1), so the position is found by a binary search of the index's restart
// array, most of whose lines the Get's index seek just read.
func (r *Reader) numKeysAt(indexOff int, block []byte) uint64 {
	var ii blockIter
	if ii.init(r.index) != nil {
		return r.numEntries(block)
	}
	counts := r.keyCounts.Load()
	if counts == nil {
		c := make([]atomic.Uint32, ii.numRestarts)
		r.keyCounts.CompareAndSwap(nil, &c)
		counts = r.keyCounts.Load()
	}
	// The last restart point at or before indexOff, by a binary search
	// without branches: those of a plain one mispredict half the time and
	// cost more than its loads (which hit the lines the Get's index seek
	// read).
	restarts := r.index[ii.restartsOff : ii.restartsOff+4*ii.numRestarts]
	pos, span := 0, ii.numRestarts
	for span > 1 {
		half := span / 2
		// Step by half if restart point pos+half <= indexOff: the sign
		// of d is the branch, d>>63 its mask.
		d := indexOff - int(binary.LittleEndian.Uint32(restarts[4*(pos+half):]))
		pos += half &^ (d >> 63)
		span -= half
	}
	if pos >= len(*counts) || int(binary.LittleEndian.Uint32(restarts[4*pos:])) != indexOff {
		return r.numEntries(block) // Not an index entry: count.
	}
	slot := &(*counts)[pos]
	if n := slot.Load(); n != 0 {
		return uint64(n)
	}
	n := r.numEntries(block)
	if n <= math.MaxUint32 {
		slot.Store(uint32(n))
	}
	return n
}

// numEntries counts the entries of a verified data block. The writer puts
// a restart point every restartInterval entries, so every run but the last
// has the length of the first: the interval (learnt once per table, from
// the first run of a block with several) times the full runs, plus the
// last run, counted. Counting reads only each entry's length header
// (countEntries): a full decode of the last run cost more than the rest of
// a traced Get's record together.
func (r *Reader) numEntries(block []byte) uint64 {
	var it blockIter
	if it.init(block) != nil || it.numRestarts == 0 {
		return 0
	}
	runEnd := func(run int) int {
		if run+1 < it.numRestarts {
			return int(binary.LittleEndian.Uint32(block[it.restartsOff+4*(run+1):]))
		}
		return it.restartsOff
	}
	runStart := func(run int) int {
		return int(binary.LittleEndian.Uint32(block[it.restartsOff+4*run:]))
	}
	last := countEntries(block, runStart(it.numRestarts-1), it.restartsOff)
	if it.numRestarts == 1 {
		return last
	}
	interval := uint64(r.restartInterval.Load())
	if interval == 0 {
		interval = countEntries(block, runStart(0), runEnd(0))
		r.restartInterval.Store(int64(interval))
	}
	return uint64(it.numRestarts-1)*interval + last
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
