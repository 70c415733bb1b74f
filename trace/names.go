package trace

import (
	"fmt"
	"strings"
)

var blockTypeNames = [...]string{
	BlockData:              "data",
	BlockIndex:             "index",
	BlockFilter:            "filter",
	BlockRangeDel:          "range-del",
	BlockUncompressionDict: "uncompression-dict",
	BlockBlob:              "blob",
}

var callerNames = [...]string{
	CallerGet:        "get",
	CallerMultiGet:   "multiget",
	CallerIterator:   "iterator",
	CallerCompaction: "compaction",
	CallerFlush:      "flush",
	CallerUnknown:    "unknown",
}

// Valid reports whether t is one of the defined block types.
func (t BlockType) Valid() bool { return t >= BlockData && t <= BlockBlob }

// String returns the block type's name in the human-readable format
// ("data", "index", "filter", "range-del", "uncompression-dict", "blob").
func (t BlockType) String() string {
	if t.Valid() {
		return blockTypeNames[t]
	}
	return fmt.Sprintf("BlockType(%d)", uint8(t))
}

// ParseBlockType is the inverse of BlockType.String.
func ParseBlockType(s string) (BlockType, error) {
	for t := BlockData; t <= BlockBlob; t++ {
		if strings.EqualFold(s, blockTypeNames[t]) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("trace: unknown block type %q", s)
}

// Valid reports whether c is one of the defined callers.
func (c Caller) Valid() bool { return c >= CallerGet && c <= CallerUnknown }

// String returns the caller's name in the human-readable format ("get",
// "multiget", "iterator", "compaction", "flush", "unknown").
func (c Caller) String() string {
	if c.Valid() {
		return callerNames[c]
	}
	return fmt.Sprintf("Caller(%d)", uint8(c))
}

// ParseCaller is the inverse of Caller.String.
func ParseCaller(s string) (Caller, error) {
	for c := CallerGet; c <= CallerUnknown; c++ {
		if strings.EqualFold(s, callerNames[c]) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("trace: unknown caller %q", s)
}
