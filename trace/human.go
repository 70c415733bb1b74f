package trace

import (
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The human-readable format is CSV (RFC 4180, encoding/csv), one line per
// record after two header lines:
//
//	#cairn-block-cache-trace-csv,1,<major>,<minor>,<start timestamp µs>
//	access_timestamp,block_type,block_size,block_key,cf_id,cf_name,caller,level,file_number,cache_hit,no_insert,pinned,get_id,from_user_snapshot,referenced_key,referenced_key_exists,num_keys_in_block,referenced_data_size,cache_id,block_offset
//	1764547200000000,data,4096,010a8020,0,default,get,1,10,0,0,0,7,0,6b6579,1,32,120,1,4096
//
// Block types and callers are by name (BlockType.String, Caller.String),
// booleans 0 or 1, keys in hex. cache_id and block_offset are decoded from
// the block key for people and tools like awk (empty when the key is not a
// cairn block key); the reader ignores them. Fields that are not
// meaningful for a record (see Record) are written as zero or empty.

const humanMagic = "#cairn-block-cache-trace-csv"

var humanColumns = []string{
	"access_timestamp", "block_type", "block_size", "block_key", "cf_id", "cf_name", "caller", "level",
	"file_number", "cache_hit", "no_insert", "pinned", "get_id", "from_user_snapshot", "referenced_key",
	"referenced_key_exists", "num_keys_in_block", "referenced_data_size", "cache_id", "block_offset",
}

// HumanWriter writes the human-readable trace format.
type HumanWriter struct {
	w   *csv.Writer
	row []string
}

// NewHumanWriter returns a HumanWriter writing to w, buffered: call Flush.
func NewHumanWriter(w io.Writer) *HumanWriter {
	return &HumanWriter{w: csv.NewWriter(w), row: make([]string, len(humanColumns))}
}

// WriteHeader writes the two header lines.
func (w *HumanWriter) WriteHeader(h Header) error {
	if err := w.w.Write([]string{humanMagic, "1", u64(uint64(h.MajorVersion)), u64(uint64(h.MinorVersion)), u64(h.StartTimestamp)}); err != nil {
		return err
	}
	return w.w.Write(humanColumns)
}

// WriteRecord writes r as one line.
func (w *HumanWriter) WriteRecord(r *Record) error {
	get, data := r.Caller.IsGet(), r.Caller.IsGet() && r.Type == BlockData
	row := w.row
	row[0] = u64(r.AccessTimestamp)
	row[1] = r.Type.String()
	row[2] = u64(r.BlockSize)
	row[3] = hex.EncodeToString(r.BlockKey)
	row[4] = u64(uint64(r.CFID))
	row[5] = r.CFName
	row[6] = r.Caller.String()
	row[7] = strconv.FormatInt(int64(r.Level), 10)
	row[8] = u64(r.FileNumber)
	row[9], row[10], row[11] = b01(r.CacheHit), b01(r.NoInsert), b01(r.Pinned)
	row[12], row[13], row[14] = "0", "0", ""
	row[15], row[16], row[17] = "0", "0", "0"
	if get {
		row[12], row[13], row[14] = u64(r.GetID), b01(r.FromUserSnapshot), hex.EncodeToString(r.ReferencedKey)
	}
	if data {
		row[15], row[16], row[17] = b01(r.ReferencedKeyExists), u64(r.NumKeysInBlock), u64(r.ReferencedDataSize)
	}
	row[18], row[19] = "", ""
	if id, _, off, err := BlockKeyParts(r.BlockKey); err == nil {
		row[18], row[19] = u64(id), u64(off)
	}
	return w.w.Write(row)
}

// Flush writes buffered lines and returns any write error.
func (w *HumanWriter) Flush() error {
	w.w.Flush()
	return w.w.Error()
}

// HumanReader reads the human-readable format. It implements RecordReader.
type HumanReader struct {
	r      *csv.Reader
	header Header
	err    error
}

// NewHumanReader reads the header lines of the human-readable trace in r.
func NewHumanReader(r io.Reader) (*HumanReader, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	first, err := cr.Read()
	if err != nil {
		return nil, humanErr(err, "header")
	}
	if len(first) != 5 || first[0] != humanMagic {
		return nil, corruptf("not a human-readable block-cache trace")
	}
	if first[1] != "1" {
		return nil, corruptf("unknown human-readable trace version %q", first[1])
	}
	var p parser
	h := Header{MajorVersion: uint32(p.uint(first[2], 32)), MinorVersion: uint32(p.uint(first[3], 32)), StartTimestamp: p.uint(first[4], 64)}
	if p.err != nil {
		return nil, corruptf("header: %v", p.err)
	}
	cols, err := cr.Read()
	if err != nil {
		return nil, humanErr(err, "column names")
	}
	if len(cols) != len(humanColumns) || cols[0] != humanColumns[0] {
		return nil, corruptf("unexpected column names line")
	}
	return &HumanReader{r: cr, header: h}, nil
}

func humanErr(err error, what string) error {
	if errors.Is(err, io.EOF) {
		return corruptf("human-readable trace ends before its %s", what)
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return corruptf("%v", err)
	}
	return fmt.Errorf("trace: reading: %w", err)
}

// Header returns the trace's header.
func (r *HumanReader) Header() Header { return r.header }

// Next returns the next record, io.EOF after the last, an error wrapping
// ErrCorrupt for a malformed line. Errors are sticky.
func (r *HumanReader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
	}
	return rec, err
}

func (r *HumanReader) next() (Record, error) {
	row, err := r.r.Read()
	if err == io.EOF {
		return Record{}, io.EOF
	}
	if err != nil {
		return Record{}, humanErr(err, "next record")
	}
	line, _ := r.r.FieldPos(0)
	if len(row) != len(humanColumns) {
		return Record{}, corruptf("line %d: %d fields, want %d", line, len(row), len(humanColumns))
	}
	var p parser
	rec := Record{
		AccessTimestamp: p.uint(row[0], 64),
		BlockSize:       p.uint(row[2], 64),
		BlockKey:        p.hex(row[3]),
		CFID:            uint32(p.uint(row[4], 32)),
		CFName:          row[5],
		Level:           int32(p.int(row[7], 32)),
		FileNumber:      p.uint(row[8], 64),
		CacheHit:        p.bool(row[9]),
		NoInsert:        p.bool(row[10]),
		Pinned:          p.bool(row[11]),
	}
	if rec.Type, err = ParseBlockType(row[1]); err != nil && p.err == nil {
		p.err = err
	}
	if rec.Caller, err = ParseCaller(row[6]); err != nil && p.err == nil {
		p.err = err
	}
	if rec.Caller.IsGet() {
		rec.GetID, rec.FromUserSnapshot, rec.ReferencedKey = p.uint(row[12], 64), p.bool(row[13]), p.hex(row[14])
		if rec.Type == BlockData {
			rec.ReferencedKeyExists, rec.NumKeysInBlock, rec.ReferencedDataSize = p.bool(row[15]), p.uint(row[16], 64), p.uint(row[17], 64)
		}
	}
	if p.err != nil {
		return Record{}, corruptf("line %d: %v", line, p.err)
	}
	return rec, nil
}

// parser parses fields; its first error is sticky.
type parser struct{ err error }

func (p *parser) uint(s string, bits int) uint64 {
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v
}

func (p *parser) int(s string, bits int) int64 {
	v, err := strconv.ParseInt(s, 10, bits)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v
}

func (p *parser) bool(s string) bool {
	switch s {
	case "0":
		return false
	case "1":
		return true
	}
	if p.err == nil {
		p.err = fmt.Errorf("boolean %q (want 0 or 1)", s)
	}
	return false
}

func (p *parser) hex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil && p.err == nil {
		p.err = err
	}
	if len(b) == 0 {
		return nil
	}
	return b
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
