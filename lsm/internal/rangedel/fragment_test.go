package rangedel

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: time-based)")

func testRand(t testing.TB) *rand.Rand {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

func tomb(start, end string, seq base.SeqNum) base.RangeTombstone {
	return base.RangeTombstone{Start: []byte(start), End: []byte(end), Seq: seq}
}

func frag(start, end string, seqs ...base.SeqNum) Fragment {
	return Fragment{Start: []byte(start), End: []byte(end), Seqs: seqs}
}

// testKeys is a small key space with adjacent keys ("a" < "a\x00" < "b").
var testKeys = func() [][]byte {
	var ks [][]byte
	ks = append(ks, []byte(""), []byte("\x00"))
	for c := byte('a'); c <= 'h'; c++ {
		ks = append(ks, []byte{c}, []byte{c, 0})
	}
	return ks
}()

func randomTombstones(rng *rand.Rand, n int, maxSeq int) []base.RangeTombstone {
	ts := make([]base.RangeTombstone, n)
	for i := range ts {
		ts[i] = base.RangeTombstone{
			Start: testKeys[rng.IntN(len(testKeys))],
			End:   testKeys[rng.IntN(len(testKeys))], // may be empty or inverted
			Seq:   base.SeqNum(rng.IntN(maxSeq + 1)),
		}
	}
	return ts
}

// coveringSeqs is the brute-force model: the distinct seqs of the tombstones
// containing ukey, newest first.
func coveringSeqs(ts []base.RangeTombstone, ukey []byte) []base.SeqNum {
	var seqs []base.SeqNum
	for _, t := range ts {
		if bytes.Compare(t.Start, ukey) <= 0 && bytes.Compare(ukey, t.End) < 0 {
			seqs = append(seqs, t.Seq)
		}
	}
	slices.Sort(seqs)
	slices.Reverse(seqs)
	return slices.Compact(seqs)
}

// fragmentSeqs returns the seqs of the one fragment containing ukey, failing
// if more than one does.
func fragmentSeqs(t *testing.T, frags []Fragment, ukey []byte) []base.SeqNum {
	t.Helper()
	var seqs []base.SeqNum
	n := 0
	for _, f := range frags {
		if f.Contains(ukey) {
			seqs = f.Seqs
			n++
		}
	}
	if n > 1 {
		t.Fatalf("%d fragments contain %q", n, ukey)
	}
	return seqs
}

// toTombstones expands fragments back into one tombstone per (fragment, seq).
func toTombstones(frags []Fragment) []base.RangeTombstone {
	var ts []base.RangeTombstone
	for _, f := range frags {
		for _, s := range f.Seqs {
			ts = append(ts, base.RangeTombstone{Start: f.Start, End: f.End, Seq: s})
		}
	}
	return ts
}

// checkEquivalent asserts that frags are well formed and cover exactly the
// (key, seq) pairs ts covers, over every key of the test key space.
func checkEquivalent(t *testing.T, ts []base.RangeTombstone, frags []Fragment) {
	t.Helper()
	if err := checkFragments(frags); err != nil {
		t.Fatalf("%v\ninput %v\nfragments %v", err, ts, frags)
	}
	for _, k := range append(slices.Clone(testKeys), []byte("z")) {
		want := coveringSeqs(ts, k)
		got := fragmentSeqs(t, frags, k)
		if len(want) != len(got) || (len(want) > 0 && !slices.Equal(want, got)) {
			t.Fatalf("key %q: fragments give seqs %v, input %v\ninput %v\nfragments %v", k, got, want, ts, frags)
		}
	}
}

func TestFragmentTombstones(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []base.RangeTombstone
		want []Fragment
	}{
		{name: "nil"},
		{name: "only empty ranges", in: []base.RangeTombstone{tomb("b", "b", 1), tomb("c", "a", 2)}},
		{
			name: "single",
			in:   []base.RangeTombstone{tomb("a", "c", 3)},
			want: []Fragment{frag("a", "c", 3)},
		},
		{
			name: "doc example",
			in:   []base.RangeTombstone{tomb("a", "e", 5), tomb("c", "g", 9), tomb("c", "d", 3)},
			want: []Fragment{frag("a", "c", 5), frag("c", "d", 9, 5, 3), frag("d", "e", 9, 5), frag("e", "g", 9)},
		},
		{
			name: "gap and adjacency",
			in:   []base.RangeTombstone{tomb("e", "f", 1), tomb("a", "b", 2), tomb("b", "c", 3)},
			want: []Fragment{frag("a", "b", 2), frag("b", "c", 3), frag("e", "f", 1)},
		},
		{
			name: "duplicate seqs collapse",
			in:   []base.RangeTombstone{tomb("a", "c", 4), tomb("b", "d", 4), tomb("a", "c", 4)},
			want: []Fragment{frag("a", "b", 4), frag("b", "c", 4), frag("c", "d", 4)},
		},
		{
			name: "nested",
			in:   []base.RangeTombstone{tomb("a", "z", 1), tomb("m", "n", 2)},
			want: []Fragment{frag("a", "m", 1), frag("m", "n", 2, 1), frag("n", "z", 1)},
		},
		{
			name: "empty start key",
			in:   []base.RangeTombstone{tomb("", "b", 7), tomb("a", "a", 8)},
			want: []Fragment{frag("", "b", 7)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FragmentTombstones(tc.in)
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			checkEquivalent(t, tc.in, got)
		})
	}
}

func TestFragmentDoesNotModifyInput(t *testing.T) {
	in := []base.RangeTombstone{tomb("c", "g", 9), tomb("a", "e", 5), tomb("c", "d", 3)}
	orig := slices.Clone(in)
	FragmentTombstones(in)
	if !reflect.DeepEqual(in, orig) {
		t.Fatalf("input reordered: %v", in)
	}
}

// TestFragmentRandom checks random tombstone sets against the brute-force
// model over every key of a small key space, and that fragmenting is
// idempotent.
func TestFragmentRandom(t *testing.T) {
	rng := testRand(t)
	for range 2000 {
		ts := randomTombstones(rng, rng.IntN(12), 10)
		frags := FragmentTombstones(ts)
		checkEquivalent(t, ts, frags)
		// The fragments' Seqs must not share backing storage in a way
		// that lets one fragment's append clobber another's.
		for _, f := range frags {
			if cap(f.Seqs) != len(f.Seqs) {
				t.Fatalf("fragment %v: Seqs capacity %d", f, cap(f.Seqs))
			}
		}
		again := FragmentTombstones(toTombstones(frags))
		if len(again) != len(frags) || (len(frags) > 0 && !reflect.DeepEqual(again, frags)) {
			t.Fatalf("not idempotent:\n%v\n%v", frags, again)
		}
	}
}

func TestTruncate(t *testing.T) {
	f := frag("c", "g", 5, 2)
	for _, tc := range []struct {
		lower, upper string
		nilLower     bool
		nilUpper     bool
		want         Fragment
		empty        bool
	}{
		{nilLower: true, nilUpper: true, want: frag("c", "g", 5, 2)},
		{lower: "a", upper: "z", want: frag("c", "g", 5, 2)},
		{lower: "d", nilUpper: true, want: frag("d", "g", 5, 2)},
		{nilLower: true, upper: "e", want: frag("c", "e", 5, 2)},
		{lower: "d", upper: "e", want: frag("d", "e", 5, 2)},
		{lower: "c", upper: "g", want: frag("c", "g", 5, 2)},
		{lower: "g", upper: "z", want: frag("g", "g", 5, 2), empty: true},
		{lower: "a", upper: "c", want: frag("c", "c", 5, 2), empty: true},
		{lower: "a", upper: "b", want: frag("c", "b", 5, 2), empty: true},
		{lower: "", upper: "c\x00", want: frag("c", "c\x00", 5, 2)},
	} {
		var lower, upper []byte
		if !tc.nilLower {
			lower = []byte(tc.lower)
		}
		if !tc.nilUpper {
			upper = []byte(tc.upper)
		}
		got := f.Truncate(lower, upper)
		if !reflect.DeepEqual(got, tc.want) || got.Empty() != tc.empty {
			t.Errorf("Truncate(%q, %q) = %v (empty %v), want %v (empty %v)", lower, upper, got, got.Empty(), tc.want, tc.empty)
		}
	}
	if f.String() != `["c","g")#5,2` {
		t.Fatalf("String() = %s", f)
	}
}

// FuzzFragmentTombstones decodes tombstones from the input (3 bytes each:
// start, end, seq, keys from the test key space) and checks the fragments
// against the brute-force model.
func FuzzFragmentTombstones(f *testing.F) {
	f.Add([]byte{2, 10, 5, 6, 14, 9, 6, 8, 3})
	f.Add([]byte{0, 17, 1, 0, 17, 1, 4, 4, 4, 9, 3, 2})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ts []base.RangeTombstone
		for ; len(data) >= 3; data = data[3:] {
			ts = append(ts, base.RangeTombstone{
				Start: testKeys[int(data[0])%len(testKeys)],
				End:   testKeys[int(data[1])%len(testKeys)],
				Seq:   base.SeqNum(data[2]),
			})
		}
		checkEquivalent(t, ts, FragmentTombstones(ts))
	})
}
