package sst

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/filter"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/trace"
)

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	// Cache holds the table's data blocks under (CacheID, FileNum,
	// offset). Nil reads every data block from the file, onto the Go
	// heap.
	Cache *cache.Cache
	// CacheID is the cache user id (cache.Cache.NewID) of the DB that owns
	// the table.
	CacheID uint64
	// FileNum is the table's file number.
	FileNum base.FileNum
	// VerifyChecksums is accepted for symmetry with other engines and
	// ignored: every block read from the file is always checked.
	VerifyChecksums bool
	// Tracer, if not nil, is told of the pinned blocks NewReader reads
	// while a trace runs (see trace.go).
	Tracer *trace.Tracer
}

// Reader reads one table. It is safe for concurrent use. Its footer,
// metaindex, index, filter, range deletion and properties blocks are read,
// verified and pinned in memory by NewReader; data blocks go through the
// block cache.
type Reader struct {
	f    vfs.File
	opts ReaderOptions
	size uint64

	// index is the verified index block. Invariant: every value is the
	// handle of a data block inside the file, the blocks in order and
	// back to back from offset 0.
	index     []byte
	filter    filter.BlockedFilter
	hasFilter bool
	// tombstones alias the pinned range deletion block.
	tombstones []base.RangeTombstone
	props      Properties
	// restartInterval is the table's data-block restart interval, learnt
	// from the first data block a trace counts the keys of (0: not yet).
	restartInterval atomic.Int64
}

// NewReader opens the table in f, whose size it takes from f.Stat. On
// success the Reader owns f and Close closes it; on error f is left open for
// the caller. An unreadable footer or any malformed block is an error for
// which base.IsCorruption is true; a footer naming a format version this
// build does not know returns an error wrapping ErrUnknownFormatVersion.
func NewReader(f vfs.File, opts ReaderOptions) (*Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < footerLen {
		return nil, base.CorruptionErrorf("sst: file of %d bytes is too small to be a table", fi.Size())
	}
	r := &Reader{f: f, opts: opts, size: uint64(fi.Size())}
	var buf [footerLen]byte
	if err := r.readAt(buf[:], r.size-footerLen); err != nil {
		return nil, err
	}
	ft, err := decodeFooter(buf[:], r.size)
	if err != nil {
		return nil, err
	}
	if err := r.readMeta(ft); err != nil {
		return nil, fmt.Errorf("sst: opening table %s: %w", opts.FileNum, err)
	}
	return r, nil
}

// readMeta reads and pins every block but the data blocks.
func (r *Reader) readMeta(ft footer) error {
	limit := r.size - footerLen
	metaindex, err := r.readBlock(ft.metaindex, metaBlockKind, nil, nil)
	if err != nil {
		return err
	}
	var filterH, propsH, rangeDelH *blockHandle
	var it blockIter
	if err := it.init(metaindex); err != nil {
		return err
	}
	for it.first(); it.valid; it.next() {
		var dst **blockHandle
		switch string(it.key()) {
		case metaFilter:
			dst = &filterH
		case metaProperties:
			dst = &propsH
		case metaRangeDel:
			dst = &rangeDelH
		default:
			continue // A meta block of a newer writer.
		}
		h, err := decodeHandleExact(it.value(), limit, string(it.key()))
		if err != nil {
			return err
		}
		*dst = &h
	}
	if it.err != nil {
		return it.err
	}
	if propsH == nil {
		return base.CorruptionErrorf("sst: table has no properties block")
	}

	propsBlock, err := r.readBlock(*propsH, metaBlockKind, nil, nil)
	if err != nil {
		return err
	}
	if r.props, err = decodeProperties(propsBlock); err != nil {
		return err
	}

	if r.index, err = r.readBlock(ft.index, indexBlockKind, nil, nil); err != nil {
		return err
	}
	if err := r.checkIndex(limit); err != nil {
		return err
	}
	r.tracePinned(trace.BlockIndex, ft.index, len(r.index))

	if filterH != nil {
		data, err := r.readBlock(*filterH, filterBlockKind, nil, nil)
		if err != nil {
			return err
		}
		if r.filter, err = filter.ParseBlocked(data); err != nil {
			return base.MarkCorruption(err)
		}
		r.hasFilter = true
		r.tracePinned(trace.BlockFilter, *filterH, len(data))
	}

	if rangeDelH != nil {
		data, err := r.readBlock(*rangeDelH, rangeDelBlockKind, nil, nil)
		if err != nil {
			return err
		}
		if r.tombstones, err = decodeTombstones(data); err != nil {
			return err
		}
		r.tracePinned(trace.BlockRangeDel, *rangeDelH, len(data))
	}
	if uint64(len(r.tombstones)) != r.props.NumRangeDeletions {
		return base.CorruptionErrorf("sst: %d range tombstones, properties say %d", len(r.tombstones), r.props.NumRangeDeletions)
	}
	return nil
}

// checkIndex checks that the index's handles tile the start of the file with
// the data blocks, as the writer lays them out, and agree with the
// properties.
func (r *Reader) checkIndex(limit uint64) error {
	var it blockIter
	if err := it.init(r.index); err != nil {
		return err
	}
	var next, n uint64
	for it.first(); it.valid; it.next() {
		if it.keyLoc != keyInBlock {
			// indexKeyBefore relies on every entry being a restart point.
			return base.CorruptionErrorf("sst: index entry %d is not a restart point", n)
		}
		h, err := decodeHandleExact(it.value(), limit, "data block")
		if err != nil {
			return err
		}
		if h.offset != next {
			return base.CorruptionErrorf("sst: data block %d at offset %d, want %d", n, h.offset, next)
		}
		next = h.end()
		n++
	}
	if it.err != nil {
		return it.err
	}
	if n != uint64(it.numRestarts) {
		return base.CorruptionErrorf("sst: index has %d restart points for %d entries", it.numRestarts, n)
	}
	if n != r.props.NumDataBlocks || next != r.props.DataSize {
		return base.CorruptionErrorf("sst: index has %d data blocks of %d bytes, properties say %d of %d",
			n, next, r.props.NumDataBlocks, r.props.DataSize)
	}
	return nil
}

// decodeTombstones parses a verified range deletion block and checks that
// its fragments do not overlap.
func decodeTombstones(data []byte) ([]base.RangeTombstone, error) {
	var it blockIter
	if err := it.init(data); err != nil {
		return nil, err
	}
	var ts []base.RangeTombstone
	for it.first(); it.valid; it.next() {
		ukey, seq, _, _ := base.ParseInternalKey(it.key())
		if it.keyLoc != keyInBlock {
			// Assembled in the iterator's buffer: copy out.
			ukey = append([]byte(nil), ukey...)
		}
		t := base.RangeTombstone{Start: ukey, End: it.value(), Seq: seq}
		if bytes.Compare(t.Start, t.End) >= 0 {
			return nil, base.CorruptionErrorf("sst: empty range tombstone [%q, %q)", t.Start, t.End)
		}
		if n := len(ts); n > 0 {
			p := ts[n-1]
			same := bytes.Equal(p.Start, t.Start)
			if (same && !bytes.Equal(p.End, t.End)) || (!same && bytes.Compare(t.Start, p.End) < 0) {
				return nil, base.CorruptionErrorf("sst: overlapping range tombstone fragments [%q, %q) and [%q, %q)", p.Start, p.End, t.Start, t.End)
			}
		}
		ts = append(ts, t)
	}
	return ts, it.err
}

// filterBlockKind marks a block with no entry structure, for readBlock.
const filterBlockKind blockKind = 255

// readAt reads exactly len(buf) bytes at off.
func (r *Reader) readAt(buf []byte, off uint64) error {
	n, err := r.f.ReadAt(buf, int64(off))
	if n == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return base.CorruptionErrorf("sst: short read of %d bytes at offset %d (%d read): file truncated", len(buf), off, n)
	}
	return err
}

// readBlock reads the block at h from the file, checks its checksum,
// decompresses it and verifies its entries as kind (see verifyBlock for after
// and upTo).
func (r *Reader) readBlock(h blockHandle, kind blockKind, after, upTo []byte) ([]byte, error) {
	buf := make([]byte, h.length+blockTrailerLen)
	if err := r.readAt(buf, h.offset); err != nil {
		return nil, err
	}
	contents, typ := buf[:h.length], buf[h.length]
	if want, got := binary.LittleEndian.Uint32(buf[h.length+1:]), blockChecksum(contents, typ); got != want {
		return nil, base.CorruptionErrorf("sst: checksum mismatch in block at offset %d of table %s (%#x, want %#x)",
			h.offset, r.opts.FileNum, got, want)
	}
	if typ != byte(NoCompression) {
		var err error
		if contents, err = decompressBlock(typ, contents); err != nil {
			return nil, err
		}
	}
	if kind == filterBlockKind {
		return contents, nil
	}
	n, err := verifyBlock(contents, kind, after, upTo)
	if err != nil {
		return nil, err
	}
	if kind == dataBlockKind && n == 0 {
		return nil, base.CorruptionErrorf("sst: empty data block at offset %d", h.offset)
	}
	return contents, nil
}

// dataBlock returns a handle on the data block at h, the handle at the
// position of ii in the index, from the cache or else from the file (then
// caching it). A block read from the file must also lie between its
// separator and the one before. The block must not be modified, nor used
// after the handle's Release. hit tells whether it came from the cache.
//
// ra, if not nil, is the calling iterator's readahead state (see
// readahead); nil reads the block alone.
func (r *Reader) dataBlock(h blockHandle, ii *blockIter, ra *readahead) (b cache.Handle, hit bool, err error) {
	c := r.opts.Cache
	if b, ok := c.Get(r.opts.CacheID, r.opts.FileNum, h.offset); ok {
		if ra != nil {
			ra.noteHit(h)
		}
		return b, true, nil
	}
	after, err := indexKeyBefore(r.index, ii.offset)
	if err != nil {
		return cache.Handle{}, false, err
	}
	buf, err := r.readDataBlock(h, after, ii.key(), ra)
	if err != nil {
		return cache.Handle{}, false, err
	}
	return c.Insert(r.opts.CacheID, r.opts.FileNum, h.offset, buf), false, nil
}

// readScratch holds the buffers that data blocks are read into before
// they are checked and decompressed into the cache's memory.
var readScratch = sync.Pool{New: func() any { return new([]byte) }}

// readDataBlock is readBlock for a data block, into a buffer of the
// block cache (the Go heap's with no cache): the stored bytes are read
// into a pooled scratch buffer, checked, and decompressed (or copied) into
// the cache buffer, so that a miss leaves no garbage. The caller inserts
// the buffer; on error it is freed.
func (r *Reader) readDataBlock(h blockHandle, after, upTo []byte, ra *readahead) (cache.Buffer, error) {
	c := r.opts.Cache
	n := int(h.length + blockTrailerLen)
	var stored []byte
	if ra != nil {
		var err error
		if stored, err = ra.read(r, h.offset, n); err != nil {
			return cache.Buffer{}, err
		}
	}
	if stored == nil {
		sp := readScratch.Get().(*[]byte)
		defer readScratch.Put(sp)
		if cap(*sp) < n {
			*sp = make([]byte, n)
		}
		stored = (*sp)[:n]
		if err := r.readAt(stored, h.offset); err != nil {
			return cache.Buffer{}, err
		}
	}
	contents, typ := stored[:h.length], stored[h.length]
	if want, got := binary.LittleEndian.Uint32(stored[h.length+1:]), blockChecksum(contents, typ); got != want {
		return cache.Buffer{}, base.CorruptionErrorf("sst: checksum mismatch in block at offset %d of table %s (%#x, want %#x)",
			h.offset, r.opts.FileNum, got, want)
	}
	rawLen, src := len(contents), contents
	if typ != byte(NoCompression) {
		var err error
		if rawLen, src, err = decompressedLen(typ, contents); err != nil {
			return cache.Buffer{}, err
		}
	}
	if rawLen == 0 {
		return cache.Buffer{}, base.CorruptionErrorf("sst: empty data block at offset %d", h.offset)
	}
	buf, err := c.Alloc(rawLen)
	if err != nil {
		return cache.Buffer{}, err
	}
	b := buf.Bytes()
	if typ == byte(NoCompression) {
		copy(b, contents)
	} else if err := decompressInto(typ, src, b); err != nil {
		c.Free(buf)
		return cache.Buffer{}, err
	}
	if k, err := verifyBlock(b, dataBlockKind, after, upTo); err != nil || k == 0 {
		c.Free(buf)
		if err == nil {
			err = base.CorruptionErrorf("sst: empty data block at offset %d", h.offset)
		}
		return cache.Buffer{}, err
	}
	return buf, nil
}

// indexHandle decodes the data block handle at the index iterator's
// position. The index was checked at open, so failure means a broken
// invariant or memory corruption; it is still reported, not trusted.
func indexHandle(it *blockIter) (blockHandle, error) {
	h, n := decodeHandle(it.value())
	if n <= 0 {
		return blockHandle{}, base.CorruptionErrorf("sst: malformed index entry")
	}
	return h, nil
}

// indexKeyBefore returns the key of the index entry before the one at
// offset off, nil if that is the first. Every index entry is a restart point
// (checkIndex), so the entry before is found in the restart array.
func indexKeyBefore(index []byte, off int) ([]byte, error) {
	var it blockIter
	if err := it.init(index); err != nil {
		return nil, err
	}
	lo, hi := 0, it.numRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(binary.LittleEndian.Uint32(index[it.restartsOff+4*mid:])) < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == it.numRestarts || int(binary.LittleEndian.Uint32(index[it.restartsOff+4*lo:])) != off {
		return nil, base.CorruptionErrorf("sst: index entry at offset %d is not a restart point", off)
	}
	if lo == 0 {
		return nil, nil
	}
	k, ok := it.restartKey(lo - 1)
	if !ok {
		return nil, it.err
	}
	return k, nil
}

// MayContain probes the table's filter with h = filter.Hash(userKey). It is
// true when the table has no filter.
//
// The Reader keeps no filter statistics, so that concurrent readers of one
// table share no written cache line: a caller that counts filter checks and
// useful negatives calls MayContain itself (and skips Get on false).
func (r *Reader) MayContain(h uint64) bool {
	return !r.hasFilter || r.filter.MayContain(h)
}

// Get returns the newest point entry of ukey with a sequence number below
// seq, h being filter.Hash(ukey). It consults the filter first and reads no
// data block when the filter rules the key out. found is false if there is no
// such entry. kind is SET, DEL or BLOBIDX; value is a view of a data block
// that rel pins: it is valid until rel.Release, which the caller calls
// once it has copied or used the value (rel is empty when found is false;
// releasing it is harmless).
//
// Range tombstones are not applied: the caller combines RangeTombstones with
// the result. With a warm cache Get does not allocate (for keys up to 256
// bytes).
func (r *Reader) Get(ukey []byte, seq base.SeqNum, h uint64) (value []byte, kind base.Kind, keySeq base.SeqNum, found bool, rel cache.Handle, err error) {
	if r.hasFilter && !r.filter.MayContain(h) {
		return nil, 0, 0, false, cache.Handle{}, nil
	}
	return r.GetUnfiltered(ukey, seq)
}

// GetUnfiltered is Get without the filter probe, for a caller that has
// already asked MayContain (to count what the filter saves).
func (r *Reader) GetUnfiltered(ukey []byte, seq base.SeqNum) (value []byte, kind base.Kind, keySeq base.SeqNum, found bool, rel cache.Handle, err error) {
	return r.GetUnfilteredTraced(ukey, seq, nil)
}

// GetUnfilteredTraced is GetUnfiltered reporting its data-block lookups to
// the Reader's tracer as acc's; a nil acc (no trace running) reports
// nothing.
func (r *Reader) GetUnfilteredTraced(ukey []byte, seq base.SeqNum, acc *trace.Access) (value []byte, kind base.Kind, keySeq base.SeqNum, found bool, rel cache.Handle, err error) {
	if seq == 0 {
		return nil, 0, 0, false, cache.Handle{}, nil
	}
	t := base.MakeTrailer(min(seq-1, base.SeqNumMax), base.KindMax)
	var ii, di blockIter
	if err := ii.init(r.index); err != nil {
		return nil, 0, 0, false, cache.Handle{}, err
	}
	for ii.seekGESearch(ukey, t); ii.valid; ii.next() {
		bh, err := indexHandle(&ii)
		if err != nil {
			return nil, 0, 0, false, cache.Handle{}, err
		}
		bl, hit, err := r.dataBlock(bh, &ii, nil)
		if err != nil {
			return nil, 0, 0, false, cache.Handle{}, err
		}
		data := bl.Value()
		if err := di.init(data); err != nil {
			bl.Release()
			return nil, 0, 0, false, cache.Handle{}, err
		}
		di.seekGESearch(ukey, t)
		if di.valid {
			k := di.key()
			exists := bytes.Equal(base.UserKey(k), ukey)
			if acc != nil {
				r.traceGet(acc, bh.offset, data, hit, ukey, exists, len(k)+len(di.value()))
			}
			if !exists {
				bl.Release()
				return nil, 0, 0, false, cache.Handle{}, nil
			}
			tr := base.DecodeTrailer(k)
			return di.value(), tr.Kind(), tr.SeqNum(), true, bl, nil
		}
		if acc != nil {
			r.traceGet(acc, bh.offset, data, hit, ukey, false, 0)
		}
		bl.Release()
		if di.err != nil {
			return nil, 0, 0, false, cache.Handle{}, di.err
		}
		// Every key of the block is below the target (which sorts
		// between the block's last key and its separator): the answer,
		// if any, starts the next block.
	}
	return nil, 0, 0, false, cache.Handle{}, ii.err
}

// RangeTombstones returns the table's range tombstone fragments, sorted by
// start and then by seq descending; fragments do not overlap unless they
// share start and end. The slice and its keys are pinned by the Reader and
// must not be modified.
func (r *Reader) RangeTombstones() []base.RangeTombstone { return r.tombstones }

// Properties returns the table's properties.
func (r *Reader) Properties() Properties { return r.props }

// Size returns the table's file size in bytes.
func (r *Reader) Size() uint64 { return r.size }

// Close closes the file. The table's blocks stay in the cache (the table
// may be reopened); whoever deletes the file evicts them with
// cache.EvictFile. Iterators must be closed first.
func (r *Reader) Close() error {
	f := r.f
	r.f = nil
	if f == nil {
		return base.ErrClosed
	}
	return f.Close()
}
