package base

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestInternalKeyOrder(t *testing.T) {
	keys := [][]byte{
		MakeInternalKey(nil, []byte("a"), 9, KindSet),
		MakeInternalKey(nil, []byte("a"), 5, KindDelete),
		MakeRangeDeleteSentinel(nil, []byte("b")),
		MakeInternalKey(nil, []byte("b"), 7, KindSet),
		MakeInternalKey(nil, []byte("b"), 0, KindDelete),
		MakeInternalKey(nil, []byte("ba"), SeqNumMax, KindMax),
	}
	for i := 1; i < len(keys); i++ {
		if InternalCompare(keys[i-1], keys[i]) >= 0 {
			t.Errorf("%s should sort before %s", FormatInternalKey(keys[i-1]), FormatInternalKey(keys[i]))
		}
	}
	// A search key sorts before every entry visible at its snapshot and
	// after every invisible one.
	for _, seq := range []SeqNum{1, 5, 6, 10} {
		sk := MakeSearchKey(nil, []byte("a"), seq)
		for _, e := range []SeqNum{0, 4, 5, 6, 9} {
			ek := MakeInternalKey(nil, []byte("a"), e, KindSet)
			visible := e < seq
			if got := InternalCompare(sk, ek) <= 0; got != visible {
				t.Errorf("search key @%d vs entry @%d: sorts-before=%v, want %v", seq, e, got, visible)
			}
		}
	}
}

func TestInternalCompareIsATotalOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var keys [][]byte
	for i := 0; i < 500; i++ {
		switch rng.IntN(4) {
		case 0: // too short to hold a trailer
			keys = append(keys, []byte(fmt.Sprint(rng.IntN(100)))[:rng.IntN(3)])
		default:
			keys = append(keys, MakeInternalKey(nil, []byte{byte(rng.IntN(4)), byte(rng.IntN(4))}, SeqNum(rng.IntN(10)), Kind(rng.IntN(4))))
		}
	}
	slices.SortFunc(keys, InternalCompare)
	for i := 1; i < len(keys); i++ {
		if InternalCompare(keys[i-1], keys[i]) > 0 || InternalCompare(keys[i], keys[i-1]) < 0 {
			t.Fatalf("order not consistent at %d", i)
		}
	}
}

func TestParseInternalKeyRejectsBadInput(t *testing.T) {
	if _, _, _, ok := ParseInternalKey([]byte("short")); ok {
		t.Error("a key shorter than a trailer parsed")
	}
	bad := MakeInternalKey(nil, []byte("k"), 1, KindMax+1)
	if _, _, _, ok := ParseInternalKey(bad); ok {
		t.Error("a key of unknown kind parsed")
	}
	ukey, seq, kind, ok := ParseInternalKey(MakeInternalKey(nil, []byte("k"), 42, KindDelete))
	if !ok || string(ukey) != "k" || seq != 42 || kind != KindDelete {
		t.Errorf("round trip = %q %d %s %v", ukey, seq, kind, ok)
	}
}

func TestFilenames(t *testing.T) {
	for _, ft := range []FileType{FileTypeLog, FileTypeTable, FileTypeManifest, FileTypeTemp, FileTypeBlob, FileTypeOptions} {
		name := MakeFilename(ft, 123)
		got, n, ok := ParseFilename("/some/dir/" + name)
		if !ok || got != ft || n != 123 {
			t.Errorf("ParseFilename(%s) = %v %d %v", name, got, n, ok)
		}
	}
	for _, name := range []string{"CURRENT", "LOCK"} {
		if _, _, ok := ParseFilename(name); !ok {
			t.Errorf("ParseFilename(%s) failed", name)
		}
	}
	for _, name := range []string{"", "foo", "12.txt", "x.log", "MANIFEST-", "MANIFEST-x", ".sst"} {
		if _, _, ok := ParseFilename(name); ok {
			t.Errorf("ParseFilename(%q) accepted a name the engine never makes", name)
		}
	}
}

func TestCorruptionMarker(t *testing.T) {
	inner := errors.New("disk")
	err := fmt.Errorf("ctx: %w", CorruptionErrorf("bad block: %w", inner))
	if !IsCorruption(err) || !errors.Is(err, inner) {
		t.Errorf("IsCorruption=%v Is(inner)=%v", IsCorruption(err), errors.Is(err, inner))
	}
	if IsCorruption(inner) || IsCorruption(nil) || MarkCorruption(nil) != nil {
		t.Error("plain errors must not count as corruption")
	}
	if !IsCorruption(MarkCorruption(inner)) {
		t.Error("MarkCorruption did not mark")
	}
	if !errors.Is(InvalidArgumentf("x"), ErrInvalidArgument) {
		t.Error("InvalidArgumentf does not wrap ErrInvalidArgument")
	}
}
