package blob

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

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
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, n)
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

func randomKVs(rng *rand.Rand, n int) [][2][]byte {
	var kvs [][2][]byte
	for i := range n {
		v := make([]byte, rng.IntN(10000))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		kvs = append(kvs, [2][]byte{[]byte(fmt.Sprintf("key%06d", i)), v})
	}
	return kvs
}

func TestFormatRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	kvs := randomKVs(rng, 300) // crosses the writer's buffer size
	b, xs := writeFile(t, 7, kvs)
	r := openBytes(t, b, 7)
	for i, x := range xs {
		enc := x.AppendEncoded(nil)
		y, err := DecodeIndex(enc)
		if err != nil || y != x {
			t.Fatalf("index %+v decoded as %+v, %v", x, y, err)
		}
		buf := make([]byte, x.Len)
		vs, vl, err := r.ReadRecord(buf, x, kvs[i][0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[vs:vs+vl], kvs[i][1]) || x.ValueLen(len(kvs[i][0])) != vl {
			t.Fatalf("record %d: wrong value", i)
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
	kvs := [][2][]byte{{[]byte("a"), []byte("apple")}, {[]byte("b"), bytes.Repeat([]byte("b"), 100)}}
	good, xs := writeFile(t, 3, kvs)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		r, err := NewReader(memFile{bytes.NewReader(b)}, 3, int64(len(b)))
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("byte %d: open error %v is not corruption", i, err)
			}
			continue
		}
		for j, x := range xs {
			buf := make([]byte, x.Len)
			vs, vl, err := r.ReadRecord(buf, x, kvs[j][0])
			if err != nil {
				if !base.IsCorruption(err) {
					t.Fatalf("byte %d: read error %v is not corruption", i, err)
				}
				continue
			}
			if !bytes.Equal(buf[vs:vs+vl], kvs[j][1]) {
				t.Fatalf("byte %d: wrong value returned for record %d", i, j)
			}
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
	for _, b := range [][]byte{nil, {0}, {0, 1, 16}, {1, 1, 16, 20}, {0, 0, 16, 20}, {0, 1, 16, 20, 9}, {0, 1, 3, 20}} {
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
