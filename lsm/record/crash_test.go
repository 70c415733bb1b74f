package record

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestCrashTornWAL writes a log to a MemFS, syncing now and then, crashes
// keeping a random prefix of the unsynced tail, and reads the log back: all
// synced records and a prefix of the others, never an error.
func TestCrashTornWAL(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		fs := vfs.NewMem()
		f, err := fs.Create("000001.log")
		if err != nil {
			t.Fatal(err)
		}
		d, _ := fs.OpenDir("")
		d.Sync()
		d.Close()
		w := NewWriter(f)
		var records [][]byte
		synced := 0
		for i := 0; i < 30; i++ {
			max := 300
			if rng.IntN(5) == 0 {
				max = 2 * BlockSize
			}
			rec := randRecord(rng, max)
			if _, err := w.WriteRecord(rec); err != nil {
				t.Fatal(err)
			}
			records = append(records, rec)
			if rng.IntN(4) == 0 {
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				synced = len(records)
			}
		}
		w.Flush() // reaches the file, not the disk
		crashed := fs.CrashCloneTorn(rng)
		rf, err := crashed.Open("000001.log")
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(rf)
		var got [][]byte
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			got = append(got, bytes.Clone(rec))
		}
		if len(got) < synced {
			t.Fatalf("seed %d: %d records after the crash, %d were synced", seed, len(got), synced)
		}
		equalRecords(t, got, records[:len(got)])
		rf.Close()
	}
}
