package rangedel

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// bruteMaxCoveringSeq is the model of Set.MaxCoveringSeq.
func bruteMaxCoveringSeq(ts []base.RangeTombstone, ukey []byte, snap base.SeqNum) base.SeqNum {
	var best base.SeqNum
	for _, t := range ts {
		if t.Seq < snap && t.Seq > best && string(t.Start) <= string(ukey) && string(ukey) < string(t.End) {
			best = t.Seq
		}
	}
	return best
}

func TestSetRandom(t *testing.T) {
	rng := testRand(t)
	keys := append(slices.Clone(testKeys), []byte("z"))
	for range 1000 {
		ts := randomTombstones(rng, rng.IntN(12), 10)
		s := NewSet(ts)
		for _, k := range keys {
			for snap := base.SeqNum(0); snap <= 12; snap++ {
				want := bruteMaxCoveringSeq(ts, k, snap)
				if got := s.MaxCoveringSeq(k, snap); got != want {
					t.Fatalf("MaxCoveringSeq(%q, %d) = %d, want %d\ninput %v\nfragments %v", k, snap, got, want, ts, s.All())
				}
				for seq := base.SeqNum(0); seq < snap; seq++ {
					want := false
					for _, tt := range ts {
						want = want || tt.Covers(k, seq, snap)
					}
					if got := s.Covers(k, seq, snap); got != want {
						t.Fatalf("Covers(%q, %d, %d) = %v, want %v\ninput %v", k, seq, snap, got, want, ts)
					}
				}
			}
		}
	}
}

func TestNilAndEmptySet(t *testing.T) {
	for _, s := range []*Set{nil, NewSet(nil)} {
		if s.MaxCoveringSeq([]byte("a"), base.SeqNumMax) != 0 || s.Covers([]byte("a"), 0, base.SeqNumMax) {
			t.Fatal("empty set covers a key")
		}
		if s.Len() != 0 || len(s.All()) != 0 {
			t.Fatal("empty set has fragments")
		}
	}
}

func TestNewSetFromFragments(t *testing.T) {
	good := []Fragment{frag("a", "c", 5), frag("c", "d", 9, 5, 3), frag("e", "g", 9)}
	s, err := NewSetFromFragments(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.MaxCoveringSeq([]byte("c"), 6); got != 5 {
		t.Fatalf("MaxCoveringSeq = %d, want 5", got)
	}
	for name, frags := range map[string][]Fragment{
		"empty range":      {frag("b", "b", 1)},
		"inverted range":   {frag("c", "b", 1)},
		"no seqs":          {frag("a", "b")},
		"ascending seqs":   {frag("a", "b", 1, 2)},
		"duplicate seqs":   {frag("a", "b", 2, 2)},
		"overlap":          {frag("a", "c", 1), frag("b", "d", 2)},
		"out of order":     {frag("c", "d", 1), frag("a", "b", 2)},
		"duplicate ranges": {frag("a", "b", 1), frag("a", "b", 2)},
	} {
		if _, err := NewSetFromFragments(frags); !base.IsCorruption(err) {
			t.Errorf("%s: err = %v, want corruption", name, err)
		}
	}
}

func TestMaxCoveringSeqDoesNotAllocate(t *testing.T) {
	s := NewSet([]base.RangeTombstone{tomb("a", "e", 5), tomb("c", "g", 9), tomb("c", "d", 3)})
	k := []byte("cc")
	var sink base.SeqNum
	if n := testing.AllocsPerRun(100, func() {
		sink += s.MaxCoveringSeq(k, 7)
		if s.Covers(k, 1, 10) {
			sink++
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	_ = sink
}

func BenchmarkMaxCoveringSeq(b *testing.B) {
	const n = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	// 1,000 disjoint tombstones with gaps, a few seqs each after
	// overlapping ones are added.
	var ts []base.RangeTombstone
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	for i := 0; i < n; i++ {
		ts = append(ts, base.RangeTombstone{Start: key(10 * i), End: key(10*i + 8), Seq: base.SeqNum(rng.IntN(1000) + 1)})
		if i%3 == 0 {
			ts = append(ts, base.RangeTombstone{Start: key(10 * i), End: key(10*i + 8), Seq: base.SeqNum(rng.IntN(1000) + 1)})
		}
	}
	s := NewSet(ts)
	if s.Len() != n {
		b.Fatalf("%d fragments, want %d", s.Len(), n)
	}
	probes := make([][]byte, 4096)
	for i := range probes {
		probes[i] = key(rng.IntN(10 * n))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var sink base.SeqNum
	for i := 0; i < b.N; i++ {
		sink += s.MaxCoveringSeq(probes[i%len(probes)], 500)
	}
	_ = sink
}
