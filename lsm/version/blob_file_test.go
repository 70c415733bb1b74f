package version

import (
	"slices"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func TestBlobEditRoundTrip(t *testing.T) {
	e := &VersionEdit{
		NextFileNum:      9,
		DeletedBlobFiles: []base.FileNum{4},
		NewBlobFiles:     []*BlobFileMetadata{{FileNum: 7, Size: 1000, Count: 3, RecordBytes: 900}},
		BlobGarbage:      []BlobGarbage{{FileNum: 5, Count: 1, Bytes: 300}},
	}
	var got VersionEdit
	if err := got.Decode(e.Encode()); err != nil {
		t.Fatal(err)
	}
	if got.String() != e.String() {
		t.Fatalf("got\n%s\nwant\n%s", got.String(), e.String())
	}
}

// TestBlobTagsNotIgnorable: a reader that does not know the blob-file
// fields must refuse the manifest, not skip them and lose values.
func TestBlobTagsNotIgnorable(t *testing.T) {
	for _, tag := range []int{tagNewBlobFile, tagDeletedBlobFile, tagBlobGarbage} {
		if tag&tagSafeIgnoreMask != 0 {
			t.Errorf("blob tag %d is in the safe-to-ignore range", tag)
		}
	}
	// An unknown tag just past them is refused as corruption, as an old
	// binary refuses tag 8.
	var e VersionEdit
	if err := e.Decode([]byte{11, 1}); !base.IsCorruption(err) {
		t.Fatalf("unknown tag: %v", err)
	}
}

// TestBlobFileLifecycle: a blob file leaves the version when compactions
// have reported every record as garbage, survives while an older version
// is pinned, is reported obsolete once that version goes, and all of it
// survives a reload of the manifest.
func TestBlobFileLifecycle(t *testing.T) {
	fs := vfs.NewMem()
	vs := mustCreate(t, fs, Options{})
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	b1 := vs.NewFileNum()
	b2 := vs.NewFileNum()
	apply := func(e *VersionEdit) {
		t.Helper()
		if err := vs.LogAndApply(&mu, e); err != nil {
			t.Fatal(err)
		}
	}
	apply(&VersionEdit{NewBlobFiles: []*BlobFileMetadata{
		{FileNum: b1, Size: 1000, Count: 2, RecordBytes: 900},
		{FileNum: b2, Size: 500, Count: 1, RecordBytes: 400},
	}})
	apply(&VersionEdit{BlobGarbage: []BlobGarbage{{FileNum: b1, Count: 1, Bytes: 450}}})
	m, ok := vs.Current().BlobFile(b1)
	if !ok || m.GarbageCount != 1 || m.GarbageBytes != 450 || m.GarbageRatio() != 0.5 || m.LiveBytes() != 450 {
		t.Fatalf("after garbage: %v %v", m, ok)
	}
	// A bad edit changes nothing.
	if err := vs.LogAndApply(&mu, &VersionEdit{BlobGarbage: []BlobGarbage{{FileNum: b1, Count: 5, Bytes: 1}}}); err == nil {
		t.Fatal("garbage beyond the record count accepted")
	}
	pinned := vs.Current()
	pinned.Ref()
	apply(&VersionEdit{BlobGarbage: []BlobGarbage{{FileNum: b1, Count: 1, Bytes: 450}}})
	if _, ok := vs.Current().BlobFile(b1); ok {
		t.Fatal("fully garbage blob file still in the version")
	}
	if got := vs.ObsoleteBlobFiles(); len(got) != 0 {
		t.Fatalf("obsolete while pinned: %v", got)
	}
	if _, ok := vs.LiveFiles()[b1]; !ok {
		t.Fatal("pinned blob file not live")
	}
	mu.Unlock()
	pinned.Unref()
	mu.Lock()
	if got := vs.ObsoleteBlobFiles(); !slices.Equal(got, []base.FileNum{b1}) {
		t.Fatalf("obsolete blob files %v, want [%s]", got, b1)
	}
	// Garbage for a retired file is ignored.
	apply(&VersionEdit{BlobGarbage: []BlobGarbage{{FileNum: b1, Count: 1, Bytes: 1}}})
	apply(&VersionEdit{DeletedBlobFiles: []base.FileNum{b2}, NewBlobFiles: []*BlobFileMetadata{{FileNum: vs.NewFileNum(), Size: 100, Count: 1, RecordBytes: 50}}})
	want := vs.Current().BlobFiles
	if err := vs.Close(); err != nil {
		t.Fatal(err)
	}
	vs2 := mustLoad(t, fs, Options{})
	got := vs2.Current().BlobFiles
	if len(got) != 1 || len(want) != 1 {
		t.Fatalf("reloaded %v, want %v", got, want)
	}
	for n, m := range want {
		if g := got[n]; g == nil || g.String() != m.String() {
			t.Fatalf("reloaded %v, want %v", got, want)
		}
	}
	// A manifest rolled over repeats the blob files with their garbage.
	vs2.Close()
}

// TestBlobUnsettledMark: the Unsettled mark round-trips through an edit,
// is set and cleared by edits, survives a reload and a manifest roll (the
// snapshot edit repeats it), and its tag is safe to ignore: an edit that
// carries only it decodes, with the field skipped, in a reader that skips
// unknown safe tags.
func TestBlobUnsettledMark(t *testing.T) {
	e := &VersionEdit{UnsettledBlobFiles: []base.FileNum{7}, SettledBlobFiles: []base.FileNum{9}}
	var got VersionEdit
	if err := got.Decode(e.Encode()); err != nil {
		t.Fatal(err)
	}
	if got.String() != e.String() {
		t.Fatalf("got\n%s\nwant\n%s", got.String(), e.String())
	}
	if enc := (&VersionEdit{UnsettledBlobFiles: []base.FileNum{12}}).Encode(); !slices.Equal(enc, []byte{0x82, 0x40, 2, 12, 0}) {
		t.Fatalf("encoding % x, want the doc's example", enc)
	}
	if tagBlobSettled&tagSafeIgnoreMask == 0 {
		t.Fatal("blob settled tag is not safe to ignore")
	}
	for _, bad := range [][]byte{{0x82, 0x40, 1, 12}, {0x82, 0x40, 2, 12, 2}} {
		if err := got.Decode(bad); !base.IsCorruption(err) {
			t.Fatalf("Decode(% x) = %v, want corruption", bad, err)
		}
	}

	fs := vfs.NewMem()
	vs := mustCreate(t, fs, Options{MaxManifestFileSize: 1})
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	apply := func(e *VersionEdit) {
		t.Helper()
		if err := vs.LogAndApply(&mu, e); err != nil {
			t.Fatal(err)
		}
	}
	b1, b2 := vs.NewFileNum(), vs.NewFileNum()
	apply(&VersionEdit{
		NewBlobFiles:       []*BlobFileMetadata{{FileNum: b1, Size: 1000, Count: 2, RecordBytes: 900}, {FileNum: b2, Size: 500, Count: 1, RecordBytes: 400}},
		UnsettledBlobFiles: []base.FileNum{b1, b2},
	})
	apply(&VersionEdit{SettledBlobFiles: []base.FileNum{b2}, BlobGarbage: []BlobGarbage{{FileNum: b1, Count: 1, Bytes: 450}}})
	check := func(vs *VersionSet) {
		t.Helper()
		m1, _ := vs.Current().BlobFile(b1)
		m2, _ := vs.Current().BlobFile(b2)
		if m1 == nil || !m1.Unsettled || m1.GarbageCount != 1 || m2 == nil || m2.Unsettled {
			t.Fatalf("blob files %v, %v: want %s unsettled with garbage, %s settled", m1, m2, b1, b2)
		}
	}
	check(vs)
	if err := vs.Close(); err != nil {
		t.Fatal(err)
	}
	vs2 := mustLoad(t, fs, Options{MaxManifestFileSize: 1})
	check(vs2)
	// MaxManifestFileSize 1: the next edit rolls to a manifest that
	// starts with a snapshot.
	apply2 := func(e *VersionEdit) {
		t.Helper()
		if err := vs2.LogAndApply(&mu, e); err != nil {
			t.Fatal(err)
		}
	}
	apply2(&VersionEdit{NextFileNum: vs2.NewFileNum() + 1})
	vs2.Close()
	vs3 := mustLoad(t, fs, Options{})
	check(vs3)
	vs3.Close()
}
