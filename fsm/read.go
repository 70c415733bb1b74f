package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
)

// Reads serve the local engine's latest state, whatever the consistency the
// client asked for: the cluster layer decides when a read may run (for a
// linearizable read, after WaitApplied of the read index). A read reflects
// at least every entry up to the AppliedIndex loaded before it. Reads wait
// while a Restore swaps the engine.

// Get returns the key's KeyValue, or nil if the key does not exist.
func (f *FSM) Get(key []byte) (*cairnpb.KeyValue, error) {
	if err := f.limits.key("key", key); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.db == nil {
		return nil, f.noEngineErr()
	}
	// The engine's value is decoded in place (GetFunc) and the key and
	// value are copied into one allocation: the response must outlive the
	// read (gRPC marshals it after the handler returns), so one copy is
	// needed, and one is all this makes.
	var kv *cairnpb.KeyValue
	var derr error
	err := f.mu.db.GetFunc(userKey(nil, key), func(v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			derr = err
			return err
		}
		buf := make([]byte, len(key)+len(rec.value))
		copy(buf, key)
		copy(buf[len(key):], rec.value)
		rec.value = buf[len(key):]
		kv = rec.keyValue(buf[:len(key):len(key)], true)
		return nil
	})
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, nil
	}
	if derr != nil {
		return nil, fmt.Errorf("fsm: key %q: %w", key, derr)
	}
	if err != nil {
		return nil, fmt.Errorf("fsm: reading %q: %w", key, err)
	}
	return kv, nil
}

// Scan reads one page of a ScanRequest (see its documentation in
// kv.proto): range or prefix, limit, direction, page token. The response's
// header is not set.
func (f *FSM) Scan(req *cairnpb.ScanRequest) (*cairnpb.ScanResponse, error) {
	lo, hi, err := f.limits.keyRange(req.GetStart(), req.GetEnd(), req.GetPrefix())
	if err != nil {
		return nil, err
	}
	reverse := req.GetReverse()
	if tok := req.GetPageToken(); len(tok) > 0 {
		resume, err := decodePageToken(tok, reverse)
		if err != nil {
			return nil, err
		}
		if !reverse {
			if bytes.Compare(resume, lo) > 0 {
				lo = resume
			}
		} else if hi == nil || bytes.Compare(resume, hi) < 0 {
			hi = resume
		}
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = cairnpb.DefaultScanLimit
	case limit > cairnpb.MaxScanLimit:
		limit = cairnpb.MaxScanLimit
	}
	kvs, more, err := f.scan(lo, hi, limit, cairnpb.MaxScanPageBytes, reverse, !req.GetKeysOnly())
	if err != nil {
		return nil, err
	}
	resp := &cairnpb.ScanResponse{Kvs: kvs}
	if more {
		resp.NextPageToken = encodePageToken(kvs[len(kvs)-1].Key, reverse)
	}
	return resp, nil
}

// scan returns up to limit KeyValues of the user keys in [lo, hi) (hi nil:
// unbounded), stopping early after the one that brings the page's keys and
// values to maxBytes, or before one that would take the page past what a
// gRPC message of the node holds (limits.maxScanPage, which only a page's
// first key may pass: a value stored under a larger MaxValueSize). Without
// that, a page of nearly maxBytes followed by a largest value, or any page
// of a node whose largest value is less than 3 MiB, could be larger than
// the node sends, and every retry of the page would fail alike. A value
// that ends the page is not copied. more reports that keys remain.
func (f *FSM) scan(lo, hi []byte, limit, maxBytes int, reverse, withValues bool) (kvs []*cairnpb.KeyValue, more bool, err error) {
	opts := &lsm.IterOptions{LowerBound: userKey(nil, lo), UpperBound: userSpaceEnd}
	if hi != nil {
		if bytes.Compare(lo, hi) >= 0 {
			return nil, false, nil
		}
		opts.UpperBound = userKey(nil, hi)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.db == nil {
		return nil, false, f.noEngineErr()
	}
	it, err := f.mu.db.NewIter(opts)
	if err != nil {
		return nil, false, fmt.Errorf("fsm: scan: %w", err)
	}
	defer it.Close()
	step, ok := it.Next, it.First()
	if reverse {
		step, ok = it.Prev, it.Last()
	}
	size, encoded := 0, 0
	for ; ok; ok = step() {
		if len(kvs) == limit || size >= maxBytes {
			more = true
			break
		}
		rec, err := decodeRecord(it.Value())
		if err != nil {
			return nil, false, fmt.Errorf("fsm: key %q: %w", it.Key()[1:], err)
		}
		n := len(it.Key()) - 1 + scanKVOverhead
		if withValues {
			n += len(rec.value)
		}
		if len(kvs) > 0 && encoded+n > f.limits.maxScanPage {
			more = true
			break
		}
		encoded += n
		kv := rec.keyValue(bytes.Clone(it.Key()[1:]), false)
		if withValues {
			kv.Value = bytes.Clone(rec.value)
		}
		size += len(kv.Key) + len(kv.Value)
		kvs = append(kvs, kv)
	}
	if err := it.Error(); err != nil {
		return nil, false, fmt.Errorf("fsm: scan: %w", err)
	}
	return kvs, more, nil
}

// A page token says where the next page starts:
//
//	+------+----------------------------+------------+
//	| 0x01 | direction (0 fwd, 1 rev)   | resume key |
//	+------+----------------------------+------------+
//
// Forward, the resume key is the inclusive start (the last key returned
// followed by 0x00); in reverse, the exclusive end (the last key returned).
const pageTokenFormat byte = 1

func encodePageToken(last []byte, reverse bool) []byte {
	tok := make([]byte, 0, 3+len(last))
	if reverse {
		tok = append(tok, pageTokenFormat, 1)
		return append(tok, last...)
	}
	tok = append(tok, pageTokenFormat, 0)
	tok = append(tok, last...)
	return append(tok, 0)
}

func decodePageToken(tok []byte, reverse bool) ([]byte, error) {
	if len(tok) < 3 || tok[0] != pageTokenFormat || tok[1] > 1 || len(tok)-2 > maxUserKeySize+1 {
		return nil, invalidf("malformed page token")
	}
	if (tok[1] == 1) != reverse {
		return nil, invalidf("page token of a scan in the other direction")
	}
	return tok[2:], nil
}

// Checksum returns a SHA-256 over every key and value of the engine
// (internal ones included, in order), read from one consistent view, with
// the applied index that view reflects. Two replicas that applied the same
// log to the same index have the same checksum: a test of determinism.
func (f *FSM) Checksum() (sum [sha256.Size]byte, applied uint64, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.db == nil {
		return sum, 0, f.noEngineErr()
	}
	it, err := f.mu.db.NewIter(nil)
	if err != nil {
		return sum, 0, err
	}
	defer it.Close()
	h := sha256.New()
	var lenBuf [2 * binary.MaxVarintLen64]byte
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		n := binary.PutUvarint(lenBuf[:], uint64(len(k)))
		n += binary.PutUvarint(lenBuf[n:], uint64(len(v)))
		h.Write(lenBuf[:n])
		h.Write(k)
		h.Write(v)
		if bytes.Equal(k, keyApplied) {
			st, err := decodeAppliedState(v)
			if err != nil {
				return sum, 0, err
			}
			applied = st.index
		}
	}
	if err := it.Error(); err != nil {
		return sum, 0, err
	}
	h.Sum(sum[:0])
	return sum, applied, nil
}
