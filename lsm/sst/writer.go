package sst

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"time"

	"github.com/cairnkv/cairn/lsm/filter"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Default writer options.
const (
	DefaultBlockSize            = 4096
	DefaultBlockRestartInterval = 16
)

// Names of the metaindex entries.
const (
	metaFilter     = "filter"
	metaProperties = "properties"
	metaRangeDel   = "rangedel"
)

// WriterOptions configure a Writer. The zero value is valid: 4 KiB blocks,
// a restart point every 16 keys, no compression, no filter.
type WriterOptions struct {
	// BlockSize is the target uncompressed size of a data block: a block
	// is cut once it reaches this size. <= 0 means DefaultBlockSize.
	BlockSize int
	// BlockRestartInterval is the number of keys between restart points of
	// a data block. <= 0 means DefaultBlockRestartInterval.
	BlockRestartInterval int
	// Compression is applied to every block but the filter and the
	// metaindex; a block that does not shrink by at least 1/8 is stored
	// raw.
	Compression Compression
	// FilterBitsPerKey sizes the filter over the table's point user keys.
	// 0 (or less) writes no filter.
	FilterBitsPerKey float64
}

// Metadata describes a finished table.
type Metadata struct {
	// Size is the file's length in bytes.
	Size uint64
	// Smallest and Largest are the smallest and largest internal keys of
	// the table, point entries and range tombstones together. A tombstone
	// contributes start#seq,RANGEDEL below and, when its end is the
	// table's upper bound, the exclusive sentinel
	// base.MakeRangeDeleteSentinel(end) above.
	Smallest, Largest []byte
	// SmallestSeq and LargestSeq bound all the sequence numbers.
	SmallestSeq, LargestSeq base.SeqNum
	NumEntries              uint64
	NumDeletions            uint64
	NumRangeDeletions       uint64
	// HasPoints is false for a table of range tombstones only.
	HasPoints bool
}

// Writer writes one table. Point entries are added in strictly increasing
// internal key order; range tombstones, already fragmented, in their own
// sorted order, possibly interleaved with points. A Writer is not safe for
// concurrent use.
type Writer struct {
	f    vfs.File
	bw   *bufio.Writer
	opts WriterOptions
	// offset is the number of bytes written (to bw) so far.
	offset uint64
	// err is sticky: once set, every call returns it.
	err      error
	finished bool

	data     blockWriter
	index    blockWriter
	rangeDel blockWriter
	// pending is the handle of the last finished data block whose index
	// entry waits for the next key (to choose a short separator).
	pending    blockHandle
	hasPending bool
	filter     *filter.BlockedBuilder

	firstKey, lastKey []byte // Point keys.
	// Range tombstones: the first one's key, the last one's bounds.
	firstTombKey               []byte
	lastTombStart, lastTombEnd []byte
	lastTombSeq                base.SeqNum

	props       Properties
	scratch     []byte
	compressBuf []byte
}

// NewWriter returns a writer of a table into f. Finish writes the table's
// tail but neither syncs nor closes f: the caller does (f.Sync(); f.Close()).
func NewWriter(f vfs.File, opts WriterOptions) *Writer {
	if opts.BlockSize <= 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.BlockRestartInterval <= 0 {
		opts.BlockRestartInterval = DefaultBlockRestartInterval
	}
	w := &Writer{
		f:        f,
		bw:       bufio.NewWriterSize(f, 64<<10),
		opts:     opts,
		data:     blockWriter{restartInterval: opts.BlockRestartInterval},
		index:    blockWriter{restartInterval: 1},
		rangeDel: blockWriter{restartInterval: opts.BlockRestartInterval},
	}
	if opts.FilterBitsPerKey > 0 {
		w.filter = filter.NewBlockedBuilder(opts.FilterBitsPerKey)
	}
	w.props.Compression = opts.Compression
	w.props.SmallestSeq = base.SeqNumMax
	return w
}

var errWriterFinished = errors.New("sst: writer already finished")

// Add appends a point entry. ikey must be a valid internal key of kind SET,
// DEL or BLOBIDX, greater than every key added before.
func (w *Writer) Add(ikey, value []byte) error {
	if err := w.usable(); err != nil {
		return err
	}
	if !base.ValidInternalKey(ikey) || !isPointKind(base.DecodeTrailer(ikey).Kind()) {
		return base.InvalidArgumentf("sst: Add of %s: not a point internal key", base.FormatInternalKey(ikey))
	}
	if w.props.NumEntries > 0 && base.InternalCompare(w.lastKey, ikey) >= 0 {
		return base.InvalidArgumentf("sst: Add of %s after %s: keys must strictly increase",
			base.FormatInternalKey(ikey), base.FormatInternalKey(w.lastKey))
	}
	if entrySize(ikey, value) > maxBlockLen/2 {
		return base.InvalidArgumentf("sst: entry of %d bytes is too large", len(ikey)+len(value))
	}
	if w.hasPending {
		w.scratch = appendSeparator(w.scratch[:0], w.lastKey, ikey)
		w.addIndexEntry(w.scratch)
	}
	ukey := base.UserKey(ikey)
	if w.filter != nil && (w.props.NumEntries == 0 || !bytes.Equal(base.UserKey(w.lastKey), ukey)) {
		w.filter.AddHash(filter.Hash(ukey))
	}
	if w.props.NumEntries == 0 {
		w.firstKey = append(w.firstKey[:0], ikey...)
	}
	w.data.add(ikey, value)
	w.lastKey = append(w.lastKey[:0], ikey...)

	t := base.DecodeTrailer(ikey)
	w.noteSeq(t.SeqNum())
	w.props.NumEntries++
	if t.Kind() == base.KindDelete {
		w.props.NumDeletions++
	}
	w.props.RawKeySize += uint64(len(ikey))
	w.props.RawValueSize += uint64(len(value))

	if w.data.estimatedSize() >= w.opts.BlockSize {
		w.flushDataBlock()
	}
	return w.err
}

// AddRangeTombstone appends the tombstone fragment [start, end)@seq.
// Fragments come in the order of their keys start#seq,RANGEDEL: by start,
// then by seq descending. Fragments with the same start must have the same
// end; otherwise a fragment starts at or after the previous one's end.
func (w *Writer) AddRangeTombstone(start, end []byte, seq base.SeqNum) error {
	if err := w.usable(); err != nil {
		return err
	}
	if bytes.Compare(start, end) >= 0 {
		return base.InvalidArgumentf("sst: empty range tombstone [%q, %q)", start, end)
	}
	if seq > base.SeqNumMax {
		return base.InvalidArgumentf("sst: range tombstone seq %d out of range", seq)
	}
	if w.props.NumRangeDeletions > 0 {
		sameStart := bytes.Equal(start, w.lastTombStart)
		switch {
		case sameStart && !bytes.Equal(end, w.lastTombEnd):
			return base.InvalidArgumentf("sst: range tombstone [%q, %q) overlaps fragment [%q, %q)", start, end, w.lastTombStart, w.lastTombEnd)
		case sameStart && seq >= w.lastTombSeq:
			return base.InvalidArgumentf("sst: range tombstone fragments of %q must have decreasing seqs (%d after %d)", start, seq, w.lastTombSeq)
		case !sameStart && bytes.Compare(start, w.lastTombEnd) < 0:
			return base.InvalidArgumentf("sst: range tombstone [%q, %q) not after fragment [%q, %q)", start, end, w.lastTombStart, w.lastTombEnd)
		}
	}
	w.scratch = base.MakeInternalKey(w.scratch[:0], start, seq, base.KindRangeDelete)
	if w.props.NumRangeDeletions == 0 {
		w.firstTombKey = append(w.firstTombKey[:0], w.scratch...)
	}
	w.rangeDel.add(w.scratch, end)
	w.lastTombStart = append(w.lastTombStart[:0], start...)
	w.lastTombEnd = append(w.lastTombEnd[:0], end...)
	w.lastTombSeq = seq
	w.props.NumRangeDeletions++
	w.noteSeq(seq)
	return nil
}

// EstimatedSize returns the approximate size of the table if it were
// finished now.
func (w *Writer) EstimatedSize() uint64 {
	return w.offset + uint64(w.data.estimatedSize()) + uint64(w.index.estimatedSize()) +
		uint64(w.rangeDel.estimatedSize())
}

// Finish writes the remaining data block, the filter, range deletion,
// index, properties and metaindex blocks and the footer, and flushes. It does
// not sync or close the file. A table must hold at least one point entry or
// range tombstone.
func (w *Writer) Finish() (Metadata, error) {
	if err := w.usable(); err != nil {
		return Metadata{}, err
	}
	w.finished = true
	if w.props.NumEntries == 0 && w.props.NumRangeDeletions == 0 {
		w.err = base.InvalidArgumentf("sst: cannot finish an empty table")
		return Metadata{}, w.err
	}
	if !w.data.empty() {
		w.flushDataBlock()
	}
	if w.hasPending {
		w.scratch = appendSuccessor(w.scratch[:0], w.lastKey)
		w.addIndexEntry(w.scratch)
	}

	meta := blockWriter{restartInterval: 1}
	if w.filter != nil && w.props.NumEntries > 0 {
		h := w.writeBlock(w.filter.Finish(nil), NoCompression)
		w.props.FilterSize = h.length + blockTrailerLen
		meta.add([]byte(metaFilter), appendHandle(nil, h))
	}
	var rangeDelHandle blockHandle
	if w.props.NumRangeDeletions > 0 {
		rangeDelHandle = w.writeBlock(w.rangeDel.finish(), w.opts.Compression)
	}
	indexHandle := w.writeBlock(w.index.finish(), w.opts.Compression)
	w.props.IndexSize = indexHandle.length + blockTrailerLen
	w.props.CreationTime = time.Now().Unix()
	propsHandle := w.writeBlock(w.props.encode(1), w.opts.Compression)
	meta.add([]byte(metaProperties), appendHandle(nil, propsHandle))
	if w.props.NumRangeDeletions > 0 {
		meta.add([]byte(metaRangeDel), appendHandle(nil, rangeDelHandle))
	}
	metaHandle := w.writeBlock(meta.finish(), NoCompression)
	w.write(footer{metaindex: metaHandle, index: indexHandle}.encode())
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if w.err != nil {
		return Metadata{}, w.err
	}

	m := Metadata{
		Size:              w.offset,
		SmallestSeq:       w.props.SmallestSeq,
		LargestSeq:        w.props.LargestSeq,
		NumEntries:        w.props.NumEntries,
		NumDeletions:      w.props.NumDeletions,
		NumRangeDeletions: w.props.NumRangeDeletions,
		HasPoints:         w.props.NumEntries > 0,
	}
	if m.HasPoints {
		m.Smallest = append([]byte(nil), w.firstKey...)
		m.Largest = append([]byte(nil), w.lastKey...)
	}
	if w.props.NumRangeDeletions > 0 {
		if m.Smallest == nil || base.InternalCompare(w.firstTombKey, m.Smallest) < 0 {
			m.Smallest = append([]byte(nil), w.firstTombKey...)
		}
		sentinel := base.MakeRangeDeleteSentinel(nil, w.lastTombEnd)
		if m.Largest == nil || base.InternalCompare(sentinel, m.Largest) > 0 {
			m.Largest = sentinel
		}
	}
	return m, nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return errWriterFinished
	}
	return nil
}

func (w *Writer) noteSeq(seq base.SeqNum) {
	w.props.SmallestSeq = min(w.props.SmallestSeq, seq)
	w.props.LargestSeq = max(w.props.LargestSeq, seq)
}

// addIndexEntry indexes the pending data block under sep.
func (w *Writer) addIndexEntry(sep []byte) {
	var buf [maxHandleLen]byte
	w.index.add(sep, appendHandle(buf[:0], w.pending))
	w.hasPending = false
}

// flushDataBlock writes the current data block; its index entry waits for
// the next key.
func (w *Writer) flushDataBlock() {
	h := w.writeBlock(w.data.finish(), w.opts.Compression)
	w.data.reset()
	w.pending, w.hasPending = h, true
	w.props.NumDataBlocks++
	w.props.DataSize += h.length + blockTrailerLen
}

// writeBlock writes raw, compressed with c if that saves at least 1/8, and
// its trailer, and returns its handle.
func (w *Writer) writeBlock(raw []byte, c Compression) blockHandle {
	contents, typ := raw, byte(NoCompression)
	if c != NoCompression {
		var ok bool
		w.compressBuf, ok = compressBlock(w.compressBuf, raw, c)
		if ok {
			contents, typ = w.compressBuf, byte(c)
		}
	}
	h := blockHandle{offset: w.offset, length: uint64(len(contents))}
	var trailer [blockTrailerLen]byte
	trailer[0] = typ
	binary.LittleEndian.PutUint32(trailer[1:], blockChecksum(contents, typ))
	w.write(contents)
	w.write(trailer[:])
	return h
}

func (w *Writer) write(p []byte) {
	if w.err != nil {
		return
	}
	n, err := w.bw.Write(p)
	w.offset += uint64(n)
	w.err = err
}
