package base

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// SeqNum is a sequence number. Every write in the engine gets one; a snapshot
// is a sequence number, and it sees exactly the writes numbered below it.
type SeqNum uint64

// SeqNumMax is the largest sequence number a write can have. Sequence numbers
// occupy the upper 56 bits of an internal key's trailer.
const SeqNumMax SeqNum = 1<<56 - 1

// Kind says what an internal key records.
type Kind uint8

// The kinds of internal key. Their numeric values are part of the on-disk
// formats (WAL batches and SSTs); never renumber them.
const (
	KindDelete      Kind = 0
	KindSet         Kind = 1
	KindRangeDelete Kind = 2
	// KindBlobIndex marks a value that is a reference into a blob file
	// (key-value separation). Reserved for lsm/blob.
	KindBlobIndex Kind = 3

	// KindMax is the largest kind. A search key built with SeqNumMax and
	// KindMax sorts before every other internal key with the same user key.
	KindMax Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindDelete:
		return "DEL"
	case KindSet:
		return "SET"
	case KindRangeDelete:
		return "RANGEDEL"
	case KindBlobIndex:
		return "BLOBIDX"
	}
	return fmt.Sprintf("KIND(%d)", uint8(k))
}

// TrailerLen is the length of the trailer that follows the user key in an
// encoded internal key.
const TrailerLen = 8

// Trailer packs a sequence number and a kind: seq<<8 | kind.
type Trailer uint64

// MakeTrailer packs seq and kind.
func MakeTrailer(seq SeqNum, kind Kind) Trailer { return Trailer(uint64(seq)<<8 | uint64(kind)) }

// SeqNum returns the trailer's sequence number.
func (t Trailer) SeqNum() SeqNum { return SeqNum(t >> 8) }

// Kind returns the trailer's kind.
func (t Trailer) Kind() Kind { return Kind(t & 0xff) }

// An encoded internal key is laid out as
//
//	+-----------------------+---------------------------------+
//	| user key (n bytes)    | trailer: seq<<8|kind (8 bytes LE)|
//	+-----------------------+---------------------------------+
//
// Internal keys sort by user key ascending, then by trailer descending, so
// the newest version of a user key comes first.

// MakeInternalKey appends the encoding of (ukey, seq, kind) to dst.
func MakeInternalKey(dst, ukey []byte, seq SeqNum, kind Kind) []byte {
	dst = append(dst, ukey...)
	return binary.LittleEndian.AppendUint64(dst, uint64(MakeTrailer(seq, kind)))
}

// MakeSearchKey returns the internal key that sorts before every entry of
// ukey visible at snapshot seq (entries with sequence number < seq).
func MakeSearchKey(dst, ukey []byte, seq SeqNum) []byte {
	// Entries visible at snapshot seq have sequence numbers <= seq-1; the
	// trailer (seq-1, KindMax) is the largest of those.
	if seq == 0 {
		return MakeInternalKey(dst, ukey, 0, 0)
	}
	return MakeInternalKey(dst, ukey, seq-1, KindMax)
}

// MakeRangeDeleteSentinel returns the internal key used as the exclusive
// upper bound of a file whose last entry is a range tombstone ending at
// ukey: it sorts before every real entry of ukey.
func MakeRangeDeleteSentinel(dst, ukey []byte) []byte {
	return MakeInternalKey(dst, ukey, SeqNumMax, KindRangeDelete)
}

// IsRangeDeleteSentinel reports whether ikey is such a sentinel.
func IsRangeDeleteSentinel(ikey []byte) bool {
	if len(ikey) < TrailerLen {
		return false
	}
	return DecodeTrailer(ikey) == MakeTrailer(SeqNumMax, KindRangeDelete)
}

// ValidInternalKey reports whether ikey is long enough to hold a trailer and
// has a known kind.
func ValidInternalKey(ikey []byte) bool {
	return len(ikey) >= TrailerLen && DecodeTrailer(ikey).Kind() <= KindMax
}

// UserKey returns the user key of an encoded internal key. ikey must be
// valid.
func UserKey(ikey []byte) []byte { return ikey[:len(ikey)-TrailerLen] }

// DecodeTrailer returns the trailer of an encoded internal key. ikey must be
// valid.
func DecodeTrailer(ikey []byte) Trailer {
	return Trailer(binary.LittleEndian.Uint64(ikey[len(ikey)-TrailerLen:]))
}

// ParseInternalKey splits an encoded internal key. ok is false when ikey is
// too short or its kind is unknown.
func ParseInternalKey(ikey []byte) (ukey []byte, seq SeqNum, kind Kind, ok bool) {
	if !ValidInternalKey(ikey) {
		return nil, 0, 0, false
	}
	t := DecodeTrailer(ikey)
	return UserKey(ikey), t.SeqNum(), t.Kind(), true
}

// InternalCompare orders encoded internal keys: user key ascending, trailer
// descending. Keys too short to hold a trailer sort first, by bytes, so the
// order stays total on corrupt input.
func InternalCompare(a, b []byte) int {
	if len(a) < TrailerLen || len(b) < TrailerLen {
		switch {
		case len(a) < TrailerLen && len(b) < TrailerLen:
			return bytes.Compare(a, b)
		case len(a) < TrailerLen:
			return -1
		default:
			return 1
		}
	}
	if c := bytes.Compare(UserKey(a), UserKey(b)); c != 0 {
		return c
	}
	ta, tb := DecodeTrailer(a), DecodeTrailer(b)
	switch {
	case ta > tb:
		return -1
	case ta < tb:
		return 1
	}
	return 0
}

// FormatInternalKey renders ikey for messages and test output.
func FormatInternalKey(ikey []byte) string {
	ukey, seq, kind, ok := ParseInternalKey(ikey)
	if !ok {
		return fmt.Sprintf("invalid(%q)", ikey)
	}
	return fmt.Sprintf("%q#%d,%s", ukey, seq, kind)
}
