package sst

import (
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

func TestPropertiesRoundTrip(t *testing.T) {
	p := Properties{NumEntries: 1, NumDeletions: 2, NumRangeDeletions: 3, RawKeySize: 4, RawValueSize: 5,
		NumDataBlocks: 6, DataSize: 7, IndexSize: 8, FilterSize: 9, Compression: ZstdCompression,
		SmallestSeq: 10, LargestSeq: base.SeqNumMax, CreationTime: -11}
	block := p.encode(1)
	if _, err := verifyBlock(block, metaBlockKind, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err := decodeProperties(block)
	if err != nil || got != p {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, p)
	}
}

func TestPropertiesUnknownAndMalformed(t *testing.T) {
	// Unknown names are skipped whatever their value.
	w := blockWriter{restartInterval: 1}
	w.add([]byte(propNumEntries), []byte{42})
	w.add([]byte("zzz.future"), []byte{0xff, 0xff})
	got, err := decodeProperties(w.finish())
	if err != nil || got.NumEntries != 42 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, bad := range []struct{ name, value string }{
		{propNumEntries, "\xff"},             // Truncated varint.
		{propNumEntries, "\x01\x02"},         // Trailing bytes.
		{propCompression, "\x09"},            // Unknown compression.
		{propCreationTime, ""},               // Empty.
		{propSeqLargest, "\x80\x80\x80\x80"}, // Truncated varint.
	} {
		w := blockWriter{restartInterval: 1}
		w.add([]byte(bad.name), []byte(bad.value))
		if _, err := decodeProperties(w.finish()); !base.IsCorruption(err) {
			t.Errorf("property %s=%q: %v, want corruption", bad.name, bad.value, err)
		}
	}
}
