package blob

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Sizes and constants of the blob file format (see doc.go).
const (
	HeaderLen       = 16
	FooterLen       = 32
	RecordHeaderLen = 8
	RecordTrailer   = 4
	// RecordOverhead is the bytes a record adds to its key and value.
	RecordOverhead = RecordHeaderLen + RecordTrailer

	// formatVersion is the version the writer writes: 2 since records
	// of a compressed file may be stored raw (rawValueFlag). A reader
	// reads versions 1 and 2 alike (a version 1 file never sets the
	// flag); an older reader refuses version 2 as unknown rather than
	// misread a raw record.
	formatVersion    = 2
	minFormatVersion = 1
	headerMagic      = "cairnblb"
	footerMagic      = "BLBF"

	// maxRecordLen bounds a record so that a corrupt length is never taken
	// at face value.
	maxRecordLen = 1 << 30

	// rawValueFlag, set in a record's value length field, says that the
	// stored value is the value itself although the file's compression
	// is not none: it did not compress well enough (see
	// compressedGoodEnough). The length is the field's other bits.
	rawValueFlag = 1 << 31
)

// compressedGoodEnough reports whether a value of rawLen bytes that
// compressed to compressedLen is worth storing compressed: when it saves
// at least an eighth. RocksDB (GoodCompressionRatio) and Pebble keep a
// compressed block on the same condition; below it the bytes saved do not
// pay for decoding on every cache miss (a blob is decoded on each miss,
// and a 4 KiB Snappy decode costs about as much as the read's copy and
// CRC together), and a value that saves less is usually random data (an
// encrypted or already compressed payload) that Snappy grows by a few
// bytes.
func compressedGoodEnough(compressedLen, rawLen int) bool {
	return compressedLen < rawLen-rawLen/8
}

// Compression is the algorithm of a blob file's values.
type Compression uint8

// The algorithms (see doc.go). Their values are part of the format.
const (
	// CompressionNone stores values as they are.
	CompressionNone Compression = 0
	// CompressionSnappy stores every value of the file in the Snappy
	// block format, as the tables' Snappy blocks do.
	CompressionSnappy Compression = 1
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionSnappy:
		return "snappy"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

func (c Compression) known() bool { return c <= CompressionSnappy }

// maxSnappyExpansion bounds what Snappy decodes from one byte: its
// densest element, a copy with a 2-byte offset, is 3 bytes for 64. A
// stored value whose header claims more is corrupt, and is refused before
// anything of that size is allocated.
const maxSnappyExpansion = 22

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// RecordLen returns the length of the record of a key and a value.
func RecordLen(keyLen, valueLen int) int { return RecordOverhead + keyLen + valueLen }

// Index locates a separated value: the entry that the LSM keeps under
// base.KindBlobIndex in place of the value.
type Index struct {
	Compression Compression
	FileNum     base.FileNum
	// Offset is the record's offset in the file, Len its full length.
	Offset, Len uint64
}

// AppendEncoded appends x's encoding (see doc.go) to dst.
func (x Index) AppendEncoded(dst []byte) []byte {
	dst = append(dst, byte(x.Compression))
	dst = binary.AppendUvarint(dst, uint64(x.FileNum))
	dst = binary.AppendUvarint(dst, x.Offset)
	return binary.AppendUvarint(dst, x.Len)
}

// DecodeIndex decodes a blob index. It never panics; malformed input
// returns an error for which base.IsCorruption is true.
func DecodeIndex(b []byte) (Index, error) {
	var x Index
	if len(b) < 1 {
		return x, base.CorruptionErrorf("blob: empty blob index")
	}
	x.Compression = Compression(b[0])
	b = b[1:]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return Index{}, base.CorruptionErrorf("blob: truncated blob index")
		}
		vals[i] = v
		b = b[n:]
	}
	if len(b) != 0 {
		return Index{}, base.CorruptionErrorf("blob: %d trailing bytes after blob index", len(b))
	}
	x.FileNum, x.Offset, x.Len = base.FileNum(vals[0]), vals[1], vals[2]
	if x.FileNum == 0 || x.Offset < HeaderLen || x.Len < RecordOverhead || x.Len > maxRecordLen {
		return Index{}, base.CorruptionErrorf("blob: impossible blob index %+v", x)
	}
	if !x.Compression.known() {
		return Index{}, base.CorruptionErrorf("blob: blob index names unknown compression %d", x.Compression)
	}
	return x, nil
}

// Writer writes one blob file. It buffers records and writes them to the
// underlying writer in chunks; it is not safe for concurrent use.
type Writer struct {
	w           io.Writer
	fileNum     base.FileNum
	compression Compression
	buf         []byte
	offset      uint64 // offset of the next record
	count       uint64
	err         error
}

// writerBufferSize is the size at which the Writer passes its buffer on.
const writerBufferSize = 256 << 10

// NewWriter starts blob file fileNum, whose values are stored with
// compression c, on w and writes its header.
func NewWriter(w io.Writer, fileNum base.FileNum, c Compression) *Writer {
	if !c.known() {
		panic(fmt.Sprintf("blob: NewWriter with %s", c))
	}
	bw := &Writer{w: w, fileNum: fileNum, compression: c, buf: make([]byte, 0, writerBufferSize+64<<10)}
	var h [HeaderLen]byte
	copy(h[:8], headerMagic)
	h[8] = formatVersion
	h[9] = byte(c)
	binary.LittleEndian.PutUint32(h[12:], crc(h[:12]))
	bw.buf = append(bw.buf, h[:]...)
	bw.offset = HeaderLen
	return bw
}

// Add appends the record (key, value) and returns its index.
func (w *Writer) Add(key, value []byte) (Index, error) {
	if w.err != nil {
		return Index{}, w.err
	}
	if RecordLen(len(key), len(value)) > maxRecordLen {
		return Index{}, base.InvalidArgumentf("blob: record of %d bytes", RecordLen(len(key), len(value)))
	}
	start, vstart := w.startRecord(key)
	c := w.compression
	switch c {
	case CompressionSnappy:
		// s2's fastest Snappy-compatible encoder, as the tables use.
		need := vstart + snappy.MaxEncodedLen(len(value))
		if cap(w.buf) < need+RecordTrailer {
			w.buf = append(make([]byte, 0, need+RecordTrailer+writerBufferSize), w.buf...)
		}
		enc := s2.EncodeSnappy(w.buf[vstart:need], value)
		if compressedGoodEnough(len(enc), len(value)) {
			w.buf = w.buf[:vstart+len(enc)]
			break
		}
		// Stored raw: reads of it decode nothing.
		c = CompressionNone
		w.buf = append(w.buf[:vstart], value...)
	default:
		w.buf = append(w.buf, value...)
	}
	return w.finishRecord(key, start, vstart, c)
}

// startRecord appends a record's header (the stored value's length left
// for finishRecord) and key, and returns where the record and its value
// start in w.buf.
func (w *Writer) startRecord(key []byte) (start, vstart int) {
	start = len(w.buf)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(key)))
	w.buf = binary.LittleEndian.AppendUint32(w.buf, 0) // the stored value's length, by finishRecord
	w.buf = append(w.buf, key...)
	return start, len(w.buf)
}

// AddStored appends the record (key, stored), whose value is already
// stored as c, and returns its index: the record Add writes for the value
// stored decodes to, without decoding and encoding it again, if c is w's
// compression, or none in a file of another (a value Add found did not
// compress well enough, stored raw). Other compressions are an invalid
// argument. Relocation copies records so.
func (w *Writer) AddStored(key, stored []byte, c Compression) (Index, error) {
	if w.err != nil {
		return Index{}, w.err
	}
	if c != w.compression && c != CompressionNone {
		return Index{}, base.InvalidArgumentf("blob: a %s value added to a %s file", c, w.compression)
	}
	if RecordLen(len(key), len(stored)) > maxRecordLen {
		return Index{}, base.InvalidArgumentf("blob: record of %d bytes", RecordLen(len(key), len(stored)))
	}
	start, vstart := w.startRecord(key)
	w.buf = append(w.buf, stored...)
	return w.finishRecord(key, start, vstart, c)
}

// finishRecord completes the record w.buf[start:] of key, whose value,
// stored as c, begins at vstart: the stored length, the CRC.
func (w *Writer) finishRecord(key []byte, start, vstart int, c Compression) (Index, error) {
	if n := RecordLen(len(key), len(w.buf)-vstart); n > maxRecordLen { // compression may expand
		w.buf = w.buf[:start]
		return Index{}, base.InvalidArgumentf("blob: record of %d bytes", n)
	}
	vlField := uint32(len(w.buf) - vstart)
	if c != w.compression {
		vlField |= rawValueFlag
	}
	binary.LittleEndian.PutUint32(w.buf[start+4:], vlField)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, crc(w.buf[start:]))
	n := len(w.buf) - start
	x := Index{Compression: c, FileNum: w.fileNum, Offset: w.offset, Len: uint64(n)}
	w.offset += uint64(n)
	w.count++
	if len(w.buf) >= writerBufferSize {
		w.flush()
	}
	return x, w.err
}

func (w *Writer) flush() {
	if w.err == nil && len(w.buf) > 0 {
		_, w.err = w.w.Write(w.buf)
	}
	w.buf = w.buf[:0]
}

// Count returns the number of records added so far.
func (w *Writer) Count() uint64 { return w.count }

// Size returns the file's size if it were finished now.
func (w *Writer) Size() uint64 { return w.offset + FooterLen }

// Stats describe a finished blob file.
type Stats struct {
	// Count is the number of records, RecordBytes their total length
	// (what the blob indexes that point into the file sum to).
	Count, RecordBytes uint64
	// Size is the file's length.
	Size uint64
}

// Finish writes the footer and flushes. It does not sync or close the
// underlying writer.
func (w *Writer) Finish() (Stats, error) {
	var f [FooterLen]byte
	binary.LittleEndian.PutUint64(f[0:], w.count)
	binary.LittleEndian.PutUint64(f[8:], w.offset)
	binary.LittleEndian.PutUint64(f[16:], w.offset-HeaderLen)
	binary.LittleEndian.PutUint32(f[24:], crc(f[:24]))
	copy(f[28:], footerMagic)
	w.buf = append(w.buf, f[:]...)
	w.flush()
	if w.err != nil {
		return Stats{}, w.err
	}
	return Stats{Count: w.count, RecordBytes: w.offset - HeaderLen, Size: w.offset + FooterLen}, nil
}

// ReadableFile is what a Reader reads: vfs.File satisfies it.
type ReadableFile interface {
	io.ReaderAt
	io.Closer
}

// Reader reads records of one blob file. It is safe for concurrent use.
type Reader struct {
	f           ReadableFile
	fileNum     base.FileNum
	compression Compression
	stats       Stats
}

// NewReader checks the header and footer of blob file fileNum, size bytes
// long, and returns a reader that owns f (Close closes it).
func NewReader(f ReadableFile, fileNum base.FileNum, size int64) (*Reader, error) {
	if size < HeaderLen+FooterLen {
		return nil, base.CorruptionErrorf("blob: file %s: %d bytes is too short", fileNum, size)
	}
	var h [HeaderLen]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("blob: file %s: reading header: %w", fileNum, err)
	}
	if string(h[:8]) != headerMagic || binary.LittleEndian.Uint32(h[12:]) != crc(h[:12]) {
		return nil, base.CorruptionErrorf("blob: file %s: bad header", fileNum)
	}
	if h[8] < minFormatVersion || h[8] > formatVersion {
		return nil, base.CorruptionErrorf("blob: file %s: unknown format version %d", fileNum, h[8])
	}
	if !Compression(h[9]).known() {
		return nil, base.CorruptionErrorf("blob: file %s: unknown compression %d", fileNum, h[9])
	}
	var ft [FooterLen]byte
	if _, err := f.ReadAt(ft[:], size-FooterLen); err != nil {
		return nil, fmt.Errorf("blob: file %s: reading footer: %w", fileNum, err)
	}
	if string(ft[28:]) != footerMagic || binary.LittleEndian.Uint32(ft[24:]) != crc(ft[:24]) {
		return nil, base.CorruptionErrorf("blob: file %s: bad footer", fileNum)
	}
	st := Stats{
		Count:       binary.LittleEndian.Uint64(ft[0:]),
		RecordBytes: binary.LittleEndian.Uint64(ft[16:]),
		Size:        uint64(size),
	}
	if dataEnd := binary.LittleEndian.Uint64(ft[8:]); dataEnd != uint64(size)-FooterLen || st.RecordBytes != dataEnd-HeaderLen ||
		st.Count*RecordOverhead > st.RecordBytes {
		return nil, base.CorruptionErrorf("blob: file %s: footer disagrees with the file's size %d", fileNum, size)
	}
	return &Reader{f: f, fileNum: fileNum, compression: Compression(h[9]), stats: st}, nil
}

// Compression returns the compression of the file's values.
func (r *Reader) Compression() Compression { return r.compression }

// Stats returns the statistics recorded in the file's footer.
func (r *Reader) Stats() Stats { return r.stats }

// FileNum returns the file's number.
func (r *Reader) FileNum() base.FileNum { return r.fileNum }

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// ReadRecord reads the record that x locates into buf, which must be
// exactly x.Len bytes long, and verifies it (see VerifyRecord) and that
// its value is stored as x.Compression says (see RecordCompression). It
// returns the stored value's position in buf: compressed if x.Compression
// is not CompressionNone (see DecodeValue).
func (r *Reader) ReadRecord(buf []byte, x Index, key []byte) (valStart, valLen int, err error) {
	if x.FileNum != r.fileNum {
		return 0, 0, fmt.Errorf("blob: index for file %s given to reader of file %s", x.FileNum, r.fileNum)
	}
	if err := r.CheckCompression(x); err != nil {
		return 0, 0, err
	}
	if uint64(len(buf)) != x.Len {
		panic("blob: ReadRecord buffer of the wrong length")
	}
	if x.Offset < HeaderLen || x.Offset+x.Len > HeaderLen+r.stats.RecordBytes || x.Offset+x.Len < x.Offset {
		return 0, 0, base.CorruptionErrorf("blob: file %s: record [%d, +%d) outside the data", r.fileNum, x.Offset, x.Len)
	}
	if _, err := r.f.ReadAt(buf, int64(x.Offset)); err != nil {
		if errors.Is(err, io.EOF) {
			err = base.MarkCorruption(err)
		}
		return 0, 0, fmt.Errorf("blob: file %s: reading record at %d: %w", r.fileNum, x.Offset, err)
	}
	valStart, valLen, err = VerifyRecord(buf, key)
	if err == nil {
		err = CheckRecordCompression(r.compression, x, buf)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("blob: file %s: record at %d: %w", r.fileNum, x.Offset, err)
	}
	return valStart, valLen, nil
}

// CheckCompression reports, as corruption, an index whose compression
// no record of the file can have (the file's, or none for a record
// stored raw): its record would be decoded wrongly. Once the record is
// read, CheckRecordCompression checks it exactly.
func (r *Reader) CheckCompression(x Index) error {
	if x.Compression != r.compression && x.Compression != CompressionNone {
		return base.CorruptionErrorf("blob: file %s holds %s values, index says %s", r.fileNum, r.compression, x.Compression)
	}
	return nil
}

// RecordCompression returns the compression of the stored value of rec,
// a verified record of a file of compression file: the file's, or none if
// the record is stored raw. A record of an uncompressed file that claims
// to be raw is corruption (no writer sets the flag there).
func RecordCompression(file Compression, rec []byte) (Compression, error) {
	if binary.LittleEndian.Uint32(rec[4:])&rawValueFlag == 0 {
		return file, nil
	}
	if file == CompressionNone {
		return 0, base.CorruptionErrorf("blob: raw record in an uncompressed file")
	}
	return CompressionNone, nil
}

// CheckRecordCompression reports, as corruption, a verified record rec
// of a file of compression file whose value is not stored as its index x
// says: decoding it as x says would return a wrong value.
func CheckRecordCompression(file Compression, x Index, rec []byte) error {
	c, err := RecordCompression(file, rec)
	if err != nil {
		return err
	}
	if c != x.Compression {
		return base.CorruptionErrorf("blob: record's value is stored %s, index says %s", c, x.Compression)
	}
	return nil
}

// recordLens returns the key and stored value lengths of a record's
// header, without the raw flag.
func recordLens(rec []byte) (kl, vl uint64) {
	return uint64(binary.LittleEndian.Uint32(rec[0:])), uint64(binary.LittleEndian.Uint32(rec[4:]) &^ rawValueFlag)
}

// VerifyRecord checks that rec is one whole record, that its CRC matches,
// and, when key is not nil, that it was written under key. It returns the
// stored value's position in rec. Errors are corruption errors; it never
// panics.
func VerifyRecord(rec []byte, key []byte) (valStart, valLen int, err error) {
	if len(rec) < RecordOverhead {
		return 0, 0, base.CorruptionErrorf("blob: record of %d bytes", len(rec))
	}
	kl, vl := recordLens(rec)
	if RecordOverhead+kl+vl != uint64(len(rec)) {
		return 0, 0, base.CorruptionErrorf("blob: record lengths %d+%d do not fill %d bytes", kl, vl, len(rec))
	}
	body := len(rec) - RecordTrailer
	if binary.LittleEndian.Uint32(rec[body:]) != crc(rec[:body]) {
		return 0, 0, base.CorruptionErrorf("blob: record checksum mismatch")
	}
	k := rec[RecordHeaderLen : RecordHeaderLen+kl]
	if key != nil && string(k) != string(key) {
		return 0, 0, base.CorruptionErrorf("blob: record holds key %q, index was for %q", truncate(k), truncate(key))
	}
	return RecordHeaderLen + int(kl), int(vl), nil
}

func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// RecordKey returns the key of a verified record (or of a decoded one,
// see DecodeRecord).
func RecordKey(rec []byte) []byte {
	kl := binary.LittleEndian.Uint32(rec[0:])
	return rec[RecordHeaderLen : RecordHeaderLen+kl]
}

// StoredLen returns the length the record had in its file, from its
// lengths: the Len of the index that locates it. It is len(rec) for a
// record as stored, and also holds for a decoded one (see DecodeRecord).
func StoredLen(rec []byte) uint64 {
	kl, vl := recordLens(rec)
	return RecordOverhead + kl + vl
}

// ValueLen returns the length of the value that stored, a stored value of
// compression c, decodes to. Errors are corruption errors.
func ValueLen(c Compression, stored []byte) (int, error) {
	switch c {
	case CompressionNone:
		return len(stored), nil
	case CompressionSnappy:
		n, err := snappy.DecodedLen(stored)
		if err != nil || n < 0 || n > maxRecordLen || n > maxSnappyExpansion*len(stored) {
			return 0, base.CorruptionErrorf("blob: bad snappy value length (%d from %d bytes): %v", n, len(stored), err)
		}
		return n, nil
	}
	return 0, base.CorruptionErrorf("blob: unknown compression %d", c)
}

// DecodeValue decodes stored, a stored value of compression c, into dst,
// which must be ValueLen bytes long. Errors are corruption errors: the
// CRC covers the stored bytes, so a value that passed it and does not
// decode was written wrong.
func DecodeValue(c Compression, dst, stored []byte) error {
	switch c {
	case CompressionNone:
		if len(dst) != len(stored) {
			panic("blob: DecodeValue buffer of the wrong length")
		}
		copy(dst, stored)
		return nil
	case CompressionSnappy:
		out, err := snappy.Decode(dst, stored)
		if err != nil || len(out) != len(dst) || (len(out) > 0 && &out[0] != &dst[0]) {
			return base.CorruptionErrorf("blob: snappy value does not decode to its %d bytes: %v", len(dst), err)
		}
		return nil
	}
	return base.CorruptionErrorf("blob: unknown compression %d", c)
}

// DecodedRecordLen returns the length of the decoded form of rec, a
// verified record of compression c (see DecodeRecord).
func DecodedRecordLen(c Compression, rec []byte) (int, error) {
	vs, vl := valuePos(rec)
	n, err := ValueLen(c, rec[vs:vs+vl])
	if err != nil {
		return 0, err
	}
	return vs + n, nil
}

// DecodeRecord writes into dst, DecodedRecordLen bytes long, the decoded
// form of rec, a verified record of compression c: its lengths and key as
// stored, then the decoded value (no CRC: it was checked). RecordKey and
// StoredLen work on it as on rec. It returns the value's position in dst.
// The blob cache holds records of compressed files this way.
func DecodeRecord(c Compression, dst, rec []byte) (valStart, valLen int, err error) {
	vs, vl := valuePos(rec)
	copy(dst, rec[:vs])
	if err := DecodeValue(c, dst[vs:], rec[vs:vs+vl]); err != nil {
		return 0, 0, err
	}
	return vs, len(dst) - vs, nil
}

// valuePos returns the stored value's position in a verified record.
func valuePos(rec []byte) (valStart, valLen int) {
	kl, vl := recordLens(rec)
	return RecordHeaderLen + int(kl), int(vl)
}

// ReadValue verifies rec, a record of a file of compression file, as
// VerifyRecord does and returns its value and how it was stored (see
// RecordCompression). A compressed value is decoded into scratch, grown
// as needed (the caller keeps it for the next call); one stored raw is
// a view of rec. Errors are corruption errors; it never panics.
func ReadValue(file Compression, rec, key []byte, scratch *[]byte) ([]byte, Compression, error) {
	vs, vl, err := VerifyRecord(rec, key)
	if err != nil {
		return nil, 0, err
	}
	c, err := RecordCompression(file, rec)
	if err != nil {
		return nil, 0, err
	}
	stored := rec[vs : vs+vl]
	if c == CompressionNone {
		return stored, c, nil
	}
	n, err := ValueLen(c, stored)
	if err != nil {
		return nil, 0, err
	}
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	v := (*scratch)[:n]
	if err := DecodeValue(c, v, stored); err != nil {
		return nil, 0, err
	}
	return v, c, nil
}

// ReadAt reads len(p) bytes of the file at off; readahead buffers use it.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }

// DataEnd returns the offset at which the file's records end.
func (r *Reader) DataEnd() uint64 { return HeaderLen + r.stats.RecordBytes }

// Scan calls fn for every record of the file, in order, with its index,
// its key and its verified, decoded value (valid only during the call).
// Blob GC uses it.
func (r *Reader) Scan(fn func(x Index, key, value []byte) error) error {
	const chunk = 1 << 20
	buf := make([]byte, 0, chunk)
	var scratch []byte
	off := uint64(HeaderLen)
	end := r.DataEnd()
	bufStart := off
	for off < end {
		// Make sure the record header is in buf.
		need := func(n uint64) error {
			if off+n > end {
				return base.CorruptionErrorf("blob: file %s: record at %d runs past the data", r.fileNum, off)
			}
			if off+n <= bufStart+uint64(len(buf)) {
				return nil
			}
			want := max(n, chunk)
			want = min(want, end-off)
			if uint64(cap(buf)) < want {
				buf = make([]byte, want)
			}
			buf = buf[:want]
			if _, err := r.f.ReadAt(buf, int64(off)); err != nil {
				return fmt.Errorf("blob: file %s: %w", r.fileNum, err)
			}
			bufStart = off
			return nil
		}
		if err := need(RecordHeaderLen); err != nil {
			return err
		}
		h := buf[off-bufStart:]
		n := StoredLen(h)
		if err := need(n); err != nil {
			return err
		}
		rec := buf[off-bufStart : off-bufStart+n]
		value, c, err := ReadValue(r.compression, rec, nil, &scratch)
		if err != nil {
			return fmt.Errorf("blob: file %s: record at %d: %w", r.fileNum, off, err)
		}
		x := Index{Compression: c, FileNum: r.fileNum, Offset: off, Len: n}
		if err := fn(x, RecordKey(rec), value); err != nil {
			return err
		}
		off += n
	}
	return nil
}
