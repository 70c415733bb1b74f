package sst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

const (
	// FormatVersion is the table format version this package writes and
	// the only one it reads.
	FormatVersion uint32 = 1

	// magic ends every table: the bytes "cairnSST".
	magic uint64 = 0x5453536e72696163

	// footerLen is the size of the footer of every format version.
	footerLen = 56
	// footerHandlesLen is the space of the two padded block handles at the
	// start of the footer.
	footerHandlesLen = 2 * maxHandleLen
	// maxHandleLen is the longest encoding of a block handle: two
	// varint-encoded uint64s.
	maxHandleLen = 2 * binary.MaxVarintLen64

	// blockTrailerLen is the size of the trailer after each block:
	// a compression type byte and a CRC32C.
	blockTrailerLen = 5

	// maxBlockLen bounds the uncompressed size of any block. A block
	// claiming more is corrupt; the writer refuses entries that would
	// need one.
	maxBlockLen = 1 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrUnknownFormatVersion is wrapped by the error NewReader returns for a
// table whose footer is intact but names a format version this build cannot
// read. It is not a corruption: the file may come from a newer build.
var ErrUnknownFormatVersion = errors.New("sst: unknown table format version")

// Compression names a block compression algorithm. Its value is the
// compression type byte of the block trailer.
type Compression uint8

// The compression algorithms.
const (
	NoCompression     Compression = 0
	SnappyCompression Compression = 1
	ZstdCompression   Compression = 2
)

func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case SnappyCompression:
		return "snappy"
	case ZstdCompression:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// blockHandle locates a block: its contents start at offset and are length
// bytes long, followed by the blockTrailerLen-byte trailer.
type blockHandle struct {
	offset, length uint64
}

// end returns the offset just past the block's trailer.
func (h blockHandle) end() uint64 { return h.offset + h.length + blockTrailerLen }

func appendHandle(dst []byte, h blockHandle) []byte {
	dst = binary.AppendUvarint(dst, h.offset)
	return binary.AppendUvarint(dst, h.length)
}

// decodeHandle decodes a handle at the start of src and returns the number
// of bytes it used; n <= 0 if src does not start with a valid handle.
func decodeHandle(src []byte) (h blockHandle, n int) {
	off, n1 := binary.Uvarint(src)
	if n1 <= 0 {
		return blockHandle{}, 0
	}
	length, n2 := binary.Uvarint(src[n1:])
	if n2 <= 0 {
		return blockHandle{}, 0
	}
	return blockHandle{offset: off, length: length}, n1 + n2
}

// decodeHandleExact decodes src, which must hold exactly one handle of a
// block that lies within limit bytes of the file.
func decodeHandleExact(src []byte, limit uint64, what string) (blockHandle, error) {
	h, n := decodeHandle(src)
	if n <= 0 || n != len(src) {
		return blockHandle{}, base.CorruptionErrorf("sst: malformed %s handle", what)
	}
	if h.length > maxBlockLen || h.offset > limit || h.length+blockTrailerLen > limit-h.offset {
		return blockHandle{}, base.CorruptionErrorf("sst: %s handle (%d, %d) out of the file's %d bytes", what, h.offset, h.length, limit)
	}
	return h, nil
}

// footer is the decoded fixed-size tail of a table.
type footer struct {
	metaindex, index blockHandle
}

func (f footer) encode() []byte {
	buf := make([]byte, footerLen)
	// The handles take at most footerHandlesLen bytes; the rest is zero
	// padding.
	copy(buf[:footerHandlesLen], appendHandle(appendHandle(nil, f.metaindex), f.index))
	binary.LittleEndian.PutUint32(buf[footerHandlesLen:], FormatVersion)
	binary.LittleEndian.PutUint32(buf[footerHandlesLen+4:], crc32.Checksum(buf[:footerHandlesLen+4], crcTable))
	binary.LittleEndian.PutUint64(buf[footerHandlesLen+8:], magic)
	return buf
}

// decodeFooter parses the last footerLen bytes of a file of fileSize bytes.
// The checks run in an order that keeps each error meaningful: a wrong magic
// says the file is no table (or is truncated); a bad checksum says the footer
// is damaged; only an intact footer can name an unknown version.
func decodeFooter(buf []byte, fileSize uint64) (footer, error) {
	if m := binary.LittleEndian.Uint64(buf[footerHandlesLen+8:]); m != magic {
		return footer{}, base.CorruptionErrorf("sst: bad magic number %#x (not a table, or truncated)", m)
	}
	want := binary.LittleEndian.Uint32(buf[footerHandlesLen+4:])
	if got := crc32.Checksum(buf[:footerHandlesLen+4], crcTable); got != want {
		return footer{}, base.CorruptionErrorf("sst: footer checksum mismatch (%#x, want %#x)", got, want)
	}
	if v := binary.LittleEndian.Uint32(buf[footerHandlesLen:]); v != FormatVersion {
		return footer{}, fmt.Errorf("%w %d (this build reads version %d)", ErrUnknownFormatVersion, v, FormatVersion)
	}
	limit := fileSize - footerLen
	var f footer
	var n1, n2 int
	f.metaindex, n1 = decodeHandle(buf[:footerHandlesLen])
	if n1 > 0 {
		f.index, n2 = decodeHandle(buf[n1:footerHandlesLen])
	}
	if n1 <= 0 || n2 <= 0 {
		return footer{}, base.CorruptionErrorf("sst: malformed footer handles")
	}
	for _, h := range []blockHandle{f.metaindex, f.index} {
		if h.length > maxBlockLen || h.offset > limit || h.length+blockTrailerLen > limit-h.offset {
			return footer{}, base.CorruptionErrorf("sst: footer handle (%d, %d) out of the file's %d bytes", h.offset, h.length, limit)
		}
	}
	return f, nil
}

// blockChecksum is the CRC32C of a block's contents and its type byte.
func blockChecksum(contents []byte, typ byte) uint32 {
	crc := crc32.Update(0, crcTable, contents)
	return crc32.Update(crc, crcTable, []byte{typ})
}

var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil)
		if err != nil {
			panic(fmt.Sprintf("sst: zstd encoder: %v", err)) // Only bad options fail.
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(maxBlockLen))
		if err != nil {
			panic(fmt.Sprintf("sst: zstd decoder: %v", err)) // Only bad options fail.
		}
		return d
	})
)

// compressBlock appends the compressed form of raw to dst[:0]: the raw
// length as a uvarint, then the codec's output. ok is false when compression
// does not save at least 1/8 of the size, and the block must be stored raw.
func compressBlock(dst, raw []byte, c Compression) (out []byte, ok bool) {
	dst = binary.AppendUvarint(dst[:0], uint64(len(raw)))
	switch c {
	case SnappyCompression:
		n := len(dst)
		need := n + snappy.MaxEncodedLen(len(raw))
		if cap(dst) < need {
			d := make([]byte, n, need)
			copy(d, dst)
			dst = d
		}
		// s2's fastest Snappy-compatible encoder (snappy.Encode of this
		// package is s2's "better" mode: about twice the CPU for a few
		// percent of size); the output is plain Snappy either way.
		enc := s2.EncodeSnappy(dst[n:need], raw)
		dst = dst[:n+len(enc)]
	case ZstdCompression:
		dst = zstdEncoder().EncodeAll(raw, dst)
	default:
		return dst, false
	}
	return dst, len(dst) < len(raw)-len(raw)/8
}

// decompressBlock decodes the contents of a block stored with compression
// type typ into a new slice.
func decompressBlock(typ byte, contents []byte) ([]byte, error) {
	rawLen, src, err := decompressedLen(typ, contents)
	if err != nil {
		return nil, err
	}
	out := make([]byte, rawLen)
	if err := decompressInto(typ, src, out); err != nil {
		return nil, err
	}
	return out, nil
}

// decompressedLen returns the uncompressed length of the contents of a
// block stored with compression type typ, and the codec's input. It checks
// the codec's own length header before the caller allocates, so that a
// damaged length cannot make it allocate more than the codec will write.
func decompressedLen(typ byte, contents []byte) (int, []byte, error) {
	rawLen, n := binary.Uvarint(contents)
	if n <= 0 || rawLen > maxBlockLen {
		return 0, nil, base.CorruptionErrorf("sst: bad uncompressed length of a %s block", Compression(typ))
	}
	src := contents[n:]
	switch Compression(typ) {
	case SnappyCompression:
		if l, err := snappy.DecodedLen(src); err != nil || uint64(l) != rawLen {
			return 0, nil, base.CorruptionErrorf("sst: snappy block length mismatch")
		}
	case ZstdCompression:
		var hdr zstd.Header
		if err := hdr.Decode(src); err != nil || (hdr.HasFCS && hdr.FrameContentSize != rawLen) {
			return 0, nil, base.CorruptionErrorf("sst: zstd block length mismatch")
		}
	default:
		return 0, nil, base.CorruptionErrorf("sst: unknown block compression type %d", typ)
	}
	return int(rawLen), src, nil
}

// decompressInto decodes src, the codec input decompressedLen returned,
// into dst, whose length is the uncompressed length. An output of another
// length is corruption.
func decompressInto(typ byte, src, dst []byte) error {
	switch Compression(typ) {
	case SnappyCompression:
		out, err := snappy.Decode(dst, src)
		if err != nil || len(out) != len(dst) {
			return base.CorruptionErrorf("sst: snappy decode: %v", err)
		}
		if len(out) > 0 && &out[0] != &dst[0] {
			return base.CorruptionErrorf("sst: snappy decoded past the block's length")
		}
		return nil
	case ZstdCompression:
		out, err := zstdDecoder().DecodeAll(src, dst[:0:len(dst)])
		if err != nil || len(out) != len(dst) {
			return base.CorruptionErrorf("sst: zstd decode: %v", err)
		}
		if len(out) > 0 && &out[0] != &dst[0] {
			// Cannot happen with len(out) == cap(dst): the decoder
			// appended in place. Checked, not trusted.
			copy(dst, out)
		}
		return nil
	}
	return base.CorruptionErrorf("sst: unknown block compression type %d", typ)
}
