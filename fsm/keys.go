package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
)

// The engine's key space (see doc.go for the diagrams).
const (
	internalPrefix byte = 0x00
	userPrefix     byte = 0x01
)

var (
	// keyFormat holds the layout version of the engine's contents.
	keyFormat = []byte("\x00format")
	// keyApplied holds the appliedState.
	keyApplied = []byte("\x00applied")
	// sessionPrefix + client_id holds a client session.
	sessionPrefix    = []byte("\x00session/")
	sessionPrefixEnd = []byte("\x00session0") // '0' follows '/'

	// userSpaceStart and userSpaceEnd bound every user key: [0x01, 0x02).
	userSpaceStart = []byte{userPrefix}
	userSpaceEnd   = []byte{userPrefix + 1}
)

// formatVersion is the layout version written under keyFormat.
const formatVersion uint32 = 1

// maxUserKeySize is the largest user key the FSM accepts: the API's limit,
// which every other layer enforces too. The prefixed engine key must fit
// the engine's limit; the array below has a negative length, and the build
// fails, if it does not.
const maxUserKeySize = cairnpb.MaxKeySize

var _ [lsm.MaxKeySize - 1 - maxUserKeySize]struct{}

// maxRecordOverhead bounds the bytes a value record adds to a value.
const maxRecordOverhead = 1 + 3*binary.MaxVarintLen64

// userKey appends the engine key of user key k to dst.
func userKey(dst, k []byte) []byte {
	dst = append(dst, userPrefix)
	return append(dst, k...)
}

// sessionKey returns the engine key of a client session.
func sessionKey(clientID string) []byte {
	k := make([]byte, 0, len(sessionPrefix)+len(clientID))
	k = append(k, sessionPrefix...)
	return append(k, clientID...)
}

// record is the stored form of a user key's value.
type record struct {
	version     uint64
	createIndex uint64
	modIndex    uint64
	value       []byte
}

const recordFormat byte = 1

// encodeRecord appends r's encoding to dst:
//
//	+------+-----------------+----------------------+-------------------+-------+
//	| 0x01 | uvarint version | uvarint create_index | uvarint mod_index | value |
//	+------+-----------------+----------------------+-------------------+-------+
func encodeRecord(dst []byte, r *record) []byte {
	dst = append(dst, recordFormat)
	dst = binary.AppendUvarint(dst, r.version)
	dst = binary.AppendUvarint(dst, r.createIndex)
	dst = binary.AppendUvarint(dst, r.modIndex)
	return append(dst, r.value...)
}

// decodeRecord decodes a value record; r.value aliases b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) == 0 || b[0] != recordFormat {
		return r, corruptionf("value record of %d bytes with an unknown format", len(b))
	}
	d := decoder{b: b[1:]}
	r.version = d.uvarint()
	r.createIndex = d.uvarint()
	r.modIndex = d.uvarint()
	if d.err != nil {
		return r, corruptionf("value record: %v", d.err)
	}
	if r.version == 0 || r.createIndex == 0 || r.modIndex < r.createIndex {
		return r, corruptionf("value record with impossible metadata (version %d, create %d, mod %d)",
			r.version, r.createIndex, r.modIndex)
	}
	r.value = d.b
	return r, nil
}

func (r *record) keyValue(key []byte, withValue bool) *cairnpb.KeyValue {
	kv := &cairnpb.KeyValue{
		Key:         key,
		Version:     r.version,
		CreateIndex: r.createIndex,
		ModIndex:    r.modIndex,
	}
	if withValue {
		kv.Value = r.value
	}
	return kv
}

// appliedState is the position of the state machine in the raft log and its
// deterministic clock, written in the same engine batch as every batch of
// effects.
type appliedState struct {
	index uint64
	term  uint64
	// clock is the largest raft.Log.AppendedAt (Unix nanoseconds) of the
	// commands applied so far: the time session expiry is measured with.
	clock int64
}

const appliedStateLen = 1 + 8 + 8 + 8

// encode returns the state's encoding:
//
//	+------+---------------+--------------+---------------------+
//	| 0x01 | index (8B LE) | term (8B LE) | clock (8B LE, int64) |
//	+------+---------------+--------------+---------------------+
func (s appliedState) encode() []byte {
	b := make([]byte, appliedStateLen)
	b[0] = 1
	binary.LittleEndian.PutUint64(b[1:], s.index)
	binary.LittleEndian.PutUint64(b[9:], s.term)
	binary.LittleEndian.PutUint64(b[17:], uint64(s.clock))
	return b
}

func decodeAppliedState(b []byte) (appliedState, error) {
	if len(b) != appliedStateLen || b[0] != 1 {
		return appliedState{}, corruptionf("applied state of %d bytes with an unknown format", len(b))
	}
	return appliedState{
		index: binary.LittleEndian.Uint64(b[1:]),
		term:  binary.LittleEndian.Uint64(b[9:]),
		clock: int64(binary.LittleEndian.Uint64(b[17:])),
	}, nil
}

// sessionRecord is the stored form of a client session.
type sessionRecord struct {
	seq        uint64
	lastIndex  uint64
	lastActive int64
	// retained reports whether result holds the result of seq.
	retained bool
	result   []byte // an encoded fsmpb.Result
}

const sessionRecordFormat byte = 1

// encode returns the record's encoding:
//
//	+------+-----------+-------------+-------------------+-------------------------+--------+
//	| 0x01 | flags(1B) | uvarint seq | uvarint lastIndex | varint lastActive (ns)  | result |
//	+------+-----------+-------------+-------------------+-------------------------+--------+
//	flags: bit 0 = the result is retained (result holds an encoded fsmpb.Result).
func (r *sessionRecord) encode() []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(r.result))
	var flags byte
	if r.retained {
		flags |= 1
	}
	b = append(b, sessionRecordFormat, flags)
	b = binary.AppendUvarint(b, r.seq)
	b = binary.AppendUvarint(b, r.lastIndex)
	b = binary.AppendVarint(b, r.lastActive)
	if r.retained {
		b = append(b, r.result...)
	}
	return b
}

// decodeSessionRecord decodes a session record; result aliases b.
func decodeSessionRecord(b []byte) (sessionRecord, error) {
	var r sessionRecord
	if len(b) < 2 || b[0] != sessionRecordFormat || b[1]&^1 != 0 {
		return r, corruptionf("session record of %d bytes with an unknown format", len(b))
	}
	r.retained = b[1]&1 != 0
	d := decoder{b: b[2:]}
	r.seq = d.uvarint()
	r.lastIndex = d.uvarint()
	r.lastActive = d.varint()
	if d.err != nil {
		return r, corruptionf("session record: %v", d.err)
	}
	if r.seq == 0 || r.lastIndex == 0 {
		return r, corruptionf("session record with seq %d, last index %d", r.seq, r.lastIndex)
	}
	if r.retained {
		r.result = d.b
	} else if len(d.b) != 0 {
		return r, corruptionf("session record with %d trailing bytes", len(d.b))
	}
	return r, nil
}

// decoder reads varints with bounds checks; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("malformed varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("malformed varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}
