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
	rec.NumKeysInBlock = r.numEntries(block)
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

// numEntries counts the entries of a verified data block. The writer puts
// a restart point every restartInterval entries, so every run but the last
// has the length of the first: the interval (learnt once per table, from
// the first run of a block with several) times the full runs, plus the
// last run, counted.
func (r *Reader) numEntries(block []byte) uint64 {
	var it blockIter
	if it.init(block) != nil || it.numRestarts == 0 {
		return 0
	}
	countRun := func(run int) uint64 {
		end := it.restartsOff
		if run+1 < it.numRestarts {
			end = int(binary.LittleEndian.Uint32(block[it.restartsOff+4*(run+1):]))
		}
		if !it.seekToRestart(run) {
			return 0
		}
		n := uint64(1)
		for it.nextOffset < end {
			it.next()
			if !it.valid {
				break
			}
			n++
		}
		return n
	}
	last := countRun(it.numRestarts - 1)
	if it.numRestarts == 1 {
		return last
	}
	interval := uint64(r.restartInterval.Load())
	if interval == 0 {
		interval = countRun(0)
		r.restartInterval.Store(int64(interval))
	}
	return uint64(it.numRestarts-1)*interval + last
}
