package filter

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"testing/quick"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// refBlocked is the dumb model of the blocked filter's encoding: the line
// count from the float formula, then each probe's bit set by its absolute
// bit index into a plain bit-per-bool array.
func refBlocked(hashes []uint64, bitsPerKey float64, numProbes int) []byte {
	// Consecutive duplicates count once.
	var distinct []uint64
	for i, h := range hashes {
		if i == 0 || h != hashes[i-1] {
			distinct = append(distinct, h)
		}
	}
	numLines := int(math.Ceil(float64(len(distinct)) * bitsPerKey / 512))
	bitset := make([]bool, numLines*512)
	for _, h := range distinct {
		line := int((uint64(h>>32) * uint64(numLines)) >> 32)
		h2 := uint32(h)
		for i := 0; i < numProbes; i++ {
			bitset[line*512+int(h2>>23)] = true
			h2 *= 0x9e3779b9
		}
	}
	out := make([]byte, numLines*64, numLines*64+2)
	for i, set := range bitset {
		if set {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return append(out, byte(numProbes), 1)
}

func buildBlocked(t testing.TB, hashes []uint64, bitsPerKey float64) (BlockedFilter, []byte) {
	t.Helper()
	b := NewBlockedBuilder(bitsPerKey)
	for _, h := range hashes {
		b.AddHash(h)
	}
	enc := b.Finish(nil)
	f, err := ParseBlocked(enc)
	if err != nil {
		t.Fatalf("ParseBlocked of a built filter: %v", err)
	}
	return f, enc
}

// TestBlockedMatchesModel compares the builder's bytes with refBlocked, and
// checks that the filter answers true for each member.
func TestBlockedMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 300; trial++ {
		// Whole millibits so the model's float formula is exact.
		bpk := float64(1000+rng.IntN(29000)) / 1000
		hashes := make([]uint64, rng.IntN(2000))
		for i := range hashes {
			if i > 0 && rng.IntN(4) == 0 {
				hashes[i] = hashes[i-1] // a repeated user key
			} else {
				hashes[i] = rng.Uint64()
			}
		}
		f, enc := buildBlocked(t, hashes, bpk)
		want := refBlocked(hashes, bpk, chooseBlockedProbes(uint64(math.Round(bpk*1000))))
		if !bytes.Equal(enc, want) {
			t.Fatalf("trial %d (%d hashes, %.3f bits/key): encoding differs from the model", trial, len(hashes), bpk)
		}
		for _, h := range hashes {
			if !f.MayContain(h) {
				t.Fatalf("trial %d: false negative for %#x", trial, h)
			}
		}
	}
}

// TestBlockedNoFalseNegatives is the property over random keys and settings.
func TestBlockedNoFalseNegatives(t *testing.T) {
	prop := func(keys [][]byte, bpkByte uint8) bool {
		b := NewBlockedBuilder(float64(bpkByte) / 8)
		for _, k := range keys {
			b.AddKey(k)
		}
		f, err := ParseBlocked(b.Finish(nil))
		if err != nil {
			return false
		}
		for _, k := range keys {
			if !f.MayContainKey(k) {
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 1000}); err != nil {
		t.Fatal(err)
	}
}

func TestBlockedProbesAndSize(t *testing.T) {
	for _, tc := range []struct {
		bitsPerKey float64
		wantProbes int
	}{
		{math.NaN(), 1}, {-1, 1}, {0, 1}, {1, 1}, {2, 1}, {3, 2}, {5, 3}, {6, 4}, {8, 5},
		{10, 6}, {11, 7}, {12, 8}, {14, 8}, {15, 9}, {16, 9}, {18, 10}, {20, 11},
		{24, 12}, {28, 12}, {28.001, 13}, {30, 13}, {50, 23}, {50.001, 24}, {100, 24}, {1e9, 24},
	} {
		b := NewBlockedBuilder(tc.bitsPerKey)
		b.AddHash(1)
		f, err := ParseBlocked(b.Finish(nil))
		if err != nil {
			t.Fatal(err)
		}
		if f.NumProbes() != tc.wantProbes {
			t.Errorf("bitsPerKey %v: %d probes, want %d", tc.bitsPerKey, f.NumProbes(), tc.wantProbes)
		}
	}

	b := NewBlockedBuilder(10)
	for _, tc := range []struct{ keys, wantLines int }{
		{1, 1}, {51, 1}, {52, 2}, {1000, 20}, {1001, 20}, {1024, 20}, {1025, 21},
	} {
		for i := 0; i < tc.keys; i++ {
			b.AddHash(uint64(i))
		}
		if b.NumKeys() != tc.keys {
			t.Fatalf("NumKeys() = %d, want %d", b.NumKeys(), tc.keys)
		}
		enc := b.Finish(nil)
		if want := tc.wantLines*64 + 2; len(enc) != want {
			t.Errorf("%d keys at 10 bits/key: %d bytes, want %d", tc.keys, len(enc), want)
		}
		if b.NumKeys() != 0 {
			t.Fatalf("Finish did not reset the builder")
		}
	}
}

func TestBlockedDedupeAndAppend(t *testing.T) {
	b := NewBlockedBuilder(10)
	for _, k := range []string{"a", "a", "a", "b", "b", "a"} {
		b.AddKey([]byte(k))
	}
	if b.NumKeys() != 3 {
		t.Fatalf("NumKeys() = %d, want 3 (only consecutive duplicates dropped)", b.NumKeys())
	}
	prefix := []byte("prefix")
	enc := b.Finish(append([]byte(nil), prefix...))
	if !bytes.HasPrefix(enc, prefix) {
		t.Fatalf("Finish clobbered dst")
	}
	f, err := ParseBlocked(enc[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	if !f.MayContainKey([]byte("a")) || !f.MayContainKey([]byte("b")) {
		t.Fatal("false negative")
	}
	// The builder is reusable: a second filter holds only the new keys.
	b.AddKey([]byte("c"))
	f2, err := ParseBlocked(b.Finish(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !f2.MayContainKey([]byte("c")) {
		t.Fatal("false negative after reuse")
	}
}

// TestBlockedEmpty: a builder with no keys writes the bare trailer, which
// parses to a filter that contains nothing, as does the zero value.
func TestBlockedEmpty(t *testing.T) {
	enc := NewBlockedBuilder(10).Finish(nil)
	if !bytes.Equal(enc, []byte{6, blockedFormatV1}) {
		t.Fatalf("empty filter encodes as %x", enc)
	}
	f, err := ParseBlocked(enc)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 1000; i++ {
		h := rng.Uint64()
		if f.MayContain(h) || (BlockedFilter{}).MayContain(h) {
			t.Fatalf("empty filter contains %#x", h)
		}
	}
}

// TestBlockedFPRate is the acceptance bound of the SST filter: at 10
// bits/key over 2^20 keys, 2^20 distinct non-members give an FP rate of at
// most 1.2% (RocksDB's FastLocalBloom measures about 0.96%).
func TestBlockedFPRate(t *testing.T) {
	const salt = 0xb10c
	b := NewBlockedBuilder(10)
	for i := 0; i < fpKeys; i++ {
		b.AddKey(testKey(salt, i))
	}
	f, err := ParseBlocked(b.Finish(nil))
	if err != nil {
		t.Fatal(err)
	}
	fp := 0
	for i := fpKeys; i < 2*fpKeys; i++ {
		if f.MayContainKey(testKey(salt, i)) {
			fp++
		}
	}
	rate := float64(fp) / fpKeys
	t.Logf("BlockedFilter: %d keys, 10 bits/key, %d probes, %d bytes: FP rate %.3f%%",
		fpKeys, f.NumProbes(), f.SizeBytes(), 100*rate)
	if rate > 0.012 {
		t.Fatalf("FP rate %.3f%% above 1.2%%", 100*rate)
	}
}

// cacheLocalFPRate is RocksDB's BloomMath::CacheLocalFpRate estimate for a
// Bloom filter whose probes share one 512-bit line.
func cacheLocalFPRate(bitsPerKey float64, numProbes int) float64 {
	standard := func(bpk float64) float64 {
		return math.Pow(1-math.Exp(-float64(numProbes)/bpk), float64(numProbes))
	}
	keysPerLine := 512 / bitsPerKey
	sd := math.Sqrt(keysPerLine)
	return (standard(512/(keysPerLine+sd)) + standard(512/(keysPerLine-sd))) / 2
}

// TestBlockedFPRateMatchesTheory checks the filter's quality across settings:
// the measured FP rate is within 30% of the cache-local Bloom estimate.
func TestBlockedFPRateMatchesTheory(t *testing.T) {
	const keys, queries = 100000, 1000000
	for _, bpk := range []float64{4, 6, 8, 10, 14, 20} {
		b := NewBlockedBuilder(bpk)
		for i := 0; i < keys; i++ {
			b.AddKey(testKey(uint64(bpk), i))
		}
		f, err := ParseBlocked(b.Finish(nil))
		if err != nil {
			t.Fatal(err)
		}
		fp := 0
		for i := keys; i < keys+queries; i++ {
			if f.MayContainKey(testKey(uint64(bpk), i)) {
				fp++
			}
		}
		got, want := float64(fp)/queries, cacheLocalFPRate(bpk, f.NumProbes())
		t.Logf("%v bits/key, %d probes: FP rate %.4f%%, estimate %.4f%%", bpk, f.NumProbes(), 100*got, 100*want)
		if got > 1.3*want || got < want/1.3 {
			t.Errorf("%v bits/key: FP rate %.4f%% vs estimate %.4f%%", bpk, 100*got, 100*want)
		}
	}
}

func TestParseBlockedErrors(t *testing.T) {
	valid := func(lines int, probes byte) []byte {
		return append(make([]byte, 64*lines), probes, blockedFormatV1)
	}
	for name, data := range map[string][]byte{
		"nil":             nil,
		"one byte":        {blockedFormatV1},
		"unknown format":  append(make([]byte, 64), 6, 2),
		"format zero":     append(make([]byte, 64), 6, 0),
		"zero probes":     valid(1, 0),
		"too many probes": valid(1, blockedMaxProbes+1),
		"partial line":    valid(2, 6)[1:],
		"extra byte":      append([]byte{0}, valid(1, 6)...),
	} {
		_, err := ParseBlocked(data)
		if !base.IsCorruption(err) {
			t.Errorf("%s: err = %v, want a corruption error", name, err)
		}
	}
	for _, data := range [][]byte{valid(0, 1), valid(1, 1), valid(3, blockedMaxProbes)} {
		if _, err := ParseBlocked(data); err != nil {
			t.Errorf("ParseBlocked(%d bytes): %v", len(data), err)
		}
	}
}

// TestParseBlockedDamage truncates and bit-flips a real filter at every
// position: each result is an error or a filter that answers queries.
func TestParseBlockedDamage(t *testing.T) {
	hashes := make([]uint64, 200)
	for i := range hashes {
		hashes[i] = Hash(testKey(9, i))
	}
	_, enc := buildBlocked(t, hashes, 10)
	check := func(data []byte) {
		f, err := ParseBlocked(data)
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("error %v is not a corruption error", err)
			}
			return
		}
		if f.SizeBytes()+blockedTrailerLen != len(data) {
			t.Fatalf("filter of %d bytes parsed from %d", f.SizeBytes(), len(data))
		}
		for _, h := range hashes {
			f.MayContain(h)
		}
	}
	for n := 0; n <= len(enc); n++ {
		check(enc[:n])
		check(enc[n:])
	}
	for i := 0; i < 8*len(enc); i++ {
		damaged := bytes.Clone(enc)
		damaged[i/8] ^= 1 << (i % 8)
		check(damaged)
	}
}

func FuzzParseBlocked(f *testing.F) {
	b := NewBlockedBuilder(10)
	f.Add(b.Finish(nil))
	for _, n := range []int{1, 60, 500} {
		for i := 0; i < n; i++ {
			b.AddHash(Hash(testKey(10, i)))
		}
		enc := b.Finish(nil)
		f.Add(enc)
		f.Add(enc[:len(enc)-1])
		f.Add(enc[1:])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add(append(make([]byte, 64), 0, 1))
	f.Add(append(make([]byte, 64), 255, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		flt, err := ParseBlocked(data)
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("error %v is not a corruption error", err)
			}
			return
		}
		if flt.SizeBytes()+blockedTrailerLen != len(data) || flt.NumProbes() == 0 {
			t.Fatalf("bad parse: %d bytes, %d probes from %d", flt.SizeBytes(), flt.NumProbes(), len(data))
		}
		for i := 0; i+8 <= len(data); i += 8 {
			flt.MayContain(binary.LittleEndian.Uint64(data[i:]))
		}
		flt.MayContain(0)
		flt.MayContain(math.MaxUint64)
	})
}

// FuzzBlockedNoFalseNegatives builds a filter over keys cut from the input
// and checks each is found after a round trip through the encoding.
func FuzzBlockedNoFalseNegatives(f *testing.F) {
	f.Add([]byte("a,b,c,,dd,a"), uint8(80))
	f.Add([]byte(""), uint8(0))
	f.Add(bytes.Repeat([]byte("k,"), 300), uint8(10))
	f.Fuzz(func(t *testing.T, data []byte, bpk uint8) {
		keys := bytes.Split(data, []byte(","))
		b := NewBlockedBuilder(float64(bpk) / 8)
		for _, k := range keys {
			b.AddKey(k)
		}
		flt, err := ParseBlocked(b.Finish(nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !flt.MayContainKey(k) {
				t.Fatalf("false negative for %q", k)
			}
		}
	})
}
