package trace

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleTrace returns a binary trace of n mixed records and the offsets
// where each record ends.
func sampleTrace(t testing.TB, n int) ([]byte, []int) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.WriteHeader(Header{StartTimestamp: 1, MajorVersion: MajorVersion, MinorVersion: MinorVersion})
	w.Flush()
	ends := []int{buf.Len()}
	for i := range n {
		r := makeRecord(uint32(i), BlockType(1+i%6))
		w.WriteRecord(&r)
		w.Flush()
		ends = append(ends, buf.Len())
	}
	return buf.Bytes(), ends
}

// readAll reads a whole trace, returning the records and the error that
// ended it (io.EOF for a clean end).
func readAll(data []byte) (int, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	for n := 0; ; n++ {
		if _, err := r.Next(); err != nil {
			return n, err
		}
	}
}

// TestTruncatedTrace cuts a trace at every length: a cut at a record
// boundary reads cleanly up to it, any other cut is a corruption error.
func TestTruncatedTrace(t *testing.T) {
	data, ends := sampleTrace(t, 12)
	boundary := map[int]int{}
	for i, e := range ends {
		boundary[e] = i
	}
	for l := 0; l <= len(data); l++ {
		n, err := readAll(data[:l])
		if k, ok := boundary[l]; ok {
			if err != io.EOF || n != k {
				t.Fatalf("cut at %d (after record %d): %d records, %v", l, k, n, err)
			}
			continue
		}
		if !IsCorrupt(err) {
			t.Fatalf("cut at %d: %d records, %v; want a corruption error", l, n, err)
		}
	}
}

// TestCorruptTrace flips every bit of a trace: each flip is caught (the
// header's and the records' checksums), never a panic or a silently
// different record.
func TestCorruptTrace(t *testing.T) {
	data, _ := sampleTrace(t, 6)
	for i := range len(data) * 8 {
		d := bytes.Clone(data)
		d[i/8] ^= 1 << (i % 8)
		n, err := readAll(d)
		if !IsCorrupt(err) {
			t.Fatalf("bit %d flipped: %d records, %v; want a corruption error", i, n, err)
		}
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"empty":           "",
		"garbage":         "hello, world\n",
		"human-truncated": humanMagic + ",1,0,1,5\n",
		"human-bad-line":  humanMagic + ",1,0,1,5\n" + strings.Join(humanColumns, ",") + "\n1,data,x\n",
		"human-bad-type":  humanMagic + ",1,0,1,5\n" + strings.Join(humanColumns, ",") + "\n1,nope,1,00,0,default,get,0,1,0,0,0,0,0,,0,0,0,,\n",
	}
	for name, content := range cases {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		rr, err := OpenFile(path)
		if err == nil {
			_, err = rr.Next()
			rr.(*File).Close()
		}
		if !IsCorrupt(err) {
			t.Errorf("%s: %v, want a corruption error", name, err)
		}
	}
	if _, err := OpenFile(filepath.Join(dir, "missing")); err == nil || IsCorrupt(err) {
		t.Errorf("missing file: %v, want a not-exist error", err)
	}
}

func TestBlockKeyParts(t *testing.T) {
	for _, c := range [][3]uint64{{0, 0, 0}, {1, 2, 3}, {1 << 63, 1<<64 - 1, 12345678}} {
		k := AppendBlockKey(nil, c[0], c[1], c[2])
		a, b, o, err := BlockKeyParts(k)
		if err != nil || a != c[0] || b != c[1] || o != c[2] {
			t.Fatalf("%v: got %d %d %d %v", c, a, b, o, err)
		}
		if _, _, _, err := BlockKeyParts(append(k, 0)); err == nil {
			t.Fatal("trailing byte accepted")
		}
		if _, _, _, err := BlockKeyParts(k[:len(k)-1]); err == nil {
			t.Fatal("truncated key accepted")
		}
	}
}

// FuzzReader feeds arbitrary bytes to both readers: they must return
// records, io.EOF or a corruption error, never panic; a record the binary
// reader accepts must re-encode to a payload that decodes again.
func FuzzReader(f *testing.F) {
	data, ends := sampleTrace(f, 4)
	f.Add(data)
	f.Add(data[:ends[2]+3])
	var human bytes.Buffer
	hw := NewHumanWriter(&human)
	hw.WriteHeader(Header{StartTimestamp: 1})
	r := makeRecord(2, BlockData)
	hw.WriteRecord(&r)
	hw.Flush()
	f.Add(human.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		if br, err := NewReader(bytes.NewReader(data)); err == nil {
			for {
				rec, err := br.Next()
				if err != nil {
					if err != io.EOF && !IsCorrupt(err) {
						t.Fatalf("binary reader: %v", err)
					}
					break
				}
				var w Writer
				w.WriteRecord(&rec)
				if _, err := decodePayload(w.buf[recordHdrLen:]); err != nil {
					t.Fatalf("re-encoded record does not decode: %v", err)
				}
			}
		} else if !IsCorrupt(err) {
			t.Fatalf("binary header: %v", err)
		}
		if hr, err := NewHumanReader(bytes.NewReader(data)); err == nil {
			for {
				_, err := hr.Next()
				if err != nil {
					if err != io.EOF && !IsCorrupt(err) {
						t.Fatalf("human reader: %v", err)
					}
					break
				}
			}
		} else if !IsCorrupt(err) {
			t.Fatalf("human header: %v", err)
		}
	})
}
