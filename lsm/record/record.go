package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	// BlockSize is the size of a block of the log.
	BlockSize = 32 << 10
	// HeaderSize is the size of a fragment header.
	HeaderSize = 7
)

// Fragment types.
const (
	zeroType   byte = 0
	fullType   byte = 1
	firstType  byte = 2
	middleType byte = 3
	lastType   byte = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// typeCRC[t] is the unmasked CRC-32C of the single byte t.
var typeCRC = func() (c [lastType + 1]uint32) {
	for t := range c {
		c[t] = crc32.Update(0, crcTable, []byte{byte(t)})
	}
	return c
}()

// fragmentChecksum returns the masked CRC-32C of typ followed by payload.
// REQUIRES: typ <= lastType.
func fragmentChecksum(typ byte, payload []byte) uint32 {
	c := crc32.Update(typeCRC[typ], crcTable, payload)
	return (c>>15 | c<<17) + 0xa282ead8
}

// putHeader writes a fragment header into h.
func putHeader(h []byte, typ byte, payload []byte) {
	binary.LittleEndian.PutUint32(h[0:4], fragmentChecksum(typ, payload))
	binary.LittleEndian.PutUint16(h[4:6], uint16(len(payload)))
	h[6] = typ
}

// recordStartAt reports whether block[q:] holds a fragment that starts a
// record (FULL or FIRST), whose length fits block and whose checksum
// matches. block is one block of the log, up to its end in the input.
func recordStartAt(block []byte, q int) bool {
	if q+HeaderSize > len(block) {
		return false
	}
	typ := block[q+6]
	if typ != fullType && typ != firstType {
		return false
	}
	end := q + HeaderSize + int(binary.LittleEndian.Uint16(block[q+4:q+6]))
	if end > len(block) {
		return false
	}
	return binary.LittleEndian.Uint32(block[q:q+4]) == fragmentChecksum(typ, block[q+HeaderSize:end])
}

// CorruptionError describes damage in the middle of a log: a bad fragment
// (or an incomplete record) followed by a valid record. The Reader returns
// it marked so that base.IsCorruption is true; errors.As extracts it.
type CorruptionError struct {
	// Offset is where the damage starts: the start of the damaged or
	// incomplete record.
	Offset int64
	// NextRecord is the offset of the first valid record start found after
	// the damage.
	NextRecord int64
	// Reason says what was wrong at Offset.
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("record: %s at offset %d, followed by a valid record at offset %d: corruption in the middle of the log",
		e.Reason, e.Offset, e.NextRecord)
}
