package record

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// ReaderOption configures a Reader.
type ReaderOption func(*Reader)

// WithPointInTimeRecovery makes the Reader end the log at the first damage,
// wherever it is, as if it were a torn tail: Next returns io.EOF and
// TornTail/TornOffset say where the log was cut. Records after the damage
// are dropped without a check (a zero-filled tail is still a clean end).
// For an operator who chooses to recover to the last good point; never the
// default.
func WithPointInTimeRecovery() ReaderOption {
	return func(r *Reader) { r.pointInTime = true }
}

// Reader reads records from an io.Reader in the log format. See the package
// documentation for how it tells a torn tail from corruption.
//
// Once Next has returned an error (io.EOF included), it returns the same
// error forever. A Reader is not safe for concurrent use.
type Reader struct {
	r           io.Reader
	pointInTime bool

	// buf[:end] is the current block, at offset blockOffset of the input;
	// pos is the next byte to parse in it.
	blockOffset int64
	end, pos    int
	// nextOffset is the input offset of the block after the current one.
	nextOffset int64
	// eof is set once the underlying reader is exhausted: the current
	// block is the last one (and shorter than BlockSize, or empty).
	eof bool

	// rec assembles records made of several fragments.
	rec []byte
	// lastRecord is the offset of the record last returned by Next;
	// lastEnd the offset just past its last fragment.
	lastRecord, lastEnd int64
	// err is sticky: io.EOF, a corruption error or an I/O error.
	err error
	// torn and tornOffset describe a dropped tail (see TornTail).
	torn       bool
	tornOffset int64

	buf [BlockSize]byte
}

// NewReader returns a Reader reading the log in r from its start.
func NewReader(r io.Reader, opts ...ReaderOption) *Reader {
	rd := &Reader{r: r, lastRecord: -1, tornOffset: -1}
	// Start with an exhausted full block so that the first fragment read
	// loads block 0.
	rd.end, rd.pos = BlockSize, BlockSize
	rd.blockOffset = -BlockSize
	for _, o := range opts {
		o(rd)
	}
	return rd
}

// TornTail reports whether Next, having returned io.EOF, dropped an
// incomplete or damaged tail (rather than ending at the end of the input or
// at a zero-filled tail).
func (r *Reader) TornTail() bool { return r.torn }

// TornOffset returns the offset at which the dropped tail starts (the end of
// the last complete record, but for padding), or -1 if TornTail is false.
func (r *Reader) TornOffset() int64 { return r.tornOffset }

// EndOffset returns the offset just past the last fragment of the record
// last returned by Next, or 0 before the first: the length of the log's
// intact prefix that the records read so far cover. After Next has returned
// io.EOF it is where the readable log ends; a writer that wrote n bytes
// and synced them left a log whose EndOffset at io.EOF is n, whatever was
// appended after.
func (r *Reader) EndOffset() int64 { return r.lastEnd }

// LastRecordOffset returns the offset at which the record last returned by
// Next starts, or -1 before the first record.
func (r *Reader) LastRecordOffset() int64 { return r.lastRecord }

// loadBlock reads the next block into buf.
func (r *Reader) loadBlock() error {
	n, err := io.ReadFull(r.r, r.buf[:])
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		r.eof = true
	case err != nil:
		return fmt.Errorf("record: read at offset %d: %w", r.nextOffset, err)
	}
	r.blockOffset = r.nextOffset
	r.nextOffset += int64(n)
	r.end, r.pos = n, 0
	return nil
}

// fragment is what nextFragment found at offset off.
type fragment struct {
	status  fragStatus
	typ     byte
	payload []byte // valid until the next block is loaded
	off     int64
	reason  string // for fragBad
}

type fragStatus uint8

const (
	fragOK   fragStatus = iota // a valid fragment
	fragEnd                    // the end of the input
	fragZero                   // zero bytes where a header is expected
	fragBad                    // a damaged fragment (pos left at it)
)

// nextFragment parses the fragment at the read position. A valid fragment is
// consumed; for any other status the position stays where the fragment was
// expected. Only I/O errors are returned as errors.
func (r *Reader) nextFragment() (fragment, error) {
	for r.end-r.pos < HeaderSize {
		if r.eof {
			f := fragment{off: r.blockOffset + int64(r.pos)}
			switch rest := r.buf[r.pos:r.end]; {
			case len(rest) == 0:
				f.status = fragEnd
			case allZero(rest):
				f.status = fragZero
			default:
				f.status, f.reason = fragBad, "truncated fragment header"
			}
			return f, nil
		}
		// The trailer of a full block is padding.
		if err := r.loadBlock(); err != nil {
			return fragment{}, err
		}
	}
	h := r.buf[r.pos : r.pos+HeaderSize]
	f := fragment{off: r.blockOffset + int64(r.pos), typ: h[6]}
	sum := binary.LittleEndian.Uint32(h[0:4])
	n := int(binary.LittleEndian.Uint16(h[4:6]))
	switch {
	case sum == 0 && n == 0 && f.typ == zeroType:
		f.status = fragZero
		return f, nil
	case f.typ == zeroType || f.typ > lastType:
		f.status, f.reason = fragBad, fmt.Sprintf("invalid fragment type %d", f.typ)
		return f, nil
	}
	start, end := r.pos+HeaderSize, r.pos+HeaderSize+n
	switch {
	case end > BlockSize:
		f.status, f.reason = fragBad, fmt.Sprintf("fragment length %d overflows its block", n)
		return f, nil
	case end > r.end:
		f.status, f.reason = fragBad, fmt.Sprintf("truncated fragment (length %d)", n)
		return f, nil
	}
	f.payload = r.buf[start:end]
	if fragmentChecksum(f.typ, f.payload) != sum {
		f.status, f.reason, f.payload = fragBad, "checksum mismatch", nil
		return f, nil
	}
	r.pos = end
	return f, nil
}

// Next returns the next record, valid until the next call. It returns
// io.EOF at the end of the log, including after a torn tail (see TornTail),
// and an error for which base.IsCorruption is true when the log is damaged
// before its end.
func (r *Reader) Next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	inRecord := false
	var recStart int64
	for {
		f, err := r.nextFragment()
		if err != nil {
			r.err = err
			return nil, err
		}
		// dmg is where the damage starts if this fragment ends the log.
		dmg := f.off
		if inRecord {
			dmg = recStart
		}
		switch f.status {
		case fragEnd:
			return nil, r.endLog(inRecord, dmg)
		case fragZero:
			return nil, r.damaged(dmg, f.off, "zeroed fragment header", !inRecord)
		case fragBad:
			return nil, r.damaged(dmg, f.off, f.reason, false)
		}
		switch f.typ {
		case fullType, firstType:
			if inRecord {
				// The FIRST at recStart never got its LAST; this
				// fragment, valid, starts a record after the damage.
				return nil, r.damaged(recStart, f.off, fmt.Sprintf("incomplete record (no LAST fragment before offset %d)", f.off), false)
			}
			if f.typ == fullType {
				r.lastRecord, r.lastEnd = f.off, r.recordEnd()
				return f.payload, nil
			}
			inRecord, recStart = true, f.off
			r.rec = append(r.rec[:0], f.payload...)
		default: // middleType, lastType
			if !inRecord {
				return nil, r.damaged(f.off, f.off, "fragment without its FIRST", false)
			}
			r.rec = append(r.rec, f.payload...)
			if f.typ == lastType {
				r.lastRecord, r.lastEnd = recStart, r.recordEnd()
				return r.rec, nil
			}
		}
	}
}

// recordEnd is the offset just past the record that ends at the read
// position, counting the padding a writer adds after it when its block has
// no room for another header (Writer.Size counts it, and so does the
// synced size a WAL records).
func (r *Reader) recordEnd() int64 {
	if BlockSize-r.pos < HeaderSize {
		return r.blockOffset + BlockSize
	}
	return r.blockOffset + int64(r.pos)
}

// endLog ends the log at the end of the input; an incomplete record there is
// a torn tail starting at dmg.
func (r *Reader) endLog(incomplete bool, dmg int64) error {
	if incomplete {
		r.torn, r.tornOffset = true, dmg
	}
	r.err = io.EOF
	return r.err
}

// damaged decides what damage at offset dmg means, scanning the input from
// offset scanFrom (in the current block) for a valid record start. zeroEnd
// is set when the damage is zero bytes where a record would start: if
// everything after is zero too, that is a clean end, not a torn tail.
func (r *Reader) damaged(dmg, scanFrom int64, reason string, zeroEnd bool) error {
	var next int64 = -1
	var restZero bool
	var err error
	if r.pointInTime {
		// Stop here, whatever follows; read on only to tell a zero-filled
		// tail from a dropped one.
		if zeroEnd {
			restZero, err = r.restIsZero(scanFrom)
		}
	} else {
		next, restZero, err = r.scanForRecordStart(scanFrom)
	}
	switch {
	case err != nil:
		r.err = err
	case next >= 0:
		r.err = base.MarkCorruption(&CorruptionError{Offset: dmg, NextRecord: next, Reason: reason})
	default:
		if !zeroEnd || !restZero {
			r.torn, r.tornOffset = true, dmg
		}
		r.err = io.EOF
	}
	return r.err
}

// scanForRecordStart looks, from input offset from (in the current block)
// to the end of the input, for a fragment that starts a record and is
// valid. It returns its offset or -1, and whether all the bytes scanned were
// zero. It consumes the input.
func (r *Reader) scanForRecordStart(from int64) (next int64, restZero bool, err error) {
	p := int(from - r.blockOffset)
	restZero = true
	for {
		block := r.buf[:r.end]
		for q := p; q+HeaderSize <= len(block); q++ {
			if recordStartAt(block, q) {
				return r.blockOffset + int64(q), false, nil
			}
		}
		restZero = restZero && allZero(block[p:])
		if r.eof {
			return -1, restZero, nil
		}
		if err := r.loadBlock(); err != nil {
			return -1, false, err
		}
		p = 0
	}
}

// restIsZero reports whether the input from offset from (in the current
// block) to its end is all zero bytes. It consumes the input.
func (r *Reader) restIsZero(from int64) (bool, error) {
	p := int(from - r.blockOffset)
	for {
		if !allZero(r.buf[p:r.end]) {
			return false, nil
		}
		if r.eof {
			return true, nil
		}
		if err := r.loadBlock(); err != nil {
			return false, err
		}
		p = 0
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
