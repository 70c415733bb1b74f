package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// Writer writes the binary trace format (see format.go) to an io.Writer,
// buffered: Flush pushes the buffered records out. A Writer is not safe
// for concurrent use (the Tracer serializes its writes).
type Writer struct {
	w   io.Writer
	buf []byte
	// size counts the bytes written so far, buffered ones included.
	size int64
	err  error
}

// writerBufferSize is how much a Writer buffers before writing.
const writerBufferSize = 64 << 10

// NewWriter returns a Writer writing to w. Call WriteHeader first.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, buf: make([]byte, 0, writerBufferSize)}
}

// WriteHeader writes the trace header.
func (w *Writer) WriteHeader(h Header) error {
	return w.append(appendHeader(w.buf, h))
}

// WriteRecord writes r. Only the fields meaningful for r's caller and
// block type are written (see Record).
func (w *Writer) WriteRecord(r *Record) error {
	return w.append(appendRecord(w.buf, r))
}

// writeUnsealedWithin writes rec, one record appendUnsealed framed,
// sealing it, unless the trace would then exceed limit bytes (limit <= 0:
// no limit); it reports whether rec was written.
func (w *Writer) writeUnsealedWithin(rec []byte, limit int64) (bool, error) {
	if w.err != nil {
		return false, w.err
	}
	if limit > 0 && w.size+int64(len(rec)) > limit {
		return false, nil
	}
	n := len(w.buf)
	buf := append(w.buf, rec...)
	sealRecord(buf[n:])
	return true, w.append(buf)
}

func (w *Writer) append(buf []byte) error {
	if w.err != nil {
		return w.err
	}
	w.size += int64(len(buf) - len(w.buf))
	w.buf = buf
	if len(w.buf) >= writerBufferSize {
		return w.Flush()
	}
	return nil
}

// Size returns the number of bytes written, buffered ones included.
func (w *Writer) Size() int64 { return w.size }

// Flush writes the buffered bytes. A write error is sticky.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 {
		_, err := w.w.Write(w.buf)
		w.buf = w.buf[:0]
		if err != nil {
			w.err = fmt.Errorf("trace: writing: %w", err)
		}
	}
	return w.err
}

// Reader reads the binary trace format. It implements RecordReader.
type Reader struct {
	r      *bufio.Reader
	header Header
	hdr    [recordHdrLen]byte
	buf    []byte
	err    error
}

// NewReader reads the header of the binary trace in r. An empty or damaged
// header is an error wrapping ErrCorrupt.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var h [headerLen]byte
	if n, err := io.ReadFull(br, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf("trace of %d bytes ends inside its %d-byte header", n, headerLen)
		}
		return nil, fmt.Errorf("trace: reading header: %w", err)
	}
	hdr, err := decodeHeader(h[:])
	if err != nil {
		return nil, err
	}
	return &Reader{r: br, header: hdr}, nil
}

// Header returns the trace's header.
func (r *Reader) Header() Header { return r.header }

// Next returns the next record: io.EOF after the last one, an error
// wrapping ErrCorrupt if the trace is truncated or damaged. Errors are
// sticky.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
	}
	return rec, err
}

func (r *Reader) next() (Record, error) {
	n, err := io.ReadFull(r.r, r.hdr[:])
	if err != nil {
		if errors.Is(err, io.EOF) && n == 0 {
			return Record{}, io.EOF
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Record{}, corruptf("trace truncated inside a record header")
		}
		return Record{}, fmt.Errorf("trace: reading: %w", err)
	}
	length := leUint32(r.hdr[:4])
	sum := leUint32(r.hdr[4:])
	if length > maxPayloadLen {
		return Record{}, corruptf("record of %d bytes (at most %d)", length, maxPayloadLen)
	}
	if cap(r.buf) < int(length) {
		r.buf = make([]byte, length)
	}
	r.buf = r.buf[:length]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Record{}, corruptf("trace truncated inside a record of %d bytes", length)
		}
		return Record{}, fmt.Errorf("trace: reading: %w", err)
	}
	if got := crcChecksum(r.buf); got != sum {
		return Record{}, corruptf("record checksum mismatch (%#x, want %#x)", got, sum)
	}
	return decodePayload(r.buf)
}

// File is a trace opened by OpenFile: a RecordReader that must be closed.
type File struct {
	RecordReader
	f *os.File
	// HumanReadable is true for the CSV format.
	HumanReadable bool
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// OpenFile opens the trace at path, binary or human-readable (told apart
// by their first bytes), and reads its header. The result is a *File;
// close it when done.
func OpenFile(path string) (RecordReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(len(humanMagic))
	var rr RecordReader
	human := false
	switch {
	case len(head) >= len(magic) && string(head[:len(magic)]) == magic:
		rr, err = NewReader(br)
	case string(head) == humanMagic:
		human = true
		rr, err = NewHumanReader(br)
	default:
		err = corruptf("%s is not a block-cache trace (neither binary nor human-readable)", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{RecordReader: rr, f: f, HumanReadable: human}, nil
}
