package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// span is a byte range [start, end) of a log.
type span struct{ start, end int64 }

// layout is where the format puts a record of size n written at offset pos
// of the log (pos being Writer.Size before the write): its fragments, in
// order. It is computed from the format's rules alone, independently of the
// Writer.
func layout(pos int64, n int) (frags []span) {
	for first := true; first || n > 0; first = false {
		if left := BlockSize - pos%BlockSize; left < HeaderSize {
			pos += left
		}
		frag := min(int64(n), BlockSize-pos%BlockSize-HeaderSize)
		frags = append(frags, span{pos, pos + HeaderSize + frag})
		pos += HeaderSize + frag
		n -= int(frag)
	}
	return frags
}

// testLog is a log written by the Writer, with what the format says about it.
type testLog struct {
	data    []byte
	records [][]byte
	frags   [][]span // frags[i]: the fragments of record i
}

func (l *testLog) start(i int) int64 { return l.frags[i][0].start }
func (l *testLog) end(i int) int64   { return l.frags[i][len(l.frags[i])-1].end }

func writeLog(t testing.TB, records [][]byte) *testLog {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	l := &testLog{records: records}
	for i, r := range records {
		frags := layout(w.Size(), len(r))
		off, err := w.WriteRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if off != frags[0].start {
			t.Fatalf("record %d (%d bytes) at offset %d, want %d", i, len(r), off, frags[0].start)
		}
		l.frags = append(l.frags, frags)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != w.Size() {
		t.Fatalf("wrote %d bytes, Size() = %d", buf.Len(), w.Size())
	}
	l.data = buf.Bytes()
	return l
}

// readAll reads records until an error.
func readAll(data []byte, opts ...ReaderOption) (*Reader, [][]byte, error) {
	r := NewReader(bytes.NewReader(data), opts...)
	var recs [][]byte
	for {
		rec, err := r.Next()
		if err != nil {
			return r, recs, err
		}
		recs = append(recs, bytes.Clone(rec))
	}
}

func randRecord(rng *rand.Rand, maxLen int) []byte {
	p := make([]byte, rng.IntN(maxLen+1))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

func equalRecords(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: got %d bytes, want %d (contents differ)", i, len(got[i]), len(want[i]))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		var records [][]byte
		for i := 0; i < 60; i++ {
			switch rng.IntN(10) {
			case 0:
				records = append(records, randRecord(rng, 200<<10))
			case 1, 2:
				records = append(records, randRecord(rng, 2*BlockSize))
			case 3:
				records = append(records, []byte{})
			default:
				records = append(records, randRecord(rng, 300))
			}
		}
		l := writeLog(t, records)
		r, got, err := readAll(l.data)
		if err != io.EOF {
			t.Fatalf("seed %d: %v", seed, err)
		}
		equalRecords(t, got, records)
		if r.TornTail() || r.TornOffset() != -1 {
			t.Fatalf("seed %d: clean log reported torn at %d", seed, r.TornOffset())
		}
		if r.LastRecordOffset() != l.start(len(records)-1) {
			t.Fatalf("LastRecordOffset = %d, want %d", r.LastRecordOffset(), l.start(len(records)-1))
		}
		if r.EndOffset() != int64(len(l.data)) {
			t.Fatalf("EndOffset at EOF = %d, want the log's size %d", r.EndOffset(), len(l.data))
		}
		// Record by record, EndOffset is where the format puts the end of
		// the record's last fragment.
		r = NewReader(bytes.NewReader(l.data))
		if r.EndOffset() != 0 {
			t.Fatalf("EndOffset before the first record = %d", r.EndOffset())
		}
		for i := range records {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			if r.EndOffset() != l.end(i) {
				t.Fatalf("seed %d record %d: EndOffset = %d, want %d", seed, i, r.EndOffset(), l.end(i))
			}
		}
	}
}

// TestBlockBoundaries writes, after a filler that leaves k bytes in the
// block, records of sizes around what fits, so that every case of padding
// and exact fit occurs.
func TestBlockBoundaries(t *testing.T) {
	for k := 0; k <= 2*HeaderSize+2; k++ {
		for _, size := range []int{0, 1, k - HeaderSize - 1, k - HeaderSize, k - HeaderSize + 1, BlockSize - HeaderSize, BlockSize} {
			if size < 0 {
				continue
			}
			filler := BlockSize - HeaderSize - k
			records := [][]byte{bytes.Repeat([]byte{'f'}, filler), bytes.Repeat([]byte{'x'}, size), []byte("after")}
			l := writeLog(t, records)
			_, got, err := readAll(l.data)
			if err != io.EOF {
				t.Fatalf("k=%d size=%d: %v", k, size, err)
			}
			equalRecords(t, got, records)
		}
	}
}

func TestWriterFlush(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.WriteRecord([]byte("hello"))
	if buf.Len() != 0 {
		t.Fatalf("unflushed bytes reached the writer: %d", buf.Len())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != w.Size() || w.Size() != HeaderSize+5 {
		t.Fatalf("after Flush: %d bytes written, Size %d", buf.Len(), w.Size())
	}
	// A record larger than a block reaches the writer block by block.
	w.WriteRecord(make([]byte, 3*BlockSize))
	if buf.Len() != 3*BlockSize {
		t.Fatalf("after a large record: %d bytes written", buf.Len())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != w.Size() {
		t.Fatalf("after Close: %d bytes written, Size %d", buf.Len(), w.Size())
	}
	if _, err := w.WriteRecord(nil); err == nil {
		t.Fatal("WriteRecord after Close succeeded")
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("disk on fire")
	}
	f.after--
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	w := NewWriter(&failingWriter{after: 1})
	if _, err := w.WriteRecord(make([]byte, BlockSize)); err != nil {
		t.Fatal(err) // the first block is written
	}
	if _, err := w.WriteRecord(make([]byte, BlockSize)); err == nil {
		t.Fatal("write error not reported")
	}
	if _, err := w.WriteRecord([]byte("x")); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("later WriteRecord = %v", err)
	}
	if err := w.Flush(); err == nil {
		t.Fatal("Flush after a write error succeeded")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a write error succeeded")
	}
}

type failingReader struct {
	r     io.Reader
	after int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("EIO")
	}
	f.after--
	return f.r.Read(p)
}

func TestReaderIOError(t *testing.T) {
	l := writeLog(t, [][]byte{make([]byte, 3*BlockSize)})
	r := NewReader(&failingReader{r: bytes.NewReader(l.data), after: 1})
	_, err := r.Next()
	if err == nil || err == io.EOF || base.IsCorruption(err) || !strings.Contains(err.Error(), "EIO") {
		t.Fatalf("Next = %v", err)
	}
	if _, err2 := r.Next(); err2 != err {
		t.Fatalf("error not sticky: %v then %v", err, err2)
	}
}

// smallLog has records of assorted sizes, some crossing blocks when
// multiBlock is set.
func smallLog(t testing.TB, seed uint64, n int, multiBlock bool) *testLog {
	rng := rand.New(rand.NewPCG(seed, 2))
	var records [][]byte
	for i := 0; i < n; i++ {
		max := 200
		if multiBlock && i%3 == 1 {
			max = BlockSize + 5000
		}
		records = append(records, randRecord(rng, max))
	}
	return writeLog(t, records)
}

// checkTruncated checks reading l.data[:cut]: exactly the records that end
// at or before cut, then io.EOF, torn unless only zeros were dropped.
func checkTruncated(t *testing.T, l *testLog, cut int64) {
	t.Helper()
	complete := 0
	for complete < len(l.records) && l.end(complete) <= cut {
		complete++
	}
	completeEnd := int64(0)
	if complete > 0 {
		completeEnd = l.end(complete - 1)
	}
	r, got, err := readAll(l.data[:cut])
	if err != io.EOF {
		t.Fatalf("cut %d: %v", cut, err)
	}
	equalRecords(t, got, l.records[:complete])
	wantTorn := cut > completeEnd && !allZero(l.data[completeEnd:cut])
	if r.TornTail() != wantTorn {
		t.Fatalf("cut %d: TornTail %v, want %v", cut, r.TornTail(), wantTorn)
	}
	if wantTorn && r.TornOffset() != l.start(complete) {
		t.Fatalf("cut %d: TornOffset %d, want %d", cut, r.TornOffset(), l.start(complete))
	}
}

func TestTornTailEveryCut(t *testing.T) {
	l := smallLog(t, 1, 40, false) // about 4 KB, one block
	for cut := int64(0); cut <= int64(len(l.data)); cut++ {
		checkTruncated(t, l, cut)
	}
}

func TestTornTailMultiBlock(t *testing.T) {
	l := smallLog(t, 2, 12, true)
	if len(l.data) < 3*BlockSize {
		t.Fatalf("log too small: %d", len(l.data))
	}
	cuts := map[int64]bool{}
	near := func(p int64) {
		for d := int64(-HeaderSize - 2); d <= HeaderSize+2; d++ {
			if c := p + d; c >= 0 && c <= int64(len(l.data)) {
				cuts[c] = true
			}
		}
	}
	for _, frags := range l.frags {
		for _, f := range frags {
			near(f.start)
			near(f.end)
		}
	}
	for b := int64(0); b <= int64(len(l.data)); b += BlockSize {
		near(b)
	}
	stride := int64(211)
	if testing.Short() {
		stride = 997
	}
	for c := int64(0); c <= int64(len(l.data)); c += stride {
		cuts[c] = true
	}
	for c := range cuts {
		checkTruncated(t, l, c)
	}
}

// recordAt returns the record whose fragment holds byte p, or -1 for padding.
func (l *testLog) recordAt(p int64) int {
	for i, frags := range l.frags {
		for _, f := range frags {
			if f.start <= p && p < f.end {
				return i
			}
		}
	}
	return -1
}

// checkFlipped checks reading l.data with byte p xor-ed with mask: the
// records before the damaged one, then corruption naming its offset (or
// io.EOF and a torn tail if it is the last record).
func checkFlipped(t *testing.T, l *testLog, p int64, mask byte) {
	t.Helper()
	data := bytes.Clone(l.data)
	data[p] ^= mask
	k := l.recordAt(p)
	r, got, err := readAll(data)
	desc := fmt.Sprintf("byte %d ^ %#x (record %d of %d)", p, mask, k, len(l.records))
	switch {
	case k < 0: // padding is not read
		if err != io.EOF || r.TornTail() {
			t.Fatalf("%s: %v torn=%v", desc, err, r.TornTail())
		}
		equalRecords(t, got, l.records)
	case k == len(l.records)-1:
		if err != io.EOF || !r.TornTail() || r.TornOffset() != l.start(k) {
			t.Fatalf("%s: %v torn=%v at %d", desc, err, r.TornTail(), r.TornOffset())
		}
		equalRecords(t, got, l.records[:k])
	default:
		var ce *CorruptionError
		if !base.IsCorruption(err) || !errors.As(err, &ce) {
			t.Fatalf("%s: got %v, want corruption", desc, err)
		}
		if ce.Offset != l.start(k) || ce.NextRecord <= ce.Offset || ce.NextRecord > l.start(k+1) {
			t.Fatalf("%s: %v, want damage at %d", desc, err, l.start(k))
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("offset %d", l.start(k))) {
			t.Fatalf("%s: message does not name the offset: %v", desc, err)
		}
		equalRecords(t, got, l.records[:k])
	}
	// Point-in-time recovery stops at the damage, whatever follows.
	r, got, err = readAll(data, WithPointInTimeRecovery())
	if k < 0 {
		equalRecords(t, got, l.records)
		return
	}
	if err != io.EOF || !r.TornTail() || r.TornOffset() != l.start(k) {
		t.Fatalf("%s, point in time: %v torn=%v at %d", desc, err, r.TornTail(), r.TornOffset())
	}
	equalRecords(t, got, l.records[:k])
}

func TestFlippedByteEveryPosition(t *testing.T) {
	l := smallLog(t, 3, 12, false)
	for p := int64(0); p < int64(len(l.data)); p++ {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			checkFlipped(t, l, p, mask)
		}
	}
}

func TestFlippedByteMultiBlock(t *testing.T) {
	l := smallLog(t, 4, 12, true)
	rng := rand.New(rand.NewPCG(4, 4))
	for _, frags := range l.frags {
		for _, f := range frags {
			for p := f.start; p < f.start+HeaderSize; p++ { // every header byte
				checkFlipped(t, l, p, 0x10)
			}
			for i := 0; i < 4 && f.end > f.start+HeaderSize; i++ { // some payload bytes
				checkFlipped(t, l, f.start+HeaderSize+rng.Int64N(f.end-f.start-HeaderSize), byte(1+rng.IntN(255)))
			}
		}
	}
	// The padding bytes at the end of blocks.
	for b := int64(BlockSize); b < int64(len(l.data)); b += BlockSize {
		for p := b - HeaderSize; p < b; p++ {
			if l.recordAt(p) < 0 {
				checkFlipped(t, l, p, 0xff)
			}
		}
	}
}

func TestZeroFilledTail(t *testing.T) {
	l := smallLog(t, 5, 20, true)
	for _, zeros := range []int{1, 6, 7, 8, 100, BlockSize, 3*BlockSize + 17} {
		data := append(bytes.Clone(l.data), make([]byte, zeros)...)
		r, got, err := readAll(data)
		if err != io.EOF || r.TornTail() {
			t.Fatalf("%d zeros: %v torn=%v", zeros, err, r.TornTail())
		}
		equalRecords(t, got, l.records)
	}
	// A torn record followed by zeros (a preallocated file): torn tail.
	last := len(l.records) - 1
	cut := l.end(last) - 1
	data := append(bytes.Clone(l.data[:cut]), make([]byte, 2*BlockSize)...)
	r, got, err := readAll(data)
	if err != io.EOF || !r.TornTail() || r.TornOffset() != l.start(last) {
		t.Fatalf("torn then zeros: %v torn=%v at %d", err, r.TornTail(), r.TornOffset())
	}
	equalRecords(t, got, l.records[:last])
	// Zeros then garbage: the garbage was written, so the tail is torn.
	data = append(bytes.Clone(l.data), make([]byte, 100)...)
	data = append(data, 0xde, 0xad)
	if r, _, err := readAll(data); err != io.EOF || !r.TornTail() {
		t.Fatalf("zeros then garbage: %v torn=%v", err, r.TornTail())
	}
}

func TestZeroedHoleIsCorruption(t *testing.T) {
	l := smallLog(t, 6, 20, false)
	for k := 0; k < len(l.records)-1; k++ {
		data := bytes.Clone(l.data)
		clear(data[l.start(k):l.end(k)])
		_, got, err := readAll(data)
		if !base.IsCorruption(err) {
			t.Fatalf("record %d zeroed: %v", k, err)
		}
		equalRecords(t, got, l.records[:k])
	}
}

func TestIncompleteRecordFollowedByRecord(t *testing.T) {
	// A FIRST fragment whose MIDDLE/LAST are missing, followed by valid
	// records: the records were written after the damage.
	big := writeLog(t, [][]byte{[]byte("a"), make([]byte, 2*BlockSize)})
	data := bytes.Clone(big.data[:BlockSize]) // record 0, then record 1's FIRST
	tail := writeLog(t, [][]byte{[]byte("later")})
	data = append(data, tail.data...)
	_, got, err := readAll(data)
	var ce *CorruptionError
	if !errors.As(err, &ce) || !base.IsCorruption(err) || ce.Offset != big.start(1) || ce.NextRecord != BlockSize {
		t.Fatalf("got %v", err)
	}
	equalRecords(t, got, big.records[:1])
}

func TestOrphanFragmentsOfTornLastRecord(t *testing.T) {
	// The FIRST fragment of the last record is damaged but its later
	// fragments reached the disk: still a torn tail.
	l := writeLog(t, [][]byte{[]byte("a"), make([]byte, 3*BlockSize)})
	data := bytes.Clone(l.data)
	data[l.start(1)+HeaderSize] ^= 1
	r, got, err := readAll(data)
	if err != io.EOF || !r.TornTail() || r.TornOffset() != l.start(1) {
		t.Fatalf("got %v torn=%v at %d", err, r.TornTail(), r.TornOffset())
	}
	equalRecords(t, got, l.records[:1])
}

func TestEmptyAndGarbage(t *testing.T) {
	if r, got, err := readAll(nil); err != io.EOF || len(got) != 0 || r.TornTail() {
		t.Fatalf("empty: %v %d %v", err, len(got), r.TornTail())
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 50; i++ {
		data := randRecord(rng, 3*BlockSize)
		r, got, err := readAll(data)
		// Random bytes essentially never hold a valid fragment: a torn tail
		// at offset 0 unless they are empty.
		if len(data) > 0 && (err != io.EOF || len(got) != 0 || !r.TornTail() || r.TornOffset() != 0) {
			t.Fatalf("garbage: %v %d torn=%v", err, len(got), r.TornTail())
		}
	}
}

// TestDocExample checks the example of the package documentation.
func TestDocExample(t *testing.T) {
	l := writeLog(t, [][]byte{make([]byte, 40000), []byte("next")})
	want := [][]span{{{0, 32768}, {32768, 32768 + HeaderSize + 7239}}, {{40014, 40014 + HeaderSize + 4}}}
	for i := range want {
		if fmt.Sprint(l.frags[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("record %d: fragments %v, want %v", i, l.frags[i], want[i])
		}
	}
	if l.data[6] != firstType || l.data[32768+6] != lastType || l.data[40014+6] != fullType {
		t.Fatal("fragment types")
	}
}

// TestEndOffsetIsWriterSize: after each record, the writer's Size (what a
// WAL records as synced once it syncs) equals the reader's EndOffset when
// it has read that record, padding of a full block included. A WAL whose
// last record ended within HeaderSize of its block's end was refused at
// Open: EndOffset stopped before the padding the synced size counted.
func TestEndOffsetIsWriterSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 200 {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		var sizes []int64
		for range 1 + rng.IntN(20) {
			// Sizes that end records at every distance from a block's end.
			n := rng.IntN(BlockSize + 2*HeaderSize)
			if rng.IntN(2) == 0 {
				n = BlockSize - int(w.Size()%BlockSize) - HeaderSize - rng.IntN(2*HeaderSize)
				n = max(n, 0)
			}
			if _, err := w.WriteRecord(make([]byte, n)); err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, w.Size())
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(buf.Bytes()))
		for i, want := range sizes {
			if _, err := r.Next(); err != nil {
				t.Fatalf("trial %d record %d: %v", trial, i, err)
			}
			if got := r.EndOffset(); got != want {
				t.Fatalf("trial %d record %d: EndOffset %d, writer Size %d", trial, i, got, want)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("trial %d: after the records: %v", trial, err)
		}
		if got, want := r.EndOffset(), int64(buf.Len()); got != want || r.TornTail() {
			t.Fatalf("trial %d: at EOF EndOffset %d (torn %v), log of %d bytes", trial, got, r.TornTail(), want)
		}
	}
}
