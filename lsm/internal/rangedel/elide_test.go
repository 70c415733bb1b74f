package rangedel

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

func TestStripeIndex(t *testing.T) {
	snaps := []base.SeqNum{5, 10, 10, 20}
	for _, tc := range []struct {
		seq  base.SeqNum
		want int
	}{
		{0, 0}, {4, 0}, {5, 1}, {9, 1}, {10, 3}, {19, 3}, {20, 4}, {base.SeqNumMax, 4},
	} {
		if got := StripeIndex(tc.seq, snaps); got != tc.want {
			t.Errorf("StripeIndex(%d) = %d, want %d", tc.seq, got, tc.want)
		}
	}
	if got := StripeIndex(7, nil); got != 0 {
		t.Errorf("StripeIndex with no snapshots = %d", got)
	}
}

func TestElide(t *testing.T) {
	in := []Fragment{frag("a", "b", 9, 5, 3), frag("b", "c", 2), frag("d", "e", 12, 11)}
	for _, tc := range []struct {
		name       string
		snaps      []base.SeqNum
		bottommost bool
		want       []Fragment
	}{
		{
			name: "no snapshots: one stripe, newest kept",
			want: []Fragment{frag("a", "b", 9), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:       "no snapshots, bottommost: everything is below the oldest snapshot",
			bottommost: true,
		},
		{
			name:  "snapshot splits 3 from 5 and 9",
			snaps: []base.SeqNum{4},
			want:  []Fragment{frag("a", "b", 9, 3), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:       "bottommost keeps what snapshot 4 cannot see",
			snaps:      []base.SeqNum{4},
			bottommost: true,
			want:       []Fragment{frag("a", "b", 9), frag("d", "e", 12)},
		},
		{
			name:  "a snapshot equal to a seq does not see it",
			snaps: []base.SeqNum{5},
			want:  []Fragment{frag("a", "b", 9, 3), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:  "a snapshot one above a seq sees it",
			snaps: []base.SeqNum{6},
			want:  []Fragment{frag("a", "b", 9, 5), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:       "bottommost, snapshot above all seqs: all dropped",
			snaps:      []base.SeqNum{13},
			bottommost: true,
		},
		{
			name:  "snapshot above all seqs: one stripe",
			snaps: []base.SeqNum{13},
			want:  []Fragment{frag("a", "b", 9), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:       "every seq in its own stripe, oldest snapshot below them all",
			snaps:      []base.SeqNum{1, 3, 4, 5, 6, 9, 10, 11, 12},
			bottommost: true,
			want:       []Fragment{frag("a", "b", 9, 5, 3), frag("b", "c", 2), frag("d", "e", 12, 11)},
		},
		{
			name:  "snapshot equal to the newest seq: all in one stripe",
			snaps: []base.SeqNum{3, 11},
			want:  []Fragment{frag("a", "b", 9), frag("b", "c", 2), frag("d", "e", 12)},
		},
		{
			name:  "two snapshots, one fragment untouched",
			snaps: []base.SeqNum{4, 12},
			want:  []Fragment{frag("a", "b", 9, 3), frag("b", "c", 2), frag("d", "e", 12, 11)},
		},
		{
			name:       "two snapshots, bottommost",
			snaps:      []base.SeqNum{4, 12},
			bottommost: true,
			want:       []Fragment{frag("a", "b", 9), frag("d", "e", 12, 11)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := cloneFragments(in)
			got := Elide(in, tc.snaps, tc.bottommost)
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if !reflect.DeepEqual(in, orig) {
				t.Fatalf("input modified: %v", in)
			}
		})
	}
}

func cloneFragments(frags []Fragment) []Fragment {
	out := slices.Clone(frags)
	for i := range out {
		out[i].Seqs = slices.Clone(out[i].Seqs)
	}
	return out
}

// TestElideRandom checks Elide's contract on random inputs:
//
//   - Not bottommost: every reader (each snapshot and the current state)
//     gets the same MaxCoveringSeq for every key from the output as from the
//     input.
//   - Bottommost: model a point entry of every key at every seq, and a
//     compaction that drops a point covered by an input tombstone of its own
//     stripe. Every reader must find each point it can see deleted after the
//     compaction (dropped, or covered by an output tombstone) iff it was
//     deleted before.
//   - The output is well formed, keeps at most one seq per stripe per
//     fragment, and when bottommost, none from stripe 0.
func TestElideRandom(t *testing.T) {
	rng := testRand(t)
	const maxSeq = 12
	for range 1000 {
		ts := randomTombstones(rng, rng.IntN(10), maxSeq)
		in := FragmentTombstones(ts)
		var snaps []base.SeqNum
		for s := base.SeqNum(1); s <= maxSeq+1; s++ {
			if rng.IntN(4) == 0 {
				snaps = append(snaps, s)
			}
		}
		readers := append(slices.Clone(snaps), base.SeqNumMax)
		inSet := NewSet(ts)
		for _, bottommost := range []bool{false, true} {
			out := Elide(in, snaps, bottommost)
			if err := checkFragments(out); err != nil {
				t.Fatalf("bottommost=%v: %v", bottommost, err)
			}
			for _, f := range out {
				for i, s := range f.Seqs {
					if bottommost && StripeIndex(s, snaps) == 0 {
						t.Fatalf("bottommost output keeps stripe-0 seq %d in %v (snapshots %v)", s, f, snaps)
					}
					if i > 0 && StripeIndex(s, snaps) == StripeIndex(f.Seqs[i-1], snaps) {
						t.Fatalf("output keeps two seqs of one stripe in %v (snapshots %v)", f, snaps)
					}
				}
			}
			outSet, err := NewSetFromFragments(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range testKeys {
				for _, r := range readers {
					if !bottommost {
						if got, want := outSet.MaxCoveringSeq(k, r), inSet.MaxCoveringSeq(k, r); got != want {
							t.Fatalf("key %q reader %d: MaxCoveringSeq %d after Elide, %d before\nin %v\nout %v\nsnapshots %v",
								k, r, got, want, in, out, snaps)
						}
						continue
					}
					for p := base.SeqNum(0); p <= maxSeq && p < r; p++ {
						dropped := false
						for _, t := range ts {
							if t.Covers(k, p, base.SeqNumMax) && StripeIndex(t.Seq, snaps) == StripeIndex(p, snaps) {
								dropped = true
							}
						}
						before := inSet.Covers(k, p, r)
						after := dropped || outSet.Covers(k, p, r)
						if before != after {
							t.Fatalf("key %q point #%d reader %d: deleted %v before, %v after (dropped %v)\nin %v\nout %v\nsnapshots %v",
								k, p, r, before, after, dropped, in, out, snaps)
						}
					}
				}
			}
		}
	}
}
