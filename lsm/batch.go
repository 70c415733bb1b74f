package lsm

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// A Batch is a list of writes applied atomically by DB.Write: all of them or
// none, under consecutive sequence numbers, visible to readers at once.
//
// Its encoding is also the WAL record payload:
//
//	+--------------+-------------+---------+---------+-----
//	| seq (8B LE)  | count (4B)  | entry 1 | entry 2 | ...
//	+--------------+-------------+---------+---------+-----
//	entry: kind (1B) | varint len(key) | key | [varint len(value) | value]
//
// Set and BlobIndex entries carry a value, RangeDelete entries carry the
// exclusive end key as their value, Delete entries carry none. Entry i gets
// sequence number seq+i.
//
// A Batch is not safe for concurrent use.
type Batch struct {
	data  []byte
	count uint32
	// err is the first invalid operation added; Write refuses the batch
	// and writes nothing.
	err error
}

const batchHeaderLen = 12

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

func (b *Batch) init() {
	if len(b.data) < batchHeaderLen {
		b.data = append(b.data[:0], make([]byte, batchHeaderLen)...)
	}
}

// Set adds a write of value under key.
func (b *Batch) Set(key, value []byte) {
	if b.checkKey(key) && len(value) > MaxValueSize {
		b.fail(base.InvalidArgumentf("value of %d bytes exceeds the limit of %d", len(value), MaxValueSize))
	}
	b.add(base.KindSet, key, value, true)
}

// Delete adds a deletion of key.
func (b *Batch) Delete(key []byte) {
	b.checkKey(key)
	b.add(base.KindDelete, key, nil, false)
}

// DeleteRange adds a deletion of every key k with start <= k < end. An empty
// range (start == end) deletes nothing; start > end is invalid.
func (b *Batch) DeleteRange(start, end []byte) {
	if b.checkKey(start) && b.checkKey(end) && string(start) > string(end) {
		b.fail(base.InvalidArgumentf("DeleteRange start %q > end %q", start, end))
	}
	b.add(base.KindRangeDelete, start, end, true)
}

func (b *Batch) checkKey(key []byte) bool {
	switch {
	case len(key) == 0:
		b.fail(base.InvalidArgumentf("empty key"))
		return false
	case len(key) > MaxKeySize:
		b.fail(base.InvalidArgumentf("key of %d bytes exceeds the limit of %d", len(key), MaxKeySize))
		return false
	}
	return true
}

func (b *Batch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *Batch) add(kind base.Kind, key, value []byte, hasValue bool) {
	if b.err != nil {
		return
	}
	b.init()
	b.data = append(b.data, byte(kind))
	b.data = binary.AppendUvarint(b.data, uint64(len(key)))
	b.data = append(b.data, key...)
	if hasValue {
		b.data = binary.AppendUvarint(b.data, uint64(len(value)))
		b.data = append(b.data, value...)
	}
	b.count++
	binary.LittleEndian.PutUint32(b.data[8:12], b.count)
}

// setBlobIndex adds a blob index entry (blob GC's rewritten location).
func (b *Batch) setBlobIndex(key, idx []byte) {
	b.add(base.KindBlobIndex, key, idx, true)
}

// Count returns the number of entries in the batch.
func (b *Batch) Count() int { return int(b.count) }

// Empty reports whether the batch holds no entries.
func (b *Batch) Empty() bool { return b.count == 0 }

// Len returns the size of the batch's encoding in bytes.
func (b *Batch) Len() int { return len(b.data) }

// Err returns the first invalid operation added to the batch, if any.
func (b *Batch) Err() error { return b.err }

// Reset empties the batch, keeping its buffer.
func (b *Batch) Reset() {
	b.data = b.data[:0]
	b.count = 0
	b.err = nil
}

func (b *Batch) setSeq(seq base.SeqNum) {
	b.init()
	binary.LittleEndian.PutUint64(b.data[:8], uint64(seq))
}

// Repr returns the batch's encoding (the WAL payload). It aliases the
// batch's buffer.
func (b *Batch) Repr() []byte {
	b.init()
	return b.data
}

// batchReader decodes an encoded batch. Every read is bounds-checked: the
// bytes may come from a damaged WAL whose checksum happened to match.
type batchReader struct {
	data  []byte
	seq   base.SeqNum
	count uint32
	read  uint32
}

func newBatchReader(repr []byte) (batchReader, error) {
	if len(repr) < batchHeaderLen {
		return batchReader{}, base.CorruptionErrorf("batch of %d bytes is shorter than its header", len(repr))
	}
	return batchReader{
		data:  repr[batchHeaderLen:],
		seq:   base.SeqNum(binary.LittleEndian.Uint64(repr[:8])),
		count: binary.LittleEndian.Uint32(repr[8:12]),
	}, nil
}

// next returns the next entry; ok is false at the end. An entry whose bytes
// do not parse, or a count that disagrees with the entries, is corruption.
func (r *batchReader) next() (kind base.Kind, key, value []byte, ok bool, err error) {
	if len(r.data) == 0 {
		if r.read != r.count {
			return 0, nil, nil, false, base.CorruptionErrorf("batch holds %d entries, header says %d", r.read, r.count)
		}
		return 0, nil, nil, false, nil
	}
	kind = base.Kind(r.data[0])
	r.data = r.data[1:]
	if kind > base.KindMax {
		return 0, nil, nil, false, base.CorruptionErrorf("batch entry of unknown kind %d", kind)
	}
	if key, err = r.lenPrefixed(); err != nil {
		return 0, nil, nil, false, err
	}
	if kind != base.KindDelete {
		if value, err = r.lenPrefixed(); err != nil {
			return 0, nil, nil, false, err
		}
	}
	r.read++
	if r.read > r.count {
		return 0, nil, nil, false, base.CorruptionErrorf("batch holds more entries than its header's %d", r.count)
	}
	return kind, key, value, true, nil
}

func (r *batchReader) lenPrefixed() ([]byte, error) {
	n, w := binary.Uvarint(r.data)
	if w <= 0 || n > uint64(len(r.data)-w) {
		return nil, base.CorruptionErrorf("batch entry length malformed or past the end")
	}
	v := r.data[w : w+int(n)]
	r.data = r.data[w+int(n):]
	return v, nil
}

func (b *Batch) String() string {
	return fmt.Sprintf("batch(%d entries, %d bytes)", b.count, len(b.data))
}
