package blob

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

type countingFile struct {
	memFile
	closed *atomic.Int32
}

func (f countingFile) Close() error { f.closed.Add(1); return nil }

func TestFileCacheBoundAndRefs(t *testing.T) {
	good, _ := writeFile(t, 1, [][2][]byte{{[]byte("k"), []byte("v")}})
	var opened, closed atomic.Int32
	fc := NewFileCache(2, func(n base.FileNum) (*Reader, error) {
		opened.Add(1)
		return NewReader(countingFile{memFile{bytes.NewReader(good)}, &closed}, n, int64(len(good)))
	})
	r1, rel1, err := fc.Get(1)
	if err != nil || r1.FileNum() != 1 {
		t.Fatal(err)
	}
	for n := base.FileNum(2); n <= 4; n++ {
		_, rel, err := fc.Get(n)
		if err != nil {
			t.Fatal(err)
		}
		rel()
	}
	if fc.Len() != 2 {
		t.Fatalf("%d readers cached, want 2", fc.Len())
	}
	// File 1 was evicted but is still held: not closed yet.
	if closed.Load() != 1 {
		t.Fatalf("%d closed, want 1 (file 2)", closed.Load())
	}
	rel1()
	if closed.Load() != 2 {
		t.Fatalf("%d closed after releasing file 1, want 2", closed.Load())
	}
	fc.Evict(4)
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	if opened.Load() != closed.Load() {
		t.Fatalf("opened %d, closed %d", opened.Load(), closed.Load())
	}
	if fc.Lookups() != 4 {
		t.Fatalf("lookups %d", fc.Lookups())
	}
}
