package sst

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Properties describe a table. They are written in the properties block and
// read (and pinned) when the table is opened.
type Properties struct {
	// NumEntries counts the point entries (SET, DEL, BLOBIDX).
	NumEntries uint64
	// NumDeletions counts the DEL point entries.
	NumDeletions uint64
	// NumRangeDeletions counts the range tombstone fragments (one per
	// start/end/seq triple).
	NumRangeDeletions uint64
	// RawKeySize and RawValueSize sum the encoded internal keys and the
	// values of the point entries, before prefix and block compression.
	RawKeySize, RawValueSize uint64
	// NumDataBlocks is the number of data blocks.
	NumDataBlocks uint64
	// DataSize, IndexSize and FilterSize are the bytes the data blocks,
	// the index block and the filter block take in the file, trailers
	// included.
	DataSize, IndexSize, FilterSize uint64
	// Compression is the algorithm the writer was asked to use; blocks
	// that did not compress well enough are stored raw regardless.
	Compression Compression
	// SmallestSeq and LargestSeq bound the sequence numbers of all the
	// table's entries, range tombstones included.
	SmallestSeq, LargestSeq base.SeqNum
	// CreationTime is when the writer finished, in Unix seconds.
	CreationTime int64
}

// The property names. Kept sorted: a meta block's keys strictly increase.
const (
	propCompression       = "cairn.compression"
	propCreationTime      = "cairn.creation.time"
	propDataSize          = "cairn.data.size"
	propFilterSize        = "cairn.filter.size"
	propIndexSize         = "cairn.index.size"
	propNumDataBlocks     = "cairn.num.data.blocks"
	propNumDeletions      = "cairn.num.deletions"
	propNumEntries        = "cairn.num.entries"
	propNumRangeDeletions = "cairn.num.range.deletions"
	propRawKeySize        = "cairn.raw.key.size"
	propRawValueSize      = "cairn.raw.value.size"
	propSeqLargest        = "cairn.seq.largest"
	propSeqSmallest       = "cairn.seq.smallest"
)

// encode returns the properties block: names in order, each value a uvarint
// (the compression as its type byte, the creation time as a zigzag varint).
func (p *Properties) encode(restartInterval int) []byte {
	type prop struct {
		name  string
		value []byte
	}
	u := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	props := []prop{
		{propCompression, u(uint64(p.Compression))},
		{propCreationTime, binary.AppendVarint(nil, p.CreationTime)},
		{propDataSize, u(p.DataSize)},
		{propFilterSize, u(p.FilterSize)},
		{propIndexSize, u(p.IndexSize)},
		{propNumDataBlocks, u(p.NumDataBlocks)},
		{propNumDeletions, u(p.NumDeletions)},
		{propNumEntries, u(p.NumEntries)},
		{propNumRangeDeletions, u(p.NumRangeDeletions)},
		{propRawKeySize, u(p.RawKeySize)},
		{propRawValueSize, u(p.RawValueSize)},
		{propSeqLargest, u(uint64(p.LargestSeq))},
		{propSeqSmallest, u(uint64(p.SmallestSeq))},
	}
	slices.SortFunc(props, func(a, b prop) int { return strings.Compare(a.name, b.name) })
	w := blockWriter{restartInterval: restartInterval}
	for _, pr := range props {
		w.add([]byte(pr.name), pr.value)
	}
	return w.finish()
}

// decodeProperties parses a verified properties block. Unknown names are
// ignored, so that a newer writer may add properties; a known name with a
// malformed value is a corruption.
func decodeProperties(data []byte) (Properties, error) {
	var p Properties
	var it blockIter
	if err := it.init(data); err != nil {
		return p, err
	}
	for it.first(); it.valid; it.next() {
		name, val := string(it.key()), it.value()
		if name == propCreationTime {
			v, n := binary.Varint(val)
			if n <= 0 || n != len(val) {
				return p, base.CorruptionErrorf("sst: malformed property %s", name)
			}
			p.CreationTime = v
			continue
		}
		v, n := binary.Uvarint(val)
		ok := n > 0 && n == len(val)
		switch name {
		case propCompression:
			ok = ok && v <= uint64(ZstdCompression)
			p.Compression = Compression(v)
		case propDataSize:
			p.DataSize = v
		case propFilterSize:
			p.FilterSize = v
		case propIndexSize:
			p.IndexSize = v
		case propNumDataBlocks:
			p.NumDataBlocks = v
		case propNumDeletions:
			p.NumDeletions = v
		case propNumEntries:
			p.NumEntries = v
		case propNumRangeDeletions:
			p.NumRangeDeletions = v
		case propRawKeySize:
			p.RawKeySize = v
		case propRawValueSize:
			p.RawValueSize = v
		case propSeqLargest:
			p.LargestSeq = base.SeqNum(v)
		case propSeqSmallest:
			p.SmallestSeq = base.SeqNum(v)
		default:
			continue // A property of a newer writer.
		}
		if !ok {
			return p, base.CorruptionErrorf("sst: malformed property %s", name)
		}
	}
	if it.err != nil {
		return p, it.err
	}
	return p, nil
}
