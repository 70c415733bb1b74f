package version

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// benchLevelFiles spreads 10,000 files over the levels, roughly as a leveled
// LSM with a fan-out of 10 would.
var benchLevelFiles = [NumLevels]int{0: 8, 1: 10, 2: 30, 3: 100, 4: 852, 5: 9000}

func benchFile(n base.FileNum, level, i int) *FileMetadata {
	lo := fmt.Appendf(nil, "L%d-%08d", level, 2*i)
	hi := fmt.Appendf(nil, "L%d-%08d", level, 2*i+1)
	seq := base.SeqNum(n)
	return &FileMetadata{
		FileNum: n, Size: 2 << 20, SmallestSeq: seq, LargestSeq: seq, NumEntries: 1000,
		Smallest: base.MakeInternalKey(nil, lo, seq, base.KindSet),
		Largest:  base.MakeInternalKey(nil, hi, seq, base.KindSet),
	}
}

// newBenchSet returns a version set on a MemFS whose current version holds
// the files of benchLevelFiles.
func newBenchSet(b *testing.B, mu *sync.Mutex, opts Options) *VersionSet {
	opts.MaxManifestFileSize = 1 << 40 // no roll in the measured loop
	vs, err := Create(vfs.NewMem(), testDir, opts)
	if err != nil {
		b.Fatal(err)
	}
	e := &VersionEdit{}
	for level, count := range benchLevelFiles {
		for i := range count {
			e.AddFile(level, benchFile(vs.NewFileNum(), level, i))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if err := vs.LogAndApply(mu, e); err != nil {
		b.Fatal(err)
	}
	if n := vs.Current().NumFiles(); n != 10000 {
		b.Fatalf("%d files", n)
	}
	return vs
}

// BenchmarkInstallVersion10kFiles measures LogAndApply over a version of
// 10,000 files, with an edit that replaces two L5 files (a small compaction)
// — and, as the custom metric mutex-ns/op, how long the DB mutex was held
// per install. hash=inside-lock builds the file-location hash under the
// mutex (Options.BuildHashUnderLock), as RocksDB did before 0cc0543893;
// hash=outside-lock is this package's default.
func BenchmarkInstallVersion10kFiles(b *testing.B) {
	for _, inside := range []bool{true, false} {
		name := "hash=outside-lock"
		if inside {
			name = "hash=inside-lock"
		}
		b.Run(name, func(b *testing.B) {
			var mu sync.Mutex
			vs := newBenchSet(b, &mu, Options{BuildHashUnderLock: inside})
			defer vs.Close()
			mu.Lock()
			defer mu.Unlock()
			var heldNs int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				l5 := vs.Current().Levels[5]
				e := &VersionEdit{}
				for j := range 2 {
					idx := (i*7 + j*4001) % len(l5)
					old := l5[idx]
					e.DeleteFile(5, old.FileNum)
					nf := benchFile(vs.NewFileNum(), 5, 0)
					nf.Smallest, nf.Largest = old.Smallest, old.Largest
					e.AddFile(5, nf)
				}
				if err := vs.LogAndApply(&mu, e); err != nil {
					b.Fatal(err)
				}
				heldNs += vs.LastInstallMutexHold().Nanoseconds()
				vs.ObsoleteFiles()
			}
			b.ReportMetric(float64(heldNs)/float64(b.N), "mutex-ns/op")
		})
	}
}

// BenchmarkPrepareForInstall10kFiles compares building the file-location
// hash into a pre-sized map (PrepareForInstall) with letting it grow.
func BenchmarkPrepareForInstall10kFiles(b *testing.B) {
	var levels [NumLevels][]*FileMetadata
	n := base.FileNum(1)
	for level, count := range benchLevelFiles {
		for i := range count {
			levels[level] = append(levels[level], benchFile(n, level, i))
			n++
		}
	}
	b.Run("presized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v := &Version{Levels: levels}
			v.PrepareForInstall()
		}
	})
	b.Run("growing", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := make(map[base.FileNum]FileLocation)
			for level, files := range levels {
				for pos, f := range files {
					m[f.FileNum] = FileLocation{Level: level, Position: pos}
				}
			}
		}
	})
}
