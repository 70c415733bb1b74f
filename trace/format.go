package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The binary trace format. All integers are little-endian; uvarint is
// encoding/binary's unsigned varint, varint its zig-zag signed one.
//
//	file    := header record*
//	header  := magic[8] = "CAIRNBCT"
//	           formatVersion u32 (= 1)
//	           majorVersion u32 | minorVersion u32
//	           startTimestamp u64 (µs since the Unix epoch)
//	           crc u32 (CRC-32C of the 28 bytes before it)
//	record  := length u32 | crc u32 (CRC-32C of payload) | payload[length]
//	payload := accessTimestamp uvarint
//	           blockType u8 | caller u8 | flags u8
//	           blockSize uvarint
//	           blockKey (uvarint length, bytes)
//	           cfID uvarint | cfName (uvarint length, bytes)
//	           level varint | fileNumber uvarint
//	           [caller is Get or MultiGet:
//	             getID uvarint | referencedKey (uvarint length, bytes)
//	             [blockType is data: numKeysInBlock uvarint | referencedDataSize uvarint]]
//	flags   := bit 0 cache hit | bit 1 no-insert | bit 2 pinned
//	           | bit 3 from user snapshot | bit 4 referenced key exists in block
//
// Bits 3 and 4 are written only where their fields are (Get/MultiGet, and
// data blocks for bit 4). A payload must be consumed exactly. The file ends
// after a whole record: end of file inside a record, a length over
// maxPayloadLen, a checksum mismatch or a malformed payload is corruption
// (ErrCorrupt); the Tracer writes a record whole or not at all, so a trace
// it finished (EndTrace, or its size limit) always ends cleanly.

const (
	magic         = "CAIRNBCT"
	formatVersion = 1
	headerLen     = 8 + 4 + 4 + 4 + 8 + 4
	recordHdrLen  = 8
	// maxPayloadLen bounds a record: keys are at most a few KiB.
	maxPayloadLen = 1 << 20
)

const (
	flagHit = 1 << iota
	flagNoInsert
	flagPinned
	flagSnapshot
	flagKeyExists
	flagsKnown = flagHit | flagNoInsert | flagPinned | flagSnapshot | flagKeyExists
)

// MajorVersion and MinorVersion are the engine version a Tracer writes in
// the header of the traces it starts. Minor changes when what block keys
// and sizes mean changes (the engine's block layout or caching).
const (
	MajorVersion uint32 = 0
	MinorVersion uint32 = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendHeader(dst []byte, h Header) []byte {
	start := len(dst)
	dst = append(dst, magic...)
	dst = binary.LittleEndian.AppendUint32(dst, formatVersion)
	dst = binary.LittleEndian.AppendUint32(dst, h.MajorVersion)
	dst = binary.LittleEndian.AppendUint32(dst, h.MinorVersion)
	dst = binary.LittleEndian.AppendUint64(dst, h.StartTimestamp)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func decodeHeader(b []byte) (Header, error) {
	if len(b) != headerLen || string(b[:8]) != magic {
		return Header{}, corruptf("not a binary block-cache trace (bad magic)")
	}
	if got, want := crc32.Checksum(b[:headerLen-4], castagnoli), binary.LittleEndian.Uint32(b[headerLen-4:]); got != want {
		return Header{}, corruptf("header checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return Header{}, corruptf("unknown trace format version %d", v)
	}
	return Header{
		MajorVersion:   binary.LittleEndian.Uint32(b[12:]),
		MinorVersion:   binary.LittleEndian.Uint32(b[16:]),
		StartTimestamp: binary.LittleEndian.Uint64(b[20:]),
	}, nil
}

// appendRecord appends r framed (length, checksum, payload) to dst.
func appendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = appendUnsealed(dst, r)
	sealRecord(dst[start:])
	return dst
}

// appendUnsealed appends r framed, its checksum left for sealRecord: a
// buffer on the stack stays there, which crc32 (behind a function
// variable, so assumed to keep its argument) would prevent.
func appendUnsealed(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHdrLen)...)
	dst = binary.AppendUvarint(dst, r.AccessTimestamp)
	getFields := r.Caller.IsGet()
	dataFields := getFields && r.Type == BlockData
	var flags byte
	if r.CacheHit {
		flags |= flagHit
	}
	if r.NoInsert {
		flags |= flagNoInsert
	}
	if r.Pinned {
		flags |= flagPinned
	}
	if getFields && r.FromUserSnapshot {
		flags |= flagSnapshot
	}
	if dataFields && r.ReferencedKeyExists {
		flags |= flagKeyExists
	}
	dst = append(dst, byte(r.Type), byte(r.Caller), flags)
	dst = binary.AppendUvarint(dst, r.BlockSize)
	dst = appendBytes(dst, r.BlockKey)
	dst = binary.AppendUvarint(dst, uint64(r.CFID))
	dst = appendBytes(dst, []byte(r.CFName))
	dst = binary.AppendVarint(dst, int64(r.Level))
	dst = binary.AppendUvarint(dst, r.FileNumber)
	if getFields {
		dst = binary.AppendUvarint(dst, r.GetID)
		dst = appendBytes(dst, r.ReferencedKey)
		if dataFields {
			dst = binary.AppendUvarint(dst, r.NumKeysInBlock)
			dst = binary.AppendUvarint(dst, r.ReferencedDataSize)
		}
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-recordHdrLen))
	return dst
}

// sealRecord sets the checksum of rec, one record appendUnsealed framed.
func sealRecord(rec []byte) {
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[recordHdrLen:], castagnoli))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decodePayload parses a record's payload (checksum already verified).
// The record's byte slices are fresh copies.
func decodePayload(p []byte) (Record, error) {
	d := decoder{b: p}
	var r Record
	r.AccessTimestamp = d.uvarint()
	r.Type, r.Caller = BlockType(d.byte()), Caller(d.byte())
	flags := d.byte()
	r.BlockSize = d.uvarint()
	r.BlockKey = d.bytes()
	cf := d.uvarint()
	r.CFID = uint32(cf)
	r.CFName = string(d.bytes())
	level := d.varint()
	r.Level = int32(level)
	r.FileNumber = d.uvarint()
	if d.err == nil && r.Caller.IsGet() {
		r.GetID = d.uvarint()
		r.ReferencedKey = d.bytes()
		r.FromUserSnapshot = flags&flagSnapshot != 0
		if r.Type == BlockData {
			r.NumKeysInBlock = d.uvarint()
			r.ReferencedDataSize = d.uvarint()
			r.ReferencedKeyExists = flags&flagKeyExists != 0
		}
	}
	switch {
	case d.err != nil:
		return Record{}, d.err
	case len(d.b) != 0:
		return Record{}, corruptf("%d trailing bytes in a record", len(d.b))
	case !r.Type.Valid():
		return Record{}, corruptf("unknown block type %d", r.Type)
	case !r.Caller.Valid():
		return Record{}, corruptf("unknown caller %d", r.Caller)
	case flags&^flagsKnown != 0:
		return Record{}, corruptf("unknown flags %#x", flags)
	case cf > 1<<32-1 || level != int64(r.Level):
		return Record{}, corruptf("column family id or level out of range")
	}
	r.CacheHit = flags&flagHit != 0
	r.NoInsert = flags&flagNoInsert != 0
	r.Pinned = flags&flagPinned != 0
	return r, nil
}

// decoder reads a payload; its first error is sticky.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = corruptf("truncated or malformed %s in a record", what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length-prefixed bytes")
		return nil
	}
	out := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return out
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// IsCorrupt reports whether err marks a damaged or truncated trace.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

func leUint32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func crcChecksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
