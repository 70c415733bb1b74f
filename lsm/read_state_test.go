package lsm

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestReadStateReleasedOnceByLastHolder: readers take and drop references
// on the current readState while the DB publishes new ones. No readState
// may be released while a reader holds it (its memtables would be
// unmapped under the reader), and every retired one must be released
// once its readers are gone, exactly once (a second release drives the
// version's count below zero, which panics).
func TestReadStateReleasedOnceByLastHolder(t *testing.T) {
	d := mustOpen(t, "db", &Options{FS: vfs.NewMem()})
	defer d.Close()
	if err := d.Put([]byte("k"), []byte("v"), NoSync); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var early atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				rs := d.loadReadState()
				if rs.readState == nil {
					t.Error("nil readState of an open DB")
					return
				}
				for range 3 {
					if rs.released.Load() {
						early.Add(1)
					}
				}
				rs.unref()
			}
		}()
	}
	published := []*readState{d.readState.Load()}
	for range 2000 {
		d.mu.Lock()
		d.updateReadStateLocked()
		published = append(published, d.readState.Load())
		d.mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	if n := early.Load(); n > 0 {
		t.Fatalf("a reader saw its readState released under it %d times", n)
	}
	last := len(published) - 1
	for i, rs := range published[:last] {
		if !rs.retired.Load() || !rs.released.Load() {
			t.Fatalf("readState %d of %d: retired %v, released %v after its readers left", i, last, rs.retired.Load(), rs.released.Load())
		}
	}
	if cur := published[last]; cur.retired.Load() || cur.released.Load() {
		t.Fatal("the current readState is retired or released")
	}

	// A reference taken before retirement keeps it until its unref.
	held := d.loadReadState()
	d.mu.Lock()
	d.updateReadStateLocked()
	d.mu.Unlock()
	if !held.retired.Load() || held.released.Load() {
		t.Fatalf("held readState: retired %v (want true), released %v (want false)", held.retired.Load(), held.released.Load())
	}
	if held.tryRef(0) {
		t.Fatal("a retired readState gave a new reference")
	}
	held.unref()
	if !held.released.Load() {
		t.Fatal("the last reader's unref did not release the retired readState")
	}
}
