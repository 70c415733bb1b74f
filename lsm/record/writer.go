package record

import (
	"errors"
	"fmt"
	"io"
)

// errWriterClosed is returned by a Writer after Close.
var errWriterClosed = errors.New("record: writer closed")

// Writer writes records to an io.Writer in the log format.
//
// It buffers the current block: bytes reach the underlying writer when a
// block fills up, on Flush and on Close. Durability is the caller's business
// (the WAL calls Flush then File.Sync). A Writer is not safe for concurrent
// use. After an error from the underlying writer the Writer is broken: every
// later call returns that error, as the state of the output is unknown.
type Writer struct {
	w io.Writer
	// blockOffset is the offset in the output of buf[0].
	blockOffset int64
	// n is the number of bytes of buf in use. Invariant: after each call,
	// BlockSize-n >= HeaderSize (a block too full for another header has
	// been padded and written out).
	n int
	// flushed is the number of bytes of buf already written to w.
	// Invariant: flushed <= n.
	flushed int
	// err is sticky: set on the first write error, or by Close.
	err error
	buf [BlockSize]byte
}

// NewWriter returns a Writer writing to w from offset 0.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// WriteRecord appends p as one record and returns the offset at which the
// record starts. The record may still be buffered; see Flush.
func (w *Writer) WriteRecord(p []byte) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	start := w.blockOffset + int64(w.n)
	first := true
	for {
		frag := min(len(p), BlockSize-w.n-HeaderSize)
		last := frag == len(p)
		var typ byte
		switch {
		case first && last:
			typ = fullType
		case first:
			typ = firstType
		case last:
			typ = lastType
		default:
			typ = middleType
		}
		putHeader(w.buf[w.n:w.n+HeaderSize], typ, p[:frag])
		copy(w.buf[w.n+HeaderSize:], p[:frag])
		w.n += HeaderSize + frag
		p = p[frag:]
		if BlockSize-w.n < HeaderSize {
			clear(w.buf[w.n:])
			w.n = BlockSize
			if err := w.writeOut(); err != nil {
				return 0, err
			}
			w.blockOffset += BlockSize
			w.n, w.flushed = 0, 0
		}
		if last {
			return start, nil
		}
		first = false
	}
}

// writeOut writes the unflushed bytes of the block to w.
func (w *Writer) writeOut() error {
	if w.flushed == w.n {
		return nil
	}
	if _, err := w.w.Write(w.buf[w.flushed:w.n]); err != nil {
		w.err = fmt.Errorf("record: write: %w", err)
		return w.err
	}
	w.flushed = w.n
	return nil
}

// Flush writes the buffered bytes to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	return w.writeOut()
}

// Size returns the size of the output so far, buffered bytes included: the
// offset at which the next record would start, but for padding.
func (w *Writer) Size() int64 { return w.blockOffset + int64(w.n) }

// Close flushes the Writer. It does not close the underlying writer. Later
// calls return an error.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	err := w.writeOut()
	if err == nil {
		w.err = errWriterClosed
	}
	return err
}
