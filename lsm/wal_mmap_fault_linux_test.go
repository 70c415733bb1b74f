//go:build linux

package lsm

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// mmapWALTestOptions are options for a DB on the operating system's file
// system whose one memtable takes every write of the test, so that its
// WAL spans several chunks.
func mmapWALTestOptions() *Options {
	o := testOptions(vfs.Default)
	o.MemTableSizeBytes = 16 << 20
	o.testInitialMemTableBytes = 16 << 20
	return o
}

// openMmapWALDB opens the DB in dir and returns its WAL, skipping the test
// where the WAL is not mapped (no fallocate).
func openMmapWALDB(t *testing.T, dir string) (*DB, *mmapWAL) {
	t.Helper()
	d := mustOpen(t, dir, mmapWALTestOptions())
	d.mu.Lock()
	w, ok := d.mu.log.file.(*mmapWAL)
	d.mu.Unlock()
	if !ok {
		d.Close()
		t.Skip("no fallocate on this file system: the WAL uses write(2)")
	}
	return d, w
}

// setWALPwrite makes the WAL's pwrite(2) calls go through f for the rest
// of the test.
func setWALPwrite(t *testing.T, f func(fd int, p []byte, off int64) (int, error)) {
	old := walPwrite
	walPwrite = f
	t.Cleanup(func() { walPwrite = old })
}

func randomValue(rng *rand.Rand, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(rng.Uint32())
	}
	return v
}

// TestMmapWALPwriteFails: a Put whose WAL record goes to a chunk written
// with pwrite(2) (large writes, see walMmapMaxWriteBytes) meets a failed
// pwrite: at once (EIO); after half of its bytes, the retry meeting a full
// disk; with no progress and no error; or, for a record spanning several
// blocks, on its second block, after the first reached the file. As on
// every WAL failure, the Put fails, is not applied, and every later write
// fails (the WAL's state is unknown); reads go on. Reopened, the DB holds
// exactly the acknowledged writes: the torn record on disk is a torn
// tail, never data and never corruption (none of these cases writes the
// failed record whole, so it must be absent).
func TestMmapWALPwriteFails(t *testing.T) {
	eio := func(int, []byte, int64) (int, error) { return 0, unix.EIO }
	for _, tc := range []struct {
		name       string
		valueBytes int
		// failAt is the pwrite of the failing Put that fail answers;
		// every later one finds the disk full.
		failAt int
		fail   func(fd int, p []byte, off int64) (int, error)
		want   error
	}{
		{name: "error", valueBytes: 4 << 10, failAt: 1, fail: eio, want: unix.EIO},
		{name: "short", valueBytes: 4 << 10, failAt: 1, fail: func(fd int, p []byte, off int64) (int, error) {
			return unix.Pwrite(fd, p[:len(p)/2], off)
		}, want: unix.ENOSPC},
		{name: "no-progress", valueBytes: 4 << 10, failAt: 1, fail: func(int, []byte, int64) (int, error) {
			return 0, nil
		}, want: io.ErrShortWrite},
		{name: "later-block", valueBytes: 100 << 10, failAt: 2, fail: eio, want: unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed bool
			var pwrites, armedCalls int
			setWALPwrite(t, func(fd int, p []byte, off int64) (int, error) {
				pwrites++
				if !armed {
					return unix.Pwrite(fd, p, off)
				}
				armedCalls++
				switch {
				case armedCalls < tc.failAt:
					return unix.Pwrite(fd, p, off)
				case armedCalls == tc.failAt:
					return tc.fail(fd, p, off)
				}
				return 0, unix.ENOSPC
			})
			dir := t.TempDir()
			d, _ := openMmapWALDB(t, dir)
			rng := rand.New(rand.NewPCG(7, 8))
			model := map[string][]byte{}
			// 4 KiB writes: the first chunk is mapped (a new WAL's is),
			// every later one written with pwrite. Some acknowledged
			// writes land there before the failure.
			for i := 0; pwrites < 20; i++ {
				k, v := fmt.Sprintf("key%05d", i), randomValue(rng, 4<<10)
				if err := d.Put([]byte(k), v, NoSync); err != nil {
					t.Fatal(err)
				}
				model[k] = v
			}
			armed = true
			failed := randomValue(rng, tc.valueBytes)
			if err := d.Put([]byte("failed"), failed, NoSync); !errors.Is(err, tc.want) {
				t.Fatalf("Put on a failing pwrite = %v, want %v", err, tc.want)
			}
			if armedCalls < tc.failAt {
				t.Fatalf("the failing Put made %d pwrite calls, want at least %d", armedCalls, tc.failAt)
			}
			if err := d.Put([]byte("later"), []byte("v"), NoSync); !errors.Is(err, tc.want) {
				t.Fatalf("Put after the WAL failed = %v, want the WAL's error", err)
			}
			checkModel(t, d, model)
			if err := d.Close(); !errors.Is(err, tc.want) {
				t.Fatalf("Close = %v, want the WAL's error", err)
			}
			armed = false

			// Twice: the second Open replays what the first wrote
			// after recovering the torn WAL.
			for round := range 2 {
				d := mustOpen(t, dir, mmapWALTestOptions())
				checkModel(t, d, model)
				k := fmt.Sprintf("after-reopen-%d", round)
				if err := d.Put([]byte(k), []byte("v"), Sync); err != nil {
					t.Fatal(err)
				}
				model[k] = []byte("v")
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestMmapWALModeSwitchReopen runs phases of small and of large writes
// (random sizes, keys, a few deletions and synced writes) through one
// mapped WAL, so that its chunks switch between mapped and written with
// pwrite(2) in both directions, often with a record crossing the
// boundary, and checks the DB against a model of the acknowledged writes
// twice: on a copy of its directory taken while it is open, as a killed
// process leaves it (the file ends in the zero-filled reserve of a mapped
// chunk, or where the last pwrite ended), and after Close.
func TestMmapWALModeSwitchReopen(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := t.TempDir()
			d, w := openMmapWALDB(t, dir)
			rng := rand.New(rand.NewPCG(seed, 11))
			model := map[string][]byte{}
			mapped := map[int64]bool{} // chunk offset: mapped
			for phase := range 6 {
				small := phase%2 == 0
				end := w.off + walChunkBytes + rng.Int64N(walChunkBytes/2)
				for w.off < end {
					k := fmt.Sprintf("key%05d", rng.IntN(3000))
					if rng.IntN(20) == 0 {
						if err := d.Delete([]byte(k), NoSync); err != nil {
							t.Fatal(err)
						}
						delete(model, k)
						continue
					}
					n := 2<<10 + rng.IntN(14<<10)
					if small {
						n = 10 + rng.IntN(500)
					}
					v := randomValue(rng, n)
					sync := NoSync
					if rng.IntN(50) == 0 {
						sync = Sync
					}
					if err := d.Put([]byte(k), v, sync); err != nil {
						t.Fatal(err)
					}
					model[k] = v
					mapped[w.chunkOff] = w.chunk != nil
				}
			}
			var toPwrite, toMapped int
			for off := int64(walChunkBytes); off <= w.chunkOff; off += walChunkBytes {
				switch prev, cur := mapped[off-walChunkBytes], mapped[off]; {
				case prev && !cur:
					toPwrite++
				case !prev && cur:
					toMapped++
				}
			}
			if toPwrite == 0 || toMapped == 0 {
				t.Fatalf("chunk modes %v: %d switches to pwrite, %d to mapped, want both", mapped, toPwrite, toMapped)
			}

			killed := vfs.NewMem()
			if err := killed.MkdirAll("/db", 0o755); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				writeMemFile(t, killed, filepath.Join("/db", e.Name()), b)
			}
			kd := mustOpen(t, "/db", testOptions(killed))
			checkModel(t, kd, model)
			kd.Close()

			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d = mustOpen(t, dir, mmapWALTestOptions())
			defer d.Close()
			checkModel(t, d, model)
		})
	}
}
