package blob

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

func openBytes(t testing.TB, b []byte, n base.FileNum) *Reader {
	t.Helper()
	r, err := NewReader(memFile{bytes.NewReader(b)}, n, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func writeFile(t testing.TB, n base.FileNum, kvs [][2][]byte) ([]byte, []Index) {
	return writeFileWith(t, n, CompressionNone, kvs)
}

func writeFileWith(t testing.TB, n base.FileNum, c Compression, kvs [][2][]byte) ([]byte, []Index) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, n, c)
	var xs []Index
	for _, kv := range kvs {
		x, err := w.Add(kv[0], kv[1])
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	st, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != uint64(buf.Len()) || st.Count != uint64(len(kvs)) {
		t.Fatalf("stats %+v for %d bytes", st, buf.Len())
	}
	return buf.Bytes(), xs
}

// readValue reads and decodes the value x locates, as the engine does.
func readValue(r *Reader, x Index, key []byte) ([]byte, error) {
	buf := make([]byte, x.Len)
	vs, vl, err := r.ReadRecord(buf, x, key)
	if err != nil {
		return nil, err
	}
	if x.Compression == CompressionNone {
		return buf[vs : vs+vl], nil
	}
	n, err := DecodedRecordLen(x.Compression, buf)
	if err != nil {
		return nil, err
	}
	dec := make([]byte, n)
	vs, vl, err = DecodeRecord(x.Compression, dec, buf)
	if err != nil {
		return nil, err
	}
	if StoredLen(dec) != x.Len || !bytes.Equal(RecordKey(dec), key) {
		return nil, fmt.Errorf("decoded record lost its stored length or key")
	}
	return dec[vs : vs+vl], nil
}

// randomKVs returns n keys with values of up to 10,000 bytes, random
// bytes or (one in two) runs of a few letters that compress.
func randomKVs(rng *rand.Rand, n int) [][2][]byte {
	var kvs [][2][]byte
	for i := range n {
		v := make([]byte, rng.IntN(10000))
		compressible := rng.IntN(2) == 0
		for j := range v {
			if compressible {
				v[j] = byte('a' + j/100%4)
			} else {
				v[j] = byte(rng.Uint32())
			}
		}
		kvs = append(kvs, [2][]byte{[]byte(fmt.Sprintf("key%06d", i)), v})
	}
	return kvs
}

func TestFormatRoundTrip(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionSnappy} {
		t.Run(c.String(), func(t *testing.T) { testFormatRoundTrip(t, c) })
	}
}

func testFormatRoundTrip(t *testing.T, c Compression) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	kvs := randomKVs(rng, 300) // crosses the writer's buffer size
	b, xs := writeFileWith(t, 7, c, kvs)
	r := openBytes(t, b, 7)
	if r.Compression() != c {
		t.Fatalf("file compression %s, want %s", r.Compression(), c)
	}
	for i, x := range xs {
		enc := x.AppendEncoded(nil)
		y, err := DecodeIndex(enc)
		if err != nil || y != x || x.Compression != wantCompression(c, kvs[i][1]) {
			t.Fatalf("index %+v decoded as %+v, %v", x, y, err)
		}
		v, err := readValue(r, x, kvs[i][0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(v, kvs[i][1]) {
			t.Fatalf("record %d: wrong value", i)
		}
	}
	// An index that names another compression than its record's is
	// refused: its record would decode wrongly.
	for i, x := range xs {
		y := x
		y.Compression = CompressionSnappy - x.Compression
		if _, err := readValue(r, y, kvs[i][0]); !base.IsCorruption(err) {
			t.Fatalf("record %d: index with the wrong compression: %v", i, err)
		}
	}
	i := 0
	err := r.Scan(func(x Index, k, v []byte) error {
		if x != xs[i] || !bytes.Equal(k, kvs[i][0]) || !bytes.Equal(v, kvs[i][1]) {
			t.Fatalf("scan record %d differs", i)
		}
		i++
		return nil
	})
	if err != nil || i != len(kvs) {
		t.Fatalf("scan: %d records, %v", i, err)
	}
}

// TestFormatCorruption flips every byte of a small file in turn: opening
// or reading must fail with a corruption error or return the right value,
// never a wrong one.
func TestFormatCorruption(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionSnappy} {
		t.Run(c.String(), func(t *testing.T) { testFormatCorruption(t, c) })
	}
}

func testFormatCorruption(t *testing.T, c Compression) {
	// In a Snappy file, "apple" and the random value are stored raw, the
	// b's compressed.
	rng := rand.New(rand.NewPCG(5, 6))
	random := make([]byte, 60)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	kvs := [][2][]byte{{[]byte("a"), []byte("apple")}, {[]byte("b"), bytes.Repeat([]byte("b"), 100)}, {[]byte("c"), random}}
	good, xs := writeFileWith(t, 3, c, kvs)
	for i, x := range xs {
		if x.Compression != wantCompression(c, kvs[i][1]) {
			t.Fatalf("record %d stored %s", i, x.Compression)
		}
	}
	for i := range 2 * len(good) {
		b := bytes.Clone(good)
		b[i/2] ^= [2]byte{0x40, 0x80}[i%2] // 0x80 of a length's last byte is the raw flag
		r, err := NewReader(memFile{bytes.NewReader(b)}, 3, int64(len(b)))
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("byte %d: open error %v is not corruption", i, err)
			}
			continue
		}
		for j, x := range xs {
			v, err := readValue(r, x, kvs[j][0])
			if err != nil {
				if !base.IsCorruption(err) {
					t.Fatalf("byte %d: read error %v is not corruption", i/2, err)
				}
				continue
			}
			if !bytes.Equal(v, kvs[j][1]) {
				t.Fatalf("byte %d: wrong value returned for record %d", i/2, j)
			}
		}
		j := 0
		err = r.Scan(func(x Index, k, v []byte) error {
			if x != xs[j] || !bytes.Equal(k, kvs[j][0]) || !bytes.Equal(v, kvs[j][1]) {
				t.Fatalf("byte %d: scan returned a wrong record %d", i/2, j)
			}
			j++
			return nil
		})
		if err != nil && !base.IsCorruption(err) {
			t.Fatalf("byte %d: scan error %v is not corruption", i/2, err)
		}
	}
	// An index pointing at another key's record is caught.
	r := openBytes(t, good, 3)
	buf := make([]byte, xs[1].Len)
	if _, _, err := r.ReadRecord(buf, xs[1], []byte("a")); !base.IsCorruption(err) {
		t.Fatalf("wrong-key read: %v", err)
	}
	// A truncated file is refused.
	if _, err := NewReader(memFile{bytes.NewReader(good[:len(good)-1])}, 3, int64(len(good)-1)); !base.IsCorruption(err) {
		t.Fatalf("truncated file: %v", err)
	}
}

func TestDecodeIndexRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {0, 1, 16}, {2, 1, 16, 20}, {0, 0, 16, 20}, {0, 1, 16, 20, 9}, {0, 1, 3, 20}} {
		if _, err := DecodeIndex(b); !base.IsCorruption(err) {
			t.Errorf("DecodeIndex(%v) = %v", b, err)
		}
	}
}

// FuzzReader feeds arbitrary bytes as a blob file and an arbitrary index:
// no panic, and a read either fails with a corruption error or returns a
// record that verifies under the key asked for.
func FuzzReader(f *testing.F) {
	good, xs := writeFile(f, 5, [][2][]byte{{[]byte("k"), []byte("value")}, {[]byte("k2"), []byte("v2")}})
	f.Add(good, xs[0].AppendEncoded(nil), []byte("k"))
	f.Add(good, xs[1].AppendEncoded(nil), []byte("k2"))
	f.Add(good[:40], xs[1].AppendEncoded(nil), []byte("k2"))
	// A Snappy file with a record stored compressed and one stored raw.
	sn, sxs := writeFileWith(f, 5, CompressionSnappy, [][2][]byte{
		{[]byte("k"), bytes.Repeat([]byte("value "), 20)},
		{[]byte("k2"), []byte{0x8f, 0x01, 0x77, 0xd2, 0x10, 0x5e, 0xaa, 0x03, 0xc4, 0x39}},
	})
	f.Add(sn, sxs[0].AppendEncoded(nil), []byte("k"))
	f.Add(sn, sxs[1].AppendEncoded(nil), []byte("k2"))
	f.Fuzz(func(t *testing.T, file, idx, key []byte) {
		r, err := NewReader(memFile{bytes.NewReader(file)}, 5, int64(len(file)))
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("open: %v", err)
			}
			return
		}
		r.Scan(func(Index, []byte, []byte) error { return nil })
		x, err := DecodeIndex(idx)
		if err != nil {
			return
		}
		if x.FileNum != 5 || x.Len > 1<<20 {
			return
		}
		buf := make([]byte, x.Len)
		vs, vl, err := r.ReadRecord(buf, x, key)
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("read: %v", err)
			}
			return
		}
		if !bytes.Equal(RecordKey(buf), key) || vs+vl+RecordTrailer != len(buf) {
			t.Fatalf("read returned an unverified record")
		}
	})
}

// snappyRecord returns a record of a Snappy file for key whose stored
// value is stored, with a valid CRC: what a writer bug, not a flipped
// bit, would leave.
func snappyRecord(key, stored []byte) []byte {
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(key)))
	rec = binary.LittleEndian.AppendUint32(rec, uint32(len(stored)))
	rec = append(rec, key...)
	rec = append(rec, stored...)
	return binary.LittleEndian.AppendUint32(rec, crc(rec))
}

// TestCompressedPayloadCorrupt: a record of a Snappy file whose CRC holds
// but whose stored value does not decode (a bad length header, a copy
// before the start, a value shorter than its header says, a length no
// Snappy input of that size can decode to) is reported as corruption,
// by the read path, the iterators' ReadValue and GC's Scan.
func TestCompressedPayloadCorrupt(t *testing.T) {
	good := s2.EncodeSnappy(nil, bytes.Repeat([]byte("abcd"), 300))
	bads := map[string][]byte{
		"bad length":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"bad copy":     {10, 0x01 | 1<<2, 0xff}, // a copy with offset 255 at the start
		"short":        good[:len(good)-3],
		"too long":     append(binary.AppendUvarint(nil, 1<<20), good[1:]...),
		"literal runs": {20, 0x00, 'x'}, // 20 bytes promised, 1 given
	}
	for name, stored := range bads {
		t.Run(name, func(t *testing.T) {
			rec := snappyRecord([]byte("k"), stored)
			var scratch []byte
			if _, _, err := ReadValue(CompressionSnappy, rec, []byte("k"), &scratch); !base.IsCorruption(err) {
				t.Fatalf("ReadValue = %v, want corruption", err)
			}
			if n, err := DecodedRecordLen(CompressionSnappy, rec); err == nil {
				if _, _, err := DecodeRecord(CompressionSnappy, make([]byte, n), rec); !base.IsCorruption(err) {
					t.Fatalf("DecodeRecord = %v, want corruption", err)
				}
			} else if !base.IsCorruption(err) {
				t.Fatalf("DecodedRecordLen = %v, want corruption", err)
			}
			// The same record in a file: Scan and reads refuse it.
			f, xs := writeFileWith(t, 4, CompressionSnappy, [][2][]byte{{[]byte("k"), []byte("v")}})
			f = append(append(bytes.Clone(f[:HeaderLen]), rec...), f[HeaderLen+xs[0].Len:]...)
			var ft [FooterLen]byte
			copy(ft[:], f[len(f)-FooterLen:])
			binary.LittleEndian.PutUint64(ft[8:], uint64(HeaderLen+len(rec)))
			binary.LittleEndian.PutUint64(ft[16:], uint64(len(rec)))
			binary.LittleEndian.PutUint32(ft[24:], crc(ft[:24]))
			copy(f[len(f)-FooterLen:], ft[:])
			r := openBytes(t, f, 4)
			if err := r.Scan(func(Index, []byte, []byte) error { return nil }); !base.IsCorruption(err) {
				t.Fatalf("Scan = %v, want corruption", err)
			}
			x := Index{Compression: CompressionSnappy, FileNum: 4, Offset: HeaderLen, Len: uint64(len(rec))}
			if _, err := readValue(r, x, []byte("k")); !base.IsCorruption(err) {
				t.Fatalf("read = %v, want corruption", err)
			}
		})
	}
}

// TestCompressionSavesSpace: a Snappy file of compressible values is a
// fraction of the plain one; one of random values is at most a little
// larger.
func TestCompressionSavesSpace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var text, random [][2][]byte
	for i := range 100 {
		k := []byte(fmt.Sprintf("key%03d", i))
		v := make([]byte, 4096)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		random = append(random, [2][]byte{k, v})
		text = append(text, [2][]byte{k, bytes.Repeat([]byte(fmt.Sprintf("value %d of the text ", i)), 200)})
	}
	size := func(c Compression, kvs [][2][]byte) int {
		b, _ := writeFileWith(t, 1, c, kvs)
		return len(b)
	}
	if p, s := size(CompressionNone, text), size(CompressionSnappy, text); s > p/4 {
		t.Errorf("compressible values: snappy %d bytes, plain %d", s, p)
	}
	if p, s := size(CompressionNone, random), size(CompressionSnappy, random); s > p+p/100 {
		t.Errorf("random values: snappy %d bytes, plain %d", s, p)
	}
}

// FuzzDecodeRecord feeds arbitrary records, given a valid CRC when
// fixCRC is set so that the decoder proper is reached: no panic, no
// allocation beyond what the codec can produce, and either a corruption
// error or a value that re-encodes to the stored bytes' meaning (for
// CompressionNone, the stored bytes themselves).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(snappyRecord([]byte("k"), s2.EncodeSnappy(nil, []byte("hello hello hello"))), []byte("k"), uint8(1), false)
	f.Add(snappyRecord([]byte("k"), []byte{0xff, 0xff, 0xff, 0x0f, 0}), []byte("k"), uint8(1), true)
	f.Add(snappyRecord([]byte("key"), []byte("plain")), []byte("key"), uint8(0), false)
	f.Add([]byte{1, 0, 0, 0}, []byte(nil), uint8(1), true)
	raw := snappyRecord([]byte("k"), []byte("stored raw"))
	raw[7] |= 0x80 // the raw flag
	f.Add(raw, []byte("k"), uint8(1), true)
	f.Add(raw, []byte("k"), uint8(0), true)
	f.Fuzz(func(t *testing.T, rec, key []byte, comp uint8, fixCRC bool) {
		c := Compression(comp % 3) // 2 is unknown
		if fixCRC && len(rec) >= RecordTrailer {
			body := len(rec) - RecordTrailer
			binary.LittleEndian.PutUint32(rec[body:], crc(rec[:body]))
		}
		var scratch []byte
		v, vc, err := ReadValue(c, rec, key, &scratch)
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("ReadValue: %v is not corruption", err)
			}
			return
		}
		if c == 2 {
			t.Fatal("unknown compression decoded")
		}
		if len(key) > 0 && !bytes.Equal(RecordKey(rec), key) {
			t.Fatal("record of another key accepted")
		}
		if len(v) > maxSnappyExpansion*len(rec) {
			t.Fatalf("%d bytes decoded from a %d-byte record", len(v), len(rec))
		}
		if vc != c && (c == CompressionNone || vc != CompressionNone || binary.LittleEndian.Uint32(rec[4:])&rawValueFlag == 0) {
			t.Fatalf("ReadValue says a record of a %s file is stored %s", c, vc)
		}
		n, err := DecodedRecordLen(vc, rec)
		if err != nil {
			t.Fatalf("DecodedRecordLen fails where ReadValue did not: %v", err)
		}
		dec := make([]byte, n)
		vs, vl, err := DecodeRecord(vc, dec, rec)
		if err != nil || !bytes.Equal(dec[vs:vs+vl], v) || StoredLen(dec) != uint64(len(rec)) {
			t.Fatalf("DecodeRecord disagrees with ReadValue: %v", err)
		}
	})
}

// benchValues returns 4 KiB values: random bytes, or words from a
// vocabulary of 64 (Snappy shrinks them to about 0.4).
func benchValues(kind string) [][]byte {
	rng := rand.New(rand.NewPCG(1, 1))
	words := make([][]byte, 64)
	for i := range words {
		w := make([]byte, 3+rng.IntN(8))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = append(w, ' ')
	}
	vals := make([][]byte, 64)
	for i := range vals {
		v := make([]byte, 4096)
		for j := 0; j < len(v); {
			if kind == "random" {
				v[j] = byte(rng.Uint32())
				j++
			} else {
				j += copy(v[j:], words[rng.IntN(len(words))])
			}
		}
		vals[i] = v
	}
	return vals
}

// BenchmarkRecordWrite: the CPU cost of adding a 4 KiB value to a blob
// file (encode, CRC, copy), per compression and kind of value; it reports
// the stored bytes per value.
//
//	go test ./lsm/blob -run XXX -bench 'BenchmarkRecord' -count 5
func BenchmarkRecordWrite(b *testing.B) {
	for _, kind := range []string{"random", "text"} {
		vals := benchValues(kind)
		for _, c := range []Compression{CompressionNone, CompressionSnappy} {
			b.Run(kind+"/"+c.String(), func(b *testing.B) {
				w := NewWriter(io.Discard, 1, c)
				key := []byte("key0000000000000")
				var stored uint64
				b.SetBytes(4096)
				for i := range b.N {
					x, err := w.Add(key, vals[i%len(vals)])
					if err != nil {
						b.Fatal(err)
					}
					stored += x.Len
				}
				b.ReportMetric(float64(stored)/float64(b.N), "stored-B/value")
			})
		}
	}
}

// BenchmarkRecordRead: the CPU cost of verifying and decoding a 4 KiB
// record on a blob cache miss, into a fresh buffer (what the cache takes).
func BenchmarkRecordRead(b *testing.B) {
	for _, kind := range []string{"random", "text"} {
		vals := benchValues(kind)
		for _, c := range []Compression{CompressionNone, CompressionSnappy} {
			b.Run(kind+"/"+c.String(), func(b *testing.B) {
				kvs := make([][2][]byte, len(vals))
				for i, v := range vals {
					kvs[i] = [2][]byte{[]byte(fmt.Sprintf("key%013d", i)), v}
				}
				f, xs := writeFileWith(b, 1, c, kvs)
				recs := make([][]byte, len(xs))
				for i, x := range xs {
					recs[i] = f[x.Offset : x.Offset+x.Len]
				}
				dst := make([]byte, 8192)
				b.SetBytes(4096)
				b.ResetTimer()
				for i := range b.N {
					rec := recs[i%len(recs)]
					vs, vl, err := VerifyRecord(rec, kvs[i%len(kvs)][0])
					if err != nil {
						b.Fatal(err)
					}
					if c == CompressionNone {
						copy(dst, rec[vs:vs+vl]) // the read into the cache buffer
						continue
					}
					n, err := DecodedRecordLen(c, rec)
					if err != nil {
						b.Fatal(err)
					}
					if _, _, err := DecodeRecord(c, dst[:n], rec); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// wantCompression is how a writer of a file of compression c stores v:
// compressed if that saves an eighth, else raw.
func wantCompression(c Compression, v []byte) Compression {
	if c == CompressionSnappy && !compressedGoodEnough(len(s2.EncodeSnappy(nil, v)), len(v)) {
		return CompressionNone
	}
	return c
}

// TestRawFallback: in a Snappy file, a value that Snappy does not shrink
// by an eighth is stored raw, flagged in its record and marked none in its
// index, so that reads decode nothing: random values take exactly the
// bytes of an uncompressed file, values that compress are compressed, and
// both kinds read back by ReadRecord, ReadValue (iterators) and Scan (GC).
func TestRawFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	mixed := func(n, randomEighths int) []byte { // randomEighths/8 random bytes, the rest zeros
		v := make([]byte, n)
		for i := range n * randomEighths / 8 {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	var kvs [][2][]byte
	var want []Compression
	add := func(v []byte, c Compression) {
		kvs = append(kvs, [2][]byte{[]byte(fmt.Sprintf("key%03d", len(kvs))), v})
		want = append(want, c)
	}
	for range 20 {
		add(mixed(4096, 8), CompressionNone)   // random
		add(mixed(4096, 4), CompressionSnappy) // half zeros
		add(mixed(300, 8), CompressionNone)
		add(bytes.Repeat([]byte("text "), 50), CompressionSnappy)
	}
	add(nil, CompressionNone) // Snappy's 1 byte for nothing saves nothing
	add(mixed(4096, 7), CompressionNone)
	add(mixed(4096, 6), CompressionSnappy)
	b, xs := writeFileWith(t, 2, CompressionSnappy, kvs)
	r := openBytes(t, b, 2)
	var scratch []byte
	for i, x := range xs {
		if x.Compression != want[i] {
			t.Fatalf("record %d (%d bytes): stored %s, want %s", i, len(kvs[i][1]), x.Compression, want[i])
		}
		rec := b[x.Offset : x.Offset+x.Len]
		if raw := binary.LittleEndian.Uint32(rec[4:])&rawValueFlag != 0; raw != (x.Compression == CompressionNone) {
			t.Fatalf("record %d: raw flag %v for an index of %s", i, raw, x.Compression)
		}
		if v, err := readValue(r, x, kvs[i][0]); err != nil || !bytes.Equal(v, kvs[i][1]) {
			t.Fatalf("record %d: read %v", i, err)
		}
		v, c, err := ReadValue(CompressionSnappy, rec, kvs[i][0], &scratch)
		if err != nil || c != x.Compression || !bytes.Equal(v, kvs[i][1]) {
			t.Fatalf("record %d: ReadValue %s, %v", i, c, err)
		}
		if c == CompressionNone && len(v) > 0 && &v[0] != &rec[RecordHeaderLen+len(kvs[i][0])] {
			t.Fatalf("record %d: a raw value was copied", i)
		}
	}
	i := 0
	if err := r.Scan(func(x Index, k, v []byte) error {
		if x != xs[i] || !bytes.Equal(k, kvs[i][0]) || !bytes.Equal(v, kvs[i][1]) {
			t.Fatalf("scan record %d differs", i)
		}
		i++
		return nil
	}); err != nil || i != len(kvs) {
		t.Fatalf("scan: %d records, %v", i, err)
	}
	// Random values only: the Snappy file is the plain file's size.
	var random [][2][]byte
	for i := range kvs {
		if i%4 == 0 {
			random = append(random, kvs[i])
		}
	}
	plain, _ := writeFileWith(t, 2, CompressionNone, random)
	snappy, _ := writeFileWith(t, 2, CompressionSnappy, random)
	if len(plain) != len(snappy) {
		t.Fatalf("random values: snappy file %d bytes, plain %d", len(snappy), len(plain))
	}
}

// TestRawFlagMismatch: records with a valid CRC whose raw flag disagrees
// with their index or their file (what a writer bug, not a flipped bit,
// would leave) are refused as corruption by every read path, never
// decoded the wrong way.
func TestRawFlagMismatch(t *testing.T) {
	value := bytes.Repeat([]byte("compressible "), 40)
	enc := s2.EncodeSnappy(nil, value)
	record := func(stored []byte, raw bool) []byte {
		rec := snappyRecord([]byte("k"), stored)
		if raw {
			rec[7] |= 0x80
			binary.LittleEndian.PutUint32(rec[len(rec)-4:], crc(rec[:len(rec)-4]))
		}
		return rec
	}
	for _, tc := range []struct {
		name  string
		file  Compression
		rec   []byte
		index Compression
	}{
		{"raw record, index says snappy", CompressionSnappy, record(value, true), CompressionSnappy},
		{"compressed record, index says none", CompressionSnappy, record(enc, false), CompressionNone},
		{"raw flag in an uncompressed file", CompressionNone, record(value, true), CompressionNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, xs := writeFileWith(t, 4, tc.file, [][2][]byte{{[]byte("k"), []byte("v")}})
			f = append(append(bytes.Clone(f[:HeaderLen]), tc.rec...), f[HeaderLen+xs[0].Len:]...)
			var ft [FooterLen]byte
			copy(ft[:], f[len(f)-FooterLen:])
			binary.LittleEndian.PutUint64(ft[8:], uint64(HeaderLen+len(tc.rec)))
			binary.LittleEndian.PutUint64(ft[16:], uint64(len(tc.rec)))
			binary.LittleEndian.PutUint32(ft[24:], crc(ft[:24]))
			copy(f[len(f)-FooterLen:], ft[:])
			r := openBytes(t, f, 4)
			x := Index{Compression: tc.index, FileNum: 4, Offset: HeaderLen, Len: uint64(len(tc.rec))}
			if v, err := readValue(r, x, []byte("k")); !base.IsCorruption(err) {
				t.Fatalf("read = %q, %v, want corruption", v, err)
			}
			if tc.file == CompressionNone {
				var scratch []byte
				if _, _, err := ReadValue(tc.file, tc.rec, []byte("k"), &scratch); !base.IsCorruption(err) {
					t.Fatalf("ReadValue = %v, want corruption", err)
				}
				if err := r.Scan(func(Index, []byte, []byte) error { return nil }); !base.IsCorruption(err) {
					t.Fatalf("Scan = %v, want corruption", err)
				}
			}
		})
	}
}

// TestReadsVersion1Files reads files written by the format's first
// writer, before records could be stored raw (testdata/v1-*.blob, with
// the indexes it returned in v1-*.idx): every index the LSM holds for
// them still reads its value, and Scan finds the same records.
func TestReadsVersion1Files(t *testing.T) {
	kvs := v1KVs()
	for _, c := range []Compression{CompressionNone, CompressionSnappy} {
		t.Run(c.String(), func(t *testing.T) {
			b, err := os.ReadFile("testdata/v1-" + c.String() + ".blob")
			if err != nil {
				t.Fatal(err)
			}
			if b[8] != 1 {
				t.Fatalf("testdata file is version %d", b[8])
			}
			idx, err := os.ReadFile("testdata/v1-" + c.String() + ".idx")
			if err != nil {
				t.Fatal(err)
			}
			var xs []Index
			for _, line := range strings.Fields(string(idx)) {
				enc, err := hex.DecodeString(line)
				if err != nil {
					t.Fatal(err)
				}
				x, err := DecodeIndex(enc)
				if err != nil {
					t.Fatal(err)
				}
				if x.Compression != c {
					t.Fatalf("version 1 index %+v in a %s file", x, c)
				}
				xs = append(xs, x)
			}
			if len(xs) != len(kvs) {
				t.Fatalf("%d indexes for %d records", len(xs), len(kvs))
			}
			r := openBytes(t, b, 9)
			for i, x := range xs {
				v, err := readValue(r, x, kvs[i][0])
				if err != nil || !bytes.Equal(v, kvs[i][1]) {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			i := 0
			if err := r.Scan(func(x Index, k, v []byte) error {
				if x != xs[i] || !bytes.Equal(k, kvs[i][0]) || !bytes.Equal(v, kvs[i][1]) {
					t.Fatalf("scan record %d differs", i)
				}
				i++
				return nil
			}); err != nil || i != len(kvs) {
				t.Fatalf("scan: %d records, %v", i, err)
			}
		})
	}
	// A version the reader does not know is refused.
	b, _ := writeFileWith(t, 9, CompressionNone, kvs)
	if b[8] != formatVersion {
		t.Fatalf("writer wrote version %d", b[8])
	}
	b[8] = formatVersion + 1
	binary.LittleEndian.PutUint32(b[12:], crc(b[:12]))
	if _, err := NewReader(memFile{bytes.NewReader(b)}, 9, int64(len(b))); !base.IsCorruption(err) {
		t.Fatalf("version %d: %v", formatVersion+1, err)
	}
}

// TestAddStored: records copied as stored (relocation's path) make the
// same file as the values added afresh, in each compression, values
// stored raw in a Snappy file included; a compressed value is refused by a
// file of another compression.
func TestAddStored(t *testing.T) {
	kvs := randomKVs(rand.New(rand.NewPCG(3, 4)), 200)
	for _, c := range []Compression{CompressionNone, CompressionSnappy} {
		want, xs := writeFileWith(t, 2, c, kvs)
		var buf bytes.Buffer
		w := NewWriter(&buf, 2, c)
		for i, x := range xs {
			rec := want[x.Offset : x.Offset+x.Len]
			vs, vl, err := VerifyRecord(rec, kvs[i][0])
			if err != nil {
				t.Fatal(err)
			}
			nx, err := w.AddStored(kvs[i][0], rec[vs:vs+vl], x.Compression)
			if err != nil {
				t.Fatal(err)
			}
			if nx != x {
				t.Fatalf("%s record %d: index %+v, want %+v", c, i, nx, x)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("%s: AddStored wrote a different file", c)
		}
	}
	w := NewWriter(io.Discard, 2, CompressionNone)
	if _, err := w.AddStored([]byte("k"), []byte("v"), CompressionSnappy); !errors.Is(err, base.ErrInvalidArgument) {
		t.Fatalf("AddStored of a Snappy value to an uncompressed file = %v, want invalid argument", err)
	}
}
