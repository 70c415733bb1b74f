package version

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// writeManifest writes records (encoded edits or raw bytes) to
// MANIFEST-num in a fresh MemFS, points CURRENT at it, and returns the FS
// and the offset of each record.
func writeManifest(t *testing.T, num base.FileNum, recs ...[]byte) (*vfs.MemFS, []int64) {
	t.Helper()
	fs := vfs.NewMem()
	if err := fs.MkdirAll(testDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(base.MakeFilepath(testDir, base.FileTypeManifest, num))
	if err != nil {
		t.Fatal(err)
	}
	w := record.NewWriter(f)
	var offsets []int64
	for _, r := range recs {
		off, err := w.WriteRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, off)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, base.MakeFilepath(testDir, base.FileTypeCurrent, 0), base.MakeFilename(base.FileTypeManifest, num)+"\n")
	return fs, offsets
}

func writeFile(t *testing.T, fs vfs.FS, name, data string) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEdit(t *testing.T, lines ...string) []byte {
	t.Helper()
	e, err := parseEdit(emptyVersion(), lines)
	if err != nil {
		t.Fatal(err)
	}
	return e.Encode()
}

// manifestEdits returns a valid sequence of encoded edits and the version
// each prefix of it produces.
func manifestEdits(t *testing.T) (recs [][]byte, versions []string) {
	first := &VersionEdit{ComparerName: DefaultComparerName, NextFileNum: 2}
	recs = append(recs, first.Encode())
	lines := [][]string{
		{"add L0 2: a#1,SET-c#2,SET", "add L0 3: b#4,SET-d#3,SET", "log-num 4"},
		{"add L1 5: a#0,SET-b#0,SET", "add L1 6: e#0,SET-g#0,SET"},
		{"del L0 2", "add L2 7: a#1,SET-c#2,SET"},
		{"del L1 6", "add L1 8: e#0,SET-f#0,SET", "add L1 9: x#0,SET-z#0,SET"},
		{"del L0 3"},
	}
	v := emptyVersion()
	versions = append(versions, v.String())
	for _, l := range lines {
		e, err := parseEdit(v, l)
		if err != nil {
			t.Fatal(err)
		}
		e.NextFileNum = 20
		e.LastSeq = 10
		if v, err = applyEdit(v, e); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, e.Encode())
		versions = append(versions, v.String())
	}
	return recs, versions
}

// TestLoadCorruptManifestBytes flips each byte of a manifest in turn. Damage
// to any record but the last must fail Load with a corruption error; damage
// to the last may also read as a torn tail, and then the version is the one
// before it. No flip yields any other version.
func TestLoadCorruptManifestBytes(t *testing.T) {
	recs, versions := manifestEdits(t)
	clean, offsets := writeManifest(t, 1, recs...)
	name := base.MakeFilepath(testDir, base.FileTypeManifest, 1)
	data := readFile(t, clean, name)
	vs := mustLoad(t, clean, Options{})
	if got := vs.Current().String(); got != versions[len(versions)-1] {
		t.Fatalf("clean manifest: got\n%s\nwant\n%s", got, versions[len(versions)-1])
	}
	lastStart := offsets[len(offsets)-1]
	for i := range data {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			fs, _ := writeManifest(t, 1)
			bad := append([]byte(nil), data...)
			bad[i] ^= mask
			writeFile(t, fs, name, string(bad))
			vs, err := Load(fs, testDir, Options{})
			if int64(i) < lastStart {
				if !base.IsCorruption(err) {
					t.Fatalf("byte %d ^%#x (record before the last): Load = %v, want corruption", i, mask, err)
				}
				continue
			}
			if err != nil {
				if !base.IsCorruption(err) {
					t.Fatalf("byte %d ^%#x: Load = %v", i, mask, err)
				}
				continue
			}
			if got := vs.Current().String(); got != versions[len(versions)-2] {
				t.Fatalf("byte %d ^%#x: loaded\n%s\nwant\n%s", i, mask, got, versions[len(versions)-2])
			}
		}
	}
}

// TestLoadTornTail: a manifest cut anywhere within its last record loads the
// version of the records before it.
func TestLoadTornTail(t *testing.T) {
	recs, versions := manifestEdits(t)
	clean, offsets := writeManifest(t, 1, recs...)
	name := base.MakeFilepath(testDir, base.FileTypeManifest, 1)
	data := readFile(t, clean, name)
	for n := offsets[len(offsets)-1]; n < int64(len(data)); n++ {
		fs, _ := writeManifest(t, 1)
		writeFile(t, fs, name, string(data[:n]))
		vs := mustLoad(t, fs, Options{})
		if got := vs.Current().String(); got != versions[len(versions)-2] {
			t.Fatalf("cut at %d: loaded\n%s\nwant\n%s", n, got, versions[len(versions)-2])
		}
	}
}

// TestLoadRejects lists manifests whose records are intact but whose
// contents are not a valid history.
func TestLoadRejects(t *testing.T) {
	first := (&VersionEdit{ComparerName: DefaultComparerName, NextFileNum: 10}).Encode()
	cases := []struct {
		name string
		recs [][]byte
		// isErr checks the error; nil means corruption.
		isErr func(error) bool
	}{
		{name: "empty manifest"},
		{name: "no next file number", recs: [][]byte{mustEdit(t, "add L1 2: a#1,SET-b#1,SET")}},
		{name: "undecodable edit", recs: [][]byte{first, {tagNewFile, 1}}},
		{name: "unknown tag", recs: [][]byte{first, {0x63}}},
		{name: "delete missing file", recs: [][]byte{first, mustEdit(t, "del L1 7")}},
		{name: "delete from wrong level", recs: [][]byte{first, mustEdit(t, "add L1 7: a#1,SET-b#1,SET"), mustEdit(t, "del L2 7")}},
		{name: "duplicate file", recs: [][]byte{first, mustEdit(t, "add L1 7: a#1,SET-b#1,SET"), mustEdit(t, "add L3 7: a#1,SET-b#1,SET")}},
		{name: "overlap in L1", recs: [][]byte{first, mustEdit(t, "add L1 7: a#1,SET-c#1,SET"), mustEdit(t, "add L1 8: c#2,SET-d#1,SET")}},
		{
			name:  "comparer mismatch",
			recs:  [][]byte{(&VersionEdit{ComparerName: "other", NextFileNum: 3}).Encode()},
			isErr: func(err error) bool { return errors.Is(err, base.ErrInvalidArgument) && !base.IsCorruption(err) },
		},
	}
	for _, c := range cases {
		fs, _ := writeManifest(t, 1, c.recs...)
		_, err := Load(fs, testDir, Options{})
		ok := base.IsCorruption(err)
		if c.isErr != nil {
			ok = c.isErr(err)
		}
		if !ok {
			t.Errorf("%s: Load = %v", c.name, err)
		}
	}
}

func TestLoadCurrent(t *testing.T) {
	recs, _ := manifestEdits(t)
	current := base.MakeFilepath(testDir, base.FileTypeCurrent, 0)

	fs, _ := writeManifest(t, 1, recs...)
	if err := fs.Remove(current); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fs, testDir, Options{}); !errors.Is(err, os.ErrNotExist) || base.IsCorruption(err) {
		t.Errorf("missing CURRENT: Load = %v, want not-exist", err)
	}
	for _, content := range []string{
		"", "MANIFEST-000001", "MANIFEST-000001\n\n", "MANIFEST-x\n", "000001.log\n",
		"../MANIFEST-000001\n", "MANIFEST-1\n", "MANIFEST-000000\n", strings.Repeat("M", 5000) + "\n",
		"MANIFEST-000002\n", // names a missing manifest
	} {
		fs, _ := writeManifest(t, 1, recs...)
		writeFile(t, fs, current, content)
		if _, err := Load(fs, testDir, Options{}); !base.IsCorruption(err) {
			t.Errorf("CURRENT %.20q: Load = %v, want corruption", content, err)
		}
	}
}

// TestLoadStartsNewManifest: Load writes a snapshot manifest, points CURRENT
// at it and reports the old one; the file-number counter moves past every
// number in use even if the manifest claims otherwise.
func TestLoadStartsNewManifest(t *testing.T) {
	recs, versions := manifestEdits(t)
	// A stale next-file-number: below files and the log number in use.
	recs = append(recs, (&VersionEdit{NextFileNum: 3}).Encode())
	fs, _ := writeManifest(t, 7, recs...)
	vs := mustLoad(t, fs, Options{})
	if n := vs.ManifestFileNum(); n < 10 {
		t.Fatalf("new manifest %d reuses a file number in use", n)
	}
	if got := vs.ObsoleteManifests(); len(got) != 1 || got[0] != 7 {
		t.Fatalf("ObsoleteManifests = %v, want [7]", got)
	}
	cur := string(readFile(t, fs, base.MakeFilepath(testDir, base.FileTypeCurrent, 0)))
	if cur != base.MakeFilename(base.FileTypeManifest, vs.ManifestFileNum())+"\n" {
		t.Fatalf("CURRENT = %q", cur)
	}
	if err := vs.Close(); err != nil {
		t.Fatal(err)
	}
	// The new manifest holds one record, which is a complete snapshot.
	f, err := fs.Open(base.MakeFilepath(testDir, base.FileTypeManifest, vs.ManifestFileNum()))
	if err != nil {
		t.Fatal(err)
	}
	r := record.NewReader(f)
	n := 0
	for {
		if _, err := r.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	f.Close()
	if n != 1 {
		t.Fatalf("new manifest has %d records", n)
	}
	vs2 := mustLoad(t, fs, Options{})
	if got := vs2.Current().String(); got != versions[len(versions)-1] {
		t.Fatalf("got\n%s\nwant\n%s", got, versions[len(versions)-1])
	}
	if vs2.NextFileNum() <= vs.ManifestFileNum() {
		t.Fatal("next file number not past the manifest")
	}
}

func TestCreateRefusesExistingDB(t *testing.T) {
	fs := vfs.NewMem()
	vs := mustCreate(t, fs, Options{})
	vs.Close()
	if _, err := Create(fs, testDir, Options{}); !errors.Is(err, base.ErrInvalidArgument) {
		t.Fatalf("second Create = %v", err)
	}
}
