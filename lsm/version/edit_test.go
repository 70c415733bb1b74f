package version

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// randomEdit returns an edit with every kind of field, some absent.
func randomEdit(rng *rand.Rand) *VersionEdit {
	e := &VersionEdit{}
	if rng.IntN(2) == 0 {
		e.ComparerName = fmt.Sprintf("cmp-%d", rng.IntN(100))
	}
	if rng.IntN(2) == 0 {
		e.LogNumber = base.FileNum(rng.Uint64N(1<<40) + 1)
	}
	if rng.IntN(2) == 0 {
		e.NextFileNum = base.FileNum(rng.Uint64() | 1)
	}
	if rng.IntN(2) == 0 {
		e.LastSeq = base.SeqNum(rng.Uint64N(uint64(base.SeqNumMax)) + 1)
	}
	randKey := func() []byte {
		k := make([]byte, rng.IntN(20))
		for i := range k {
			k[i] = byte(rng.IntN(256))
		}
		return base.MakeInternalKey(nil, k, base.SeqNum(rng.Uint64N(uint64(base.SeqNumMax))), base.Kind(rng.IntN(int(base.KindMax)+1)))
	}
	for range rng.IntN(3) {
		e.CompactPointers = append(e.CompactPointers, CompactPointer{Level: rng.IntN(NumLevels), Key: randKey()})
	}
	for range rng.IntN(5) {
		e.DeleteFile(rng.IntN(NumLevels), base.FileNum(rng.Uint64N(1000)+1))
	}
	for range rng.IntN(5) {
		a, b := randKey(), randKey()
		if base.InternalCompare(a, b) > 0 {
			a, b = b, a
		}
		s1 := base.SeqNum(rng.Uint64N(1 << 50))
		e.AddFile(rng.IntN(NumLevels), &FileMetadata{
			FileNum:      base.FileNum(rng.Uint64N(1000) + 1),
			Size:         rng.Uint64(),
			Smallest:     a,
			Largest:      b,
			SmallestSeq:  s1,
			LargestSeq:   s1 + base.SeqNum(rng.Uint64N(1000)),
			NumEntries:   rng.Uint64(),
			NumDeletions: rng.Uint64(),
		})
	}
	for i := range rng.IntN(3) {
		e.WALsSynced = append(e.WALsSynced, WALSynced{
			Num:        base.FileNum(rng.Uint64N(1000)*3 + uint64(i) + 1), // distinct
			SyncedSize: rng.Uint64N(1 << uint(rng.IntN(64))),
		})
	}
	return e
}

// editsEqual compares the persisted fields of two edits.
func editsEqual(a, b *VersionEdit) bool {
	if a.ComparerName != b.ComparerName || a.LogNumber != b.LogNumber ||
		a.NextFileNum != b.NextFileNum || a.LastSeq != b.LastSeq ||
		len(a.CompactPointers) != len(b.CompactPointers) ||
		len(a.DeletedFiles) != len(b.DeletedFiles) || len(a.NewFiles) != len(b.NewFiles) ||
		!slices.Equal(a.WALsSynced, b.WALsSynced) {
		return false
	}
	for i := range a.CompactPointers {
		if a.CompactPointers[i].Level != b.CompactPointers[i].Level || !bytes.Equal(a.CompactPointers[i].Key, b.CompactPointers[i].Key) {
			return false
		}
	}
	if !reflect.DeepEqual(a.DeletedFiles, b.DeletedFiles) && len(a.DeletedFiles) > 0 {
		return false
	}
	for i := range a.NewFiles {
		x, y := a.NewFiles[i], b.NewFiles[i]
		if x.Level != y.Level || !metasEqual(x.Meta, y.Meta) {
			return false
		}
	}
	return true
}

func metasEqual(x, y *FileMetadata) bool {
	return x.FileNum == y.FileNum && x.Size == y.Size &&
		bytes.Equal(x.Smallest, y.Smallest) && bytes.Equal(x.Largest, y.Largest) &&
		x.SmallestSeq == y.SmallestSeq && x.LargestSeq == y.LargestSeq &&
		x.NumEntries == y.NumEntries && x.NumDeletions == y.NumDeletions
}

func TestEditRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 2000 {
		e := randomEdit(rng)
		enc := e.Encode()
		var d VersionEdit
		if err := d.Decode(enc); err != nil {
			t.Fatalf("edit %d: %v\n%s", i, err, e)
		}
		if !editsEqual(e, &d) {
			t.Fatalf("edit %d: round trip mismatch\nwant:\n%s\ngot:\n%s", i, e, &d)
		}
		if enc2 := d.Encode(); !bytes.Equal(enc, enc2) {
			t.Fatalf("edit %d: re-encoding differs", i)
		}
		// Decode copies: scribbling over the input changes nothing.
		for j := range enc {
			enc[j] ^= 0xff
		}
		if !editsEqual(e, &d) {
			t.Fatalf("edit %d: decoded edit aliases its input", i)
		}
	}
}

// TestEditDecodeTruncated: every proper prefix of an encoded edit either
// decodes (it ends on a field boundary) to an edit that re-encodes to the
// prefix, or fails with a corruption error.
func TestEditDecodeTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 200 {
		enc := randomEdit(rng).Encode()
		for n := range len(enc) {
			var d VersionEdit
			err := d.Decode(enc[:n])
			if err != nil {
				if !base.IsCorruption(err) {
					t.Fatalf("prefix %d: %v is not a corruption error", n, err)
				}
				if !reflect.DeepEqual(d, VersionEdit{}) {
					t.Fatalf("prefix %d: failed Decode left data in the edit", n)
				}
				continue
			}
			if !bytes.Equal(d.Encode(), enc[:n]) {
				t.Fatalf("prefix %d decoded but does not re-encode to itself", n)
			}
		}
	}
}

func TestEditDecodeCorruption(t *testing.T) {
	uv := binary.AppendUvarint
	key := base.MakeInternalKey(nil, []byte("k"), 1, base.KindSet)
	newFile := func(level, num uint64, smallest, largest []byte, s1, s2 uint64) []byte {
		b := uv(nil, tagNewFile)
		b = uv(b, level)
		b = uv(b, num)
		b = uv(b, 100)
		b = appendBytes(b, smallest)
		b = appendBytes(b, largest)
		b = uv(b, s1)
		b = uv(b, s2)
		b = uv(b, 1)
		b = uv(b, 0)
		return uv(b, 0)
	}
	cases := map[string][]byte{
		"unknown tag":           uv(nil, 8),
		"unknown tag 99":        uv(uv(nil, 99), 0),
		"huge tag":              uv(nil, 1<<40),
		"bad varint":            {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"level out of range":    uv(uv(uv(nil, tagDeletedFile), NumLevels), 5),
		"zero deleted file":     uv(uv(uv(nil, tagDeletedFile), 1), 0),
		"deleted twice":         uv(uv(uv(uv(uv(uv(nil, tagDeletedFile), 1), 5), tagDeletedFile), 1), 5),
		"zero next file num":    uv(uv(nil, tagNextFileNum), 0),
		"duplicate log number":  uv(uv(uv(uv(nil, tagLogNumber), 3), tagLogNumber), 4),
		"empty comparer":        uv(uv(nil, tagComparerName), 0),
		"comparer overruns":     uv(uv(nil, tagComparerName), 10),
		"last seq out of range": uv(uv(nil, tagLastSeq), uint64(base.SeqNumMax)+1),
		"short compact pointer": appendBytes(uv(uv(nil, tagCompactPointer), 1), []byte("abc")),
		"short smallest key":    newFile(1, 5, []byte("abc"), key, 1, 1),
		"unknown kind":          newFile(1, 5, base.MakeInternalKey(nil, []byte("a"), 1, 9), key, 1, 1),
		"smallest > largest":    newFile(1, 5, base.MakeInternalKey(nil, []byte("z"), 1, base.KindSet), key, 1, 1),
		"seqs reversed":         newFile(1, 5, key, key, 2, 1),
		"zero new file":         newFile(1, 0, key, key, 1, 1),
		"new file level":        newFile(9, 5, key, key, 1, 1),
		"ignorable overruns":    uv(uv(nil, tagSafeIgnoreMask|1), 5),
		"huge length":           uv(uv(nil, tagComparerName), 1<<62),
	}
	for name, b := range cases {
		var e VersionEdit
		err := e.Decode(b)
		if !base.IsCorruption(err) {
			t.Errorf("%s: Decode = %v, want a corruption error", name, err)
		}
	}
	// The valid new file the corrupt ones are variations of decodes.
	var e VersionEdit
	if err := e.Decode(newFile(1, 5, key, key, 1, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestEditSafeIgnore: tags with the safe-to-ignore bit are skipped, with
// their payload, wherever they appear.
func TestEditSafeIgnore(t *testing.T) {
	want := &VersionEdit{LogNumber: 7, NextFileNum: 9}
	want.DeleteFile(2, 3)
	var b []byte
	b = binary.AppendUvarint(b, tagSafeIgnoreMask|5)
	b = appendBytes(b, []byte("future field"))
	b = want.AppendEncoded(b)
	b = binary.AppendUvarint(b, tagSafeIgnoreMask|0x77)
	b = appendBytes(b, nil)
	var got VersionEdit
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if !editsEqual(want, &got) {
		t.Fatalf("got\n%s\nwant\n%s", &got, want)
	}
}

// FuzzDecodeEdit: Decode never panics; what it accepts re-encodes to a
// canonical form that decodes to the same edit.
func FuzzDecodeEdit(f *testing.F) {
	rng := rand.New(rand.NewPCG(15, 16))
	for range 20 {
		f.Add(randomEdit(rng).Encode())
	}
	f.Add([]byte{})
	f.Add([]byte{tagNewFile})
	f.Add(binary.AppendUvarint(nil, tagSafeIgnoreMask|3))
	// WAL synced sizes: well-formed, with trailing payload bytes, with an
	// empty or truncated payload, with a zero WAL number, twice.
	walField := func(payload ...byte) []byte {
		return appendBytes(binary.AppendUvarint(nil, tagWALSynced), payload)
	}
	f.Add((&VersionEdit{LogNumber: 3, WALsSynced: []WALSynced{{Num: 5, SyncedSize: 426895}}}).Encode())
	f.Add(walField(5, 0x80, 0x01, 0xff))
	f.Add(walField())
	f.Add(walField(5))
	f.Add(walField(5, 0x80))
	f.Add(walField(0, 7))
	f.Add(append(walField(5, 7), walField(5, 9)...))
	empty := &Version{}
	empty.PrepareForInstall()
	f.Fuzz(func(t *testing.T, b []byte) {
		var e VersionEdit
		if err := e.Decode(b); err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("non-corruption error %v", err)
			}
			return
		}
		enc := e.Encode()
		var e2 VersionEdit
		if err := e2.Decode(enc); err != nil {
			t.Fatalf("re-encoded edit does not decode: %v", err)
		}
		if !editsEqual(&e, &e2) || !bytes.Equal(enc, e2.Encode()) {
			t.Fatal("re-encoding is not stable")
		}
		// Replaying it onto the empty version never panics either.
		bld := newBuilder(empty, corruptionf)
		if err := bld.apply(&e); err == nil {
			if v, err := bld.version(); err == nil {
				v.PrepareForInstall()
				if err := v.CheckOrdering(); err != nil {
					t.Fatalf("builder accepted a bad version: %v", err)
				}
			} else if !base.IsCorruption(err) {
				t.Fatalf("non-corruption error %v", err)
			}
		} else if !base.IsCorruption(err) {
			t.Fatalf("non-corruption error %v", err)
		}
	})
}

// TestEditWALSyncedEncoding pins the byte layout of a WAL synced size (see
// doc.go) and checks that a reader that does not know the tag — one that
// only skips safe-to-ignore fields, as versions before it did — reads the
// rest of the edit unchanged.
func TestEditWALSyncedEncoding(t *testing.T) {
	e := &VersionEdit{LogNumber: 5, WALsSynced: []WALSynced{{Num: 5, SyncedSize: 300}}}
	want := []byte{
		tagLogNumber, 5,
		0x81, 0x40, // tag 0x2001 as a uvarint
		3,          // payload length
		5,          // WAL number
		0xac, 0x02, // synced size 300
	}
	if got := e.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("encoding = % x, want % x", got, want)
	}
	if tagWALSynced&tagSafeIgnoreMask == 0 {
		t.Fatal("the WAL synced size tag must be safe to ignore, or older versions refuse the manifest")
	}
	// An older reader: every tag with the safe-ignore bit is a length and
	// bytes to skip.
	d := decoder{b: want}
	var old VersionEdit
	for len(d.b) > 0 && d.err == nil {
		switch tag := d.uvarint("tag"); {
		case tag&tagSafeIgnoreMask != 0:
			d.bytes("ignorable field")
		case tag == tagLogNumber:
			old.LogNumber = d.fileNum("log number")
		default:
			t.Fatalf("unexpected tag %d", tag)
		}
	}
	if d.err != nil || old.LogNumber != 5 {
		t.Fatalf("an older reader got %+v, %v", old, d.err)
	}
	// A longer payload (a later version's extra fields) still decodes.
	ext := append(binary.AppendUvarint(nil, tagWALSynced), appendBytes(nil, []byte{5, 0xac, 0x02, 0x99, 0x01})...)
	var got VersionEdit
	if err := got.Decode(ext); err != nil || !slices.Equal(got.WALsSynced, e.WALsSynced) {
		t.Fatalf("decoding an extended payload: %+v, %v", got.WALsSynced, err)
	}
	for _, bad := range [][]byte{
		append(binary.AppendUvarint(nil, tagWALSynced), appendBytes(nil, []byte{0, 1})...), // WAL 0
		append(binary.AppendUvarint(nil, tagWALSynced), appendBytes(nil, []byte{5})...),    // no size
		append(binary.AppendUvarint(nil, tagWALSynced), 9, 5, 1),                           // payload overruns
		append(e.Encode(), e.Encode()[2:]...),                                              // WAL 5 twice
	} {
		if err := got.Decode(bad); !base.IsCorruption(err) {
			t.Errorf("Decode(% x) = %v, want corruption", bad, err)
		}
	}
}
