package trace

import "errors"

// BlockType is the kind of block a cache access was for.
type BlockType uint8

const (
	BlockData BlockType = iota + 1
	BlockIndex
	BlockFilter
	BlockRangeDel
	BlockUncompressionDict
	BlockBlob
)

// Caller is the engine operation that looked the block up.
type Caller uint8

const (
	CallerGet Caller = iota + 1
	CallerMultiGet
	CallerIterator
	CallerCompaction
	CallerFlush // flush and prefetch (RocksDB's kPrefetch)
	CallerUnknown
)

// IsGet reports whether c is a point lookup (Get or MultiGet): the callers
// for which a record carries its get id and referenced-key fields.
func (c Caller) IsGet() bool { return c == CallerGet || c == CallerMultiGet }

// ReservedGetID is the get id of records whose caller is not a Get or
// MultiGet, and the value NextGetID returns while no trace runs.
const ReservedGetID uint64 = 0

// Record is one block-cache access.
//
// GetID and FromUserSnapshot are meaningful only when Caller.IsGet();
// ReferencedKey too. ReferencedKeyExists, NumKeysInBlock and
// ReferencedDataSize only when additionally Type == BlockData. Writers
// do not write the fields that are not meaningful, and readers return
// their zero values.
type Record struct {
	AccessTimestamp uint64 // microseconds since the Unix epoch
	Type            BlockType
	// BlockSize is what the cache charges for the block less its fixed
	// per-entry overhead: cap of a data block's buffer (lsm/cache charges
	// cap + cache.EntryOverhead), a blob record's length; for pinned
	// blocks their length.
	BlockSize  uint64
	BlockKey   []byte // identifies the block: see BlockKey helpers
	CFID       uint32
	CFName     string
	Caller     Caller
	Level      int32 // -1 when unknown (e.g. blob files)
	FileNumber uint64
	CacheHit   bool
	NoInsert   bool
	// Pinned marks an access to a block the table reader holds in memory
	// (cairn pins every table's index, filter and range-deletion blocks
	// at open): the block never enters the block cache, so a cache
	// simulator skips these records. See the package doc.
	Pinned bool

	GetID            uint64
	FromUserSnapshot bool
	ReferencedKey    []byte

	ReferencedKeyExists bool
	// NumKeysInBlock is the number of keys in the data block. cairn's
	// engine estimates the count of the block's last restart run from its
	// length (exact when the block's entries have one size), as RocksDB
	// estimates it from the restart points: counting cost a traced Get
	// more than the rest of its record.
	NumKeysInBlock     uint64
	ReferencedDataSize uint64
}

// Header opens every trace: the engine version that wrote it and when the
// trace started.
type Header struct {
	StartTimestamp uint64 // microseconds since the Unix epoch
	MajorVersion   uint32
	MinorVersion   uint32
}

// RecordReader reads a trace, binary or human-readable. Next returns
// io.EOF after the last record, and an error wrapping ErrCorrupt for a
// truncated or damaged trace; it never panics on file bytes.
type RecordReader interface {
	Header() Header
	Next() (Record, error)
}

// ErrCorrupt is wrapped by every error reading a damaged or truncated trace.
var ErrCorrupt = errors.New("trace: corrupt trace")
