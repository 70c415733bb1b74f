package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// refOutcome is how a log ends.
type refOutcome struct {
	records [][]byte
	// kind is "eof" (clean end), "torn" or "corrupt".
	kind   string
	offset int64 // damage offset for "torn" and "corrupt"
}

// refRead is a deliberately plain reader over the whole input, written from
// the format's description: the oracle for the streaming Reader.
func refRead(data []byte, pointInTime bool) refOutcome {
	var out refOutcome
	blockEnd := func(p int) int { return min(len(data), (p/BlockSize+1)*BlockSize) }
	checksum := func(typ byte, payload []byte) uint32 {
		c := crc32.Checksum(append([]byte{typ}, payload...), crc32.MakeTable(crc32.Castagnoli))
		return (c>>15 | c<<17) + 0xa282ead8
	}
	// valid reports whether a well-formed fragment starts at q, and its type
	// and payload.
	valid := func(q int) (bool, byte, []byte) {
		be := blockEnd(q)
		if q+HeaderSize > be {
			return false, 0, nil
		}
		typ := data[q+6]
		n := int(binary.LittleEndian.Uint16(data[q+4:]))
		if typ < 1 || typ > 4 || q+HeaderSize+n > be {
			return false, 0, nil
		}
		payload := data[q+HeaderSize : q+HeaderSize+n]
		if binary.LittleEndian.Uint32(data[q:]) != checksum(typ, payload) {
			return false, 0, nil
		}
		return true, typ, payload
	}
	zeros := func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }
	// damage ends the log at dmg, found while parsing at pos.
	damage := func(dmg, pos int, zeroEnd bool) refOutcome {
		out.offset = int64(dmg)
		for q := pos; q < len(data) && !pointInTime; q++ {
			if ok, typ, _ := valid(q); ok && (typ == 1 || typ == 2) {
				out.kind = "corrupt"
				return out
			}
		}
		if zeroEnd && zeros(data[pos:]) {
			out.kind, out.offset = "eof", 0
		} else {
			out.kind = "torn"
		}
		return out
	}
	pos := 0
	var rec []byte
	recStart := -1 // -1: not inside a record
	for {
		dmg := pos
		if recStart >= 0 {
			dmg = recStart
		}
		be := blockEnd(pos)
		if be-pos < HeaderSize {
			if be < len(data) || (be == len(data) && be%BlockSize == 0 && be > pos) {
				pos = be // padding at the end of a full block
				continue
			}
			switch {
			case pos == len(data) && recStart >= 0:
				out.kind, out.offset = "torn", int64(recStart)
				return out
			case pos == len(data):
				out.kind = "eof"
				return out
			}
			return damage(dmg, pos, recStart < 0 && zeros(data[pos:]))
		}
		if zeros(data[pos : pos+HeaderSize]) {
			return damage(dmg, pos, recStart < 0)
		}
		ok, typ, payload := valid(pos)
		if !ok {
			return damage(dmg, pos, false)
		}
		switch {
		case (typ == 1 || typ == 2) && recStart >= 0:
			return damage(recStart, pos, false)
		case typ == 1:
			out.records = append(out.records, bytes.Clone(payload))
		case typ == 2:
			recStart, rec = pos, bytes.Clone(payload)
		case recStart < 0: // MIDDLE or LAST without FIRST
			return damage(pos, pos, false)
		case typ == 3:
			rec = append(rec, payload...)
		case typ == 4:
			out.records = append(out.records, append(rec, payload...))
			recStart, rec = -1, nil
		}
		pos += HeaderSize + len(payload)
	}
}

// checkAgainstRef reads data with the Reader and compares with refRead.
func checkAgainstRef(t *testing.T, data []byte, pointInTime bool) {
	var opts []ReaderOption
	if pointInTime {
		opts = append(opts, WithPointInTimeRecovery())
	}
	r, got, err := readAll(data, opts...)
	want := refRead(data, pointInTime)
	if len(got) != len(want.records) {
		t.Fatalf("pit=%v: %d records, reference %d (err %v, reference %s)", pointInTime, len(got), len(want.records), err, want.kind)
	}
	for i := range got {
		if !bytes.Equal(got[i], want.records[i]) {
			t.Fatalf("pit=%v: record %d differs from the reference", pointInTime, i)
		}
	}
	switch want.kind {
	case "eof":
		if err != io.EOF || r.TornTail() {
			t.Fatalf("pit=%v: %v torn=%v, reference: clean end", pointInTime, err, r.TornTail())
		}
	case "torn":
		if err != io.EOF || !r.TornTail() || r.TornOffset() != want.offset {
			t.Fatalf("pit=%v: %v torn=%v at %d, reference: torn at %d", pointInTime, err, r.TornTail(), r.TornOffset(), want.offset)
		}
	case "corrupt":
		var ce *CorruptionError
		if !base.IsCorruption(err) || !errors.As(err, &ce) || ce.Offset != want.offset {
			t.Fatalf("pit=%v: %v, reference: corruption at %d", pointInTime, err, want.offset)
		}
	}
}

func FuzzReader(f *testing.F) {
	add := func(records ...[]byte) []byte {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, r := range records {
			w.WriteRecord(r)
		}
		w.Close()
		return buf.Bytes()
	}
	flip := func(b []byte, p int) []byte {
		b = bytes.Clone(b)
		b[p%len(b)] ^= 0x5a
		return b
	}
	small := add([]byte("a"), []byte("bc"), nil, bytes.Repeat([]byte("d"), 100))
	big := add([]byte("x"), bytes.Repeat([]byte("y"), BlockSize+100), []byte("z"))
	f.Add([]byte{})
	f.Add(small)
	f.Add(small[:len(small)-3])
	f.Add(small[:5])
	f.Add(flip(small, 9))
	f.Add(flip(small, len(small)-1))
	f.Add(append(bytes.Clone(small), make([]byte, 40)...))
	f.Add(append(append(bytes.Clone(small), make([]byte, 9)...), small...))
	f.Add(big)
	f.Add(big[:BlockSize+20])
	f.Add(flip(big, 8))
	f.Add(flip(big, BlockSize+3))
	// The last record's FIRST is damaged, its MIDDLE and LAST are intact.
	f.Add(flip(add([]byte("x"), bytes.Repeat([]byte("y"), 2*BlockSize)), 12))
	f.Add(append(bytes.Clone(big[:BlockSize]), small...))
	f.Add(bytes.Repeat([]byte{0xff}, 100))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstRef(t, data, false)
		checkAgainstRef(t, data, true)
	})
}

// TestReaderAgainstRef compares the Reader with the reference on damaged
// logs: every flip and cut of a log crossing blocks, at a stride.
func TestReaderAgainstRef(t *testing.T) {
	l := smallLog(t, 8, 10, true)
	for p := 0; p < len(l.data); p += 331 {
		data := bytes.Clone(l.data)
		data[p] ^= 0x41
		checkAgainstRef(t, data, false)
		checkAgainstRef(t, data, true)
		checkAgainstRef(t, l.data[:p], false)
	}
}
