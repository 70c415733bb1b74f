package sst

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

func TestSeparatorExamples(t *testing.T) {
	ik := func(uk string, seq base.SeqNum) []byte {
		return base.MakeInternalKey(nil, []byte(uk), seq, base.KindSet)
	}
	sep := func(uk string) []byte { return base.MakeInternalKey(nil, []byte(uk), base.SeqNumMax, base.KindMax) }
	for _, tc := range []struct{ a, b, want []byte }{
		{ik("abcdef", 5), ik("abzzz", 1), sep("abd")},
		{ik("abc1234", 5), ik("abd", 1), sep("abc2")}, // Past the first differing byte.
		{ik("abc", 5), ik("abc", 3), ik("abc", 5)},    // Same user key.
		{ik("abc", 5), ik("abcd", 3), ik("abc", 5)},   // A prefix.
		{ik("ab", 5), ik("ac", 3), ik("ab", 5)},       // Nothing shorter.
		{ik("a\xff\xff1", 5), ik("b", 3), ik("a\xff\xff1", 5)},
	} {
		if got := appendSeparator(nil, tc.a, tc.b); !bytes.Equal(got, tc.want) {
			t.Errorf("separator(%s, %s) = %s, want %s", base.FormatInternalKey(tc.a), base.FormatInternalKey(tc.b),
				base.FormatInternalKey(got), base.FormatInternalKey(tc.want))
		}
	}
	if got := appendSuccessor(nil, ik("abc", 5)); !bytes.Equal(got, sep("b")) {
		t.Errorf("successor = %s", base.FormatInternalKey(got))
	}
	if got := appendSuccessor(nil, ik("\xff\xff", 5)); !bytes.Equal(got, ik("\xff\xff", 5)) {
		t.Errorf("successor of 0xffff = %s", base.FormatInternalKey(got))
	}
}

// TestSeparatorProperty checks a <= sep < b and succ >= a on random keys
// drawn from a small alphabet (so that prefixes and 0xff runs are common).
func TestSeparatorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 'b', 0xfe, 0xff}
	randKey := func() []byte {
		uk := make([]byte, rng.IntN(6))
		for i := range uk {
			uk[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return base.MakeInternalKey(nil, uk, base.SeqNum(rng.IntN(4)), base.Kind(rng.IntN(4)))
	}
	shortened := 0
	for i := 0; i < 100000; i++ {
		a, b := randKey(), randKey()
		switch c := base.InternalCompare(a, b); {
		case c == 0:
			continue
		case c > 0:
			a, b = b, a
		}
		s := appendSeparator(nil, a, b)
		if base.InternalCompare(a, s) > 0 || base.InternalCompare(s, b) >= 0 {
			t.Fatalf("separator(%s, %s) = %s is out of range", base.FormatInternalKey(a), base.FormatInternalKey(b), base.FormatInternalKey(s))
		}
		if len(s) > len(a) {
			t.Fatalf("separator %s longer than %s", base.FormatInternalKey(s), base.FormatInternalKey(a))
		}
		if len(s) < len(a) {
			shortened++
		}
		if succ := appendSuccessor(nil, a); base.InternalCompare(succ, a) < 0 || len(succ) > len(a) {
			t.Fatalf("successor(%s) = %s", base.FormatInternalKey(a), base.FormatInternalKey(succ))
		}
	}
	if shortened == 0 {
		t.Fatal("no separator was ever shortened")
	}
}
