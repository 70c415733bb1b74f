package sst

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

func buildBlock(entries []kv, restartInterval int) []byte {
	w := blockWriter{restartInterval: restartInterval}
	for _, e := range entries {
		w.add(e.key, e.value)
	}
	return slices.Clone(w.finish())
}

// randomEntries returns n sorted entries with distinct internal keys.
func randomEntries(rng *rand.Rand, n int) []kv {
	seen := make(map[string]bool)
	var out []kv
	for len(out) < n {
		var uk []byte
		switch rng.IntN(4) {
		case 0:
			uk = fmt.Appendf(nil, "%d", rng.IntN(1000))
		case 1:
			uk = fmt.Appendf(nil, "prefix/%04d/%s", rng.IntN(100), bytes.Repeat([]byte("z"), rng.IntN(5)))
		case 2:
			// Long keys exercise the heap key buffer.
			uk = append(bytes.Repeat([]byte("L"), inlineKeyLen-10+rng.IntN(30)), byte(rng.IntN(256)))
		default:
			uk = []byte{byte(rng.IntN(4)), byte(rng.IntN(256))}
		}
		k := base.MakeInternalKey(nil, uk, base.SeqNum(rng.IntN(20)), []base.Kind{base.KindSet, base.KindDelete, base.KindBlobIndex}[rng.IntN(3)])
		if seen[string(base.UserKey(k))+fmt.Sprint(base.DecodeTrailer(k).SeqNum())] {
			continue
		}
		seen[string(base.UserKey(k))+fmt.Sprint(base.DecodeTrailer(k).SeqNum())] = true
		out = append(out, kv{k, fmt.Appendf(nil, "v%d", rng.IntN(1<<20))})
	}
	slices.SortFunc(out, func(a, b kv) int { return base.InternalCompare(a.key, b.key) })
	return out
}

func blockEntries(it *blockIter, forward bool) []kv {
	var out []kv
	if forward {
		for it.first(); it.valid; it.next() {
			out = append(out, kv{slices.Clone(it.key()), slices.Clone(it.value())})
		}
	} else {
		for it.last(); it.valid; it.prev() {
			out = append(out, kv{slices.Clone(it.key()), slices.Clone(it.value())})
		}
		slices.Reverse(out)
	}
	return out
}

func TestBlockRoundTrip(t *testing.T) {
	for _, interval := range []int{1, 2, 3, 16, 1000} {
		for seed := uint64(0); seed < 5; seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(interval)))
			entries := randomEntries(rng, 1+rng.IntN(300))
			block := buildBlock(entries, interval)
			n, err := verifyBlock(block, dataBlockKind, nil, nil)
			if err != nil || n != len(entries) {
				t.Fatalf("interval %d seed %d: verifyBlock = %d, %v; want %d entries", interval, seed, n, err, len(entries))
			}
			it, err := newBlockIter(block)
			if err != nil {
				t.Fatal(err)
			}
			if got := blockEntries(it, true); !equalKVs(got, entries) {
				t.Fatalf("interval %d seed %d: forward iteration differs", interval, seed)
			}
			if got := blockEntries(it, false); !equalKVs(got, entries) {
				t.Fatalf("interval %d seed %d: backward iteration differs", interval, seed)
			}
			for q := 0; q < 500; q++ {
				target := randomTarget(rng, entries)
				ge := modelSeekGE(entries, target)
				var pos int
				if rng.IntN(2) == 0 {
					it.seekGE(target)
					pos = ge
				} else {
					it.seekLT(target)
					pos = ge - 1
				}
				// Then wander and compare with the model at each step.
				for step := 0; step < 5; step++ {
					if want := pos >= 0 && pos < len(entries); it.valid != want {
						t.Fatalf("interval %d seed %d: target %s step %d: valid %v, want %v", interval, seed, base.FormatInternalKey(target), step, it.valid, want)
					}
					if !it.valid {
						break
					}
					if !bytes.Equal(it.key(), entries[pos].key) || !bytes.Equal(it.value(), entries[pos].value) {
						t.Fatalf("interval %d seed %d: at %s, want %s", interval, seed, base.FormatInternalKey(it.key()), base.FormatInternalKey(entries[pos].key))
					}
					if rng.IntN(2) == 0 {
						it.next()
						pos++
					} else {
						it.prev()
						pos--
					}
				}
				if it.err != nil {
					t.Fatal(it.err)
				}
			}
		}
	}
}

// randomTarget returns an existing key, a neighbour of one, or a random key.
func randomTarget(rng *rand.Rand, entries []kv) []byte {
	e := entries[rng.IntN(len(entries))].key
	switch rng.IntN(4) {
	case 0:
		return e
	case 1:
		return base.MakeInternalKey(nil, base.UserKey(e), base.SeqNum(rng.IntN(22)), base.KindMax)
	case 2:
		return base.MakeInternalKey(nil, append(slices.Clone(base.UserKey(e)), byte(rng.IntN(3))), base.SeqNum(rng.IntN(22)), base.KindSet)
	default:
		return base.MakeInternalKey(nil, []byte{byte(rng.IntN(256))}, base.SeqNumMax, base.KindMax)
	}
}

func TestEmptyBlock(t *testing.T) {
	block := buildBlock(nil, 16)
	if !bytes.Equal(block, []byte{0, 0, 0, 0}) {
		t.Fatalf("empty block = %x", block)
	}
	if n, err := verifyBlock(block, dataBlockKind, nil, nil); n != 0 || err != nil {
		t.Fatalf("verifyBlock(empty) = %d, %v", n, err)
	}
	it, err := newBlockIter(block)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []func(){it.first, it.last, func() { it.seekGE(base.MakeInternalKey(nil, []byte("a"), 1, 1)) },
		func() { it.seekLT(base.MakeInternalKey(nil, []byte("a"), 1, 1)) }} {
		if op(); it.valid || it.err != nil {
			t.Fatal("positioned in an empty block")
		}
	}
	var zero blockIter
	if zero.first(); zero.valid {
		t.Fatal("zero blockIter is valid")
	}
}

// mutateBlock applies f to a copy of block.
func mutateBlock(block []byte, f func(b []byte) []byte) []byte { return f(slices.Clone(block)) }

func TestVerifyBlockRejectsMalformed(t *testing.T) {
	k := func(uk string, seq base.SeqNum, kind base.Kind) []byte {
		return base.MakeInternalKey(nil, []byte(uk), seq, kind)
	}
	entries := []kv{{k("apple", 3, base.KindSet), []byte("1")}, {k("apricot", 2, base.KindSet), []byte("2")},
		{k("banana", 1, base.KindDelete), nil}, {k("bandana", 9, base.KindSet), []byte("4")}}
	good := buildBlock(entries, 2)
	if _, err := verifyBlock(good, dataBlockKind, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Bounds from the index: above the previous separator, up to this one.
	if _, err := verifyBlock(good, dataBlockKind, k("apple", 4, base.KindSet), k("bandana", 9, base.KindSet)); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][2][]byte{{k("apple", 3, base.KindSet), nil}, {k("apple", 2, base.KindSet), nil}, {nil, k("bandana", 10, base.KindSet)}, {nil, k("b", 1, base.KindSet)}} {
		if _, err := verifyBlock(good, dataBlockKind, b[0], b[1]); !base.IsCorruption(err) {
			t.Fatalf("verifyBlock within (%q, %q]: %v", b[0], b[1], err)
		}
	}
	restarts := len(good) - 4 - 8 // two restart points
	second := int(binary.LittleEndian.Uint32(good[restarts+4:]))
	setU32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	}
	cases := []struct {
		name  string
		block []byte
		kind  blockKind
	}{
		{"too short", []byte{1, 0}, dataBlockKind},
		{"restart count too large", mutateBlock(good, setU32(len(good)-4, 1000)), dataBlockKind},
		{"no restarts but entries", mutateBlock(good, func(b []byte) []byte {
			return binary.LittleEndian.AppendUint32(b[:restarts], 0)
		}), dataBlockKind},
		{"first restart not 0", mutateBlock(good, setU32(restarts, 1)), dataBlockKind},
		{"restart out of range", mutateBlock(good, setU32(restarts+4, uint32(restarts))), dataBlockKind},
		{"restarts not increasing", mutateBlock(good, setU32(restarts+4, 0)), dataBlockKind},
		{"restart inside an entry", mutateBlock(good, setU32(restarts+4, uint32(second-1))), dataBlockKind},
		{"shared longer than previous key", mutateBlock(good, func(b []byte) []byte {
			// Entry 0 is 3 header bytes, a 13-byte key and a 1-byte
			// value; entry 1 (no restart point) starts at 17.
			b[17] = 100
			return b
		}), dataBlockKind},
		{"value overruns", mutateBlock(good, func(b []byte) []byte { b[2] = 0x7f; return b }), dataBlockKind},
		{"bad varint", mutateBlock(good, func(b []byte) []byte { copy(b, []byte{0x80, 0x80, 0x80, 0x80, 0x80}); return b }), dataBlockKind},
		{"out of order", buildBlock([]kv{entries[1], entries[0]}, 1), dataBlockKind},
		{"duplicate key", buildBlock([]kv{entries[0], entries[0]}, 1), dataBlockKind},
		{"range deletion in a data block", buildBlock([]kv{{k("a", 1, base.KindRangeDelete), []byte("b")}}, 1), dataBlockKind},
		{"short key", buildBlock([]kv{{[]byte("abc"), nil}}, 1), indexBlockKind},
		{"set in a range deletion block", buildBlock(entries[:1], 1), rangeDelBlockKind},
		{"names out of order", buildBlock([]kv{{[]byte("b"), nil}, {[]byte("a"), nil}}, 1), metaBlockKind},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verifyBlock(tc.block, tc.kind, nil, nil)
			if !base.IsCorruption(err) {
				t.Fatalf("verifyBlock = %v, want a corruption error", err)
			}
			exerciseRawBlock(t, tc.block)
		})
	}
}

// exerciseRawBlock runs every iterator operation over unverified bytes: it
// must not panic or loop, and errors must be corruption errors.
func exerciseRawBlock(t testing.TB, data []byte) {
	check := func(it *blockIter) {
		if it.err != nil && !base.IsCorruption(it.err) {
			t.Fatalf("non-corruption error %v", it.err)
		}
	}
	var it blockIter
	if err := it.init(data); err != nil {
		check(&it)
		return
	}
	limit := len(data) + 1 // Every entry takes at least 3 bytes.
	steps := 0
	for it.first(); it.valid && steps < limit; it.next() {
		steps++
	}
	check(&it)
	if steps >= limit {
		t.Fatal("forward iteration does not terminate")
	}
	steps = 0
	for it.last(); it.valid && steps < limit; it.prev() {
		steps++
	}
	check(&it)
	if steps >= limit {
		t.Fatal("backward iteration does not terminate")
	}
	for _, target := range [][]byte{nil, []byte("a"), base.MakeInternalKey(nil, []byte("m"), 5, base.KindSet),
		base.MakeInternalKey(nil, []byte("\xff\xff"), 0, 0)} {
		it.err = nil
		it.seekGE(target)
		if it.valid {
			it.next()
		}
		check(&it)
		it.err = nil
		it.seekLT(target)
		if it.valid {
			it.prev()
		}
		check(&it)
	}
	if _, err := newBlockIter(data); err != nil && !base.IsCorruption(err) {
		t.Fatalf("newBlockIter: %v", err)
	}
}

// FuzzBlockDecode feeds arbitrary bytes to the block iterator and verifier.
// Unverified bytes never panic; a block that verifies yields its entries in
// strictly increasing order, the same forward and backward, and seeks agree
// with a scan.
func FuzzBlockDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, interval := range []int{1, 4, 16} {
		f.Add(buildBlock(randomEntries(rng, 1+rng.IntN(40)), interval))
	}
	f.Add(buildBlock(nil, 16))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{0, 9, 0, 'k', 'e', 'y', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		exerciseRawBlock(t, data)
		n, err := verifyBlock(data, dataBlockKind, nil, nil)
		if err != nil {
			if !base.IsCorruption(err) {
				t.Fatalf("verifyBlock: %v", err)
			}
			return
		}
		it, err := newBlockIter(data)
		if err != nil {
			t.Fatalf("verified block rejected by newBlockIter: %v", err)
		}
		fwd := blockEntries(it, true)
		if len(fwd) != n || it.err != nil {
			t.Fatalf("forward: %d entries (err %v), verifyBlock counted %d", len(fwd), it.err, n)
		}
		for i := 1; i < len(fwd); i++ {
			if base.InternalCompare(fwd[i-1].key, fwd[i].key) >= 0 {
				t.Fatalf("keys out of order: %s then %s", base.FormatInternalKey(fwd[i-1].key), base.FormatInternalKey(fwd[i].key))
			}
		}
		if bwd := blockEntries(it, false); !equalKVs(fwd, bwd) || it.err != nil {
			t.Fatalf("backward iteration differs (err %v)", it.err)
		}
		for _, e := range fwd {
			it.seekGE(e.key)
			if !it.valid || !bytes.Equal(it.key(), e.key) {
				t.Fatalf("seekGE(%s) missed", base.FormatInternalKey(e.key))
			}
		}
	})
}

func BenchmarkBlockSeek(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var entries []kv
	for i := 0; len(entries) < 4096/40; i++ {
		entries = append(entries, kv{base.MakeInternalKey(nil, fmt.Appendf(nil, "user-key-%08d", i*7), base.SeqNum(i), base.KindSet), bytes.Repeat([]byte("v"), 16)})
	}
	block := buildBlock(entries, 16)
	targets := make([][]byte, 1024)
	for i := range targets {
		targets[i] = entries[rng.IntN(len(entries))].key
	}
	var it blockIter
	if err := it.init(block); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		it.seekGE(targets[i%len(targets)])
		if !it.valid {
			b.Fatal("not found")
		}
	}
}
