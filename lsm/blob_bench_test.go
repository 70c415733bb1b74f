package lsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// Key-value separation benchmarks: MinBlobSize 0 (values in the tables)
// against 4096 (values of 4 KiB in blob files), 4 KiB values, on the real
// file system. CAIRN_BLOB_BENCH_KEYS sets the key count (default 20,000:
// 80 MiB of values; the 200,000 is 800 MiB).
//
//	go test ./lsm -run XXX -bench 'BenchmarkBlob' -benchtime 1x

const blobBenchValueSize = 4096

func blobBenchKeys() int {
	if n, err := strconv.Atoi(os.Getenv("CAIRN_BLOB_BENCH_KEYS")); err == nil && n > 0 {
		return n
	}
	return 20_000
}

func blobBenchOptions(minBlob int) *Options {
	return &Options{
		FS:                 vfs.Default,
		MinBlobSize:        minBlob,
		CacheSizeBytes:     64 << 20,
		BlobCacheSizeBytes: 64 << 20,
	}
}

// blobBenchFill writes n keys in random order with 4 KiB values and waits
// until flushes and compactions are done.
func blobBenchFill(b *testing.B, d *DB, n int, seed uint64) {
	blobBenchFillValues(b, d, n, seed, false)
}

// blobBenchFillValues is blobBenchFill with incompressible values or, with
// text, values that Snappy shrinks (words drawn from a vocabulary of 64).
func blobBenchFillValues(b *testing.B, d *DB, n int, seed uint64, text bool) {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	perm := rng.Perm(n)
	val := make([]byte, blobBenchValueSize)
	var key []byte
	batch := NewBatch()
	for i, p := range perm {
		key = benchKey(key, uint64(p))
		if text {
			fillBenchText(val, rng)
		} else {
			for j := 0; j < len(val); j += 8 { // incompressible
				binary.LittleEndian.PutUint64(val[j:], rng.Uint64())
			}
		}
		batch.Set(key, val)
		if batch.Count() == 16 || i == len(perm)-1 {
			if err := d.Write(batch, NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if err := d.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := waitBackgroundIdle(d); err != nil {
		b.Fatal(err)
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkBlobFillRandom: fillrandom into a fresh DB per iteration;
// reports write amplification (WAL + tables + blob files written / user
// bytes) and the DB's size.
func BenchmarkBlobFillRandom(b *testing.B) {
	for _, minBlob := range []int{0, 4096} {
		b.Run(fmt.Sprintf("minBlob=%d", minBlob), func(b *testing.B) {
			n := blobBenchKeys()
			var wa float64
			var size int64
			for i := range b.N {
				b.StopTimer()
				dir := b.TempDir()
				d, err := Open(dir, blobBenchOptions(minBlob))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				blobBenchFill(b, d, n, uint64(i))
				b.StopTimer()
				wa = d.Metrics().WriteAmplification
				size = dirBytes(b, dir)
				d.Close()
				b.StartTimer()
			}
			b.SetBytes(int64(n) * blobBenchValueSize)
			b.ReportMetric(wa, "write-amp")
			b.ReportMetric(float64(size)/(1<<20), "db-MiB")
		})
	}
}

// BenchmarkBlobCompactAll: time of a full manual compaction of a filled
// DB (then overwritten once, so that there is something to drop).
func BenchmarkBlobCompactAll(b *testing.B) {
	for _, minBlob := range []int{0, 4096} {
		b.Run(fmt.Sprintf("minBlob=%d", minBlob), func(b *testing.B) {
			n := blobBenchKeys()
			for i := range b.N {
				b.StopTimer()
				d, err := Open(b.TempDir(), blobBenchOptions(minBlob))
				if err != nil {
					b.Fatal(err)
				}
				blobBenchFill(b, d, n, uint64(i))
				blobBenchFill(b, d, n/2, uint64(i)+100)
				b.StartTimer()
				if err := d.Compact(nil, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				d.Close()
				b.StartTimer()
			}
		})
	}
}

// blobBenchDB is one filled DB per config, shared by the read benchmarks.
var blobBenchDBs = map[int]*DB{}

// blobBenchDB returns the filled DB of a config; minBlob -1 means 4096
// with no blob cache (every Get reads the blob file).
func blobBenchDB(b *testing.B, minBlob int) *DB {
	if d, ok := blobBenchDBs[minBlob]; ok {
		return d
	}
	o := blobBenchOptions(minBlob)
	if minBlob < 0 {
		o = blobBenchOptions(4096)
		o.BlobCacheSizeBytes = -1
	}
	dir, err := os.MkdirTemp("", "cairn-blob-bench")
	if err != nil {
		b.Fatal(err)
	}
	d, err := Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	blobBenchFill(b, d, blobBenchKeys(), 1)
	if err := d.Compact(nil, nil); err != nil {
		b.Fatal(err)
	}
	blobBenchDBs[minBlob] = d
	return d
}

// BenchmarkBlobReadRandom: Gets of random present keys (after one pass
// that warms the caches as far as they go: 64 MiB block cache, 64 MiB
// blob cache).
func BenchmarkBlobReadRandom(b *testing.B) {
	for _, minBlob := range []int{0, 4096} {
		b.Run(fmt.Sprintf("minBlob=%d", minBlob), func(b *testing.B) {
			d := blobBenchDB(b, minBlob)
			n := blobBenchKeys()
			rng := rand.New(rand.NewPCG(3, 3))
			var key []byte
			b.SetBytes(blobBenchValueSize)
			b.ResetTimer()
			for range b.N {
				key = benchKey(key, uint64(rng.IntN(n)))
				if _, err := d.Get(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBlobReadRandomCache: readrandom with separation, with a warm
// blob cache big enough for every value (256 MiB) against none at all.
func BenchmarkBlobReadRandomCache(b *testing.B) {
	for _, c := range []struct {
		name string
		key  int
	}{{"warm", -2}, {"nocache", -1}} {
		b.Run(c.name, func(b *testing.B) {
			if _, ok := blobBenchDBs[-2]; !ok && c.key == -2 {
				dir, err := os.MkdirTemp("", "cairn-blob-bench")
				if err != nil {
					b.Fatal(err)
				}
				o := blobBenchOptions(4096)
				o.BlobCacheSizeBytes = 256 << 20
				d, err := Open(dir, o)
				if err != nil {
					b.Fatal(err)
				}
				blobBenchFill(b, d, blobBenchKeys(), 1)
				var key []byte
				for i := range blobBenchKeys() { // warm every value
					if _, err := d.Get(benchKey(key, uint64(i))); err != nil {
						b.Fatal(err)
					}
				}
				blobBenchDBs[-2] = d
			}
			d := blobBenchDB(b, c.key)
			n := blobBenchKeys()
			rng := rand.New(rand.NewPCG(3, 3))
			var key []byte
			b.SetBytes(blobBenchValueSize)
			b.ResetTimer()
			for range b.N {
				key = benchKey(key, uint64(rng.IntN(n)))
				if _, err := d.Get(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBlobReadSeq: a full forward scan per iteration, keys and values.
func BenchmarkBlobReadSeq(b *testing.B) {
	for _, minBlob := range []int{0, 4096} {
		b.Run(fmt.Sprintf("minBlob=%d", minBlob), func(b *testing.B) {
			d := blobBenchDB(b, minBlob)
			b.SetBytes(int64(blobBenchKeys()) * blobBenchValueSize)
			b.ResetTimer()
			for range b.N {
				it, err := d.NewIter(nil)
				if err != nil {
					b.Fatal(err)
				}
				var sum int
				for ok := it.First(); ok; ok = it.Next() {
					sum += len(it.Value())
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
				if sum != blobBenchKeys()*blobBenchValueSize {
					b.Fatalf("scanned %d bytes", sum)
				}
			}
		})
	}
}

// BenchmarkBlobSeekRandom: SeekGE to a random key, then read that value
// and the next 9 (db_bench's seekrandom with seek_nexts=9).
func BenchmarkBlobSeekRandom(b *testing.B) {
	for _, minBlob := range []int{0, 4096} {
		b.Run(fmt.Sprintf("minBlob=%d", minBlob), func(b *testing.B) {
			d := blobBenchDB(b, minBlob)
			n := blobBenchKeys()
			rng := rand.New(rand.NewPCG(5, 5))
			it, err := d.NewIter(nil)
			if err != nil {
				b.Fatal(err)
			}
			defer it.Close()
			var key []byte
			b.ResetTimer()
			for range b.N {
				key = benchKey(key, uint64(rng.IntN(n)))
				ok := it.SeekGE(key)
				for j := 0; ok && j < 10; j++ {
					_ = it.Value()
					ok = it.Next()
				}
			}
		})
	}
}

// BenchmarkBlobGetCacheHit compares the two orders of the read path on a
// warm blob cache (the seed's measurement): cache first (no mutex on a
// hit) against metadata first (the reader cache's mutex on every Get, as
// in Titan before its change). Parallel, 1 KiB values, all cached.
func BenchmarkBlobGetCacheHit(b *testing.B) {
	for _, order := range []string{"cacheFirst", "metadataFirst"} {
		b.Run(order, func(b *testing.B) {
			d, err := Open(b.TempDir(), &Options{FS: vfs.Default, MinBlobSize: 64, BlobCacheSizeBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			const n = 4096
			val := make([]byte, 1024)
			var key []byte
			for i := range n {
				key = benchKey(key, uint64(i))
				if err := d.Put(key, val, NoSync); err != nil {
					b.Fatal(err)
				}
			}
			if err := d.Flush(); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := d.Get(benchKey(key, uint64(i))); err != nil {
					b.Fatal(err)
				}
			}
			d.blobs.metadataFirst = order == "metadataFirst"
			seed := time.Now().UnixNano()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(uint64(seed), rand.Uint64()))
				var k []byte
				for pb.Next() {
					k = benchKey(k, uint64(rng.IntN(n)))
					if _, err := d.Get(k); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.StopTimer()
			if m := d.Metrics().Blob.Cache; m.Misses > n {
				b.Fatalf("cache misses %d: not a cache-hit benchmark", m.Misses)
			}
		})
	}
}

var benchWords = func() [][]byte {
	rng := rand.New(rand.NewPCG(11, 11))
	ws := make([][]byte, 64)
	for i := range ws {
		w := make([]byte, 3+rng.IntN(8))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		ws[i] = append(w, ' ')
	}
	return ws
}()

// fillBenchText fills val with words from benchWords.
func fillBenchText(val []byte, rng *rand.Rand) {
	for j := 0; j < len(val); {
		j += copy(val[j:], benchWords[rng.IntN(len(benchWords))])
	}
}

// BenchmarkBlobCompression: the cost and the gain of BlobCompression
// Snappy against none, for incompressible and text values (4 KiB,
// MinBlobSize 4096): fill is a fillrandom into a fresh DB (reports the
// DB's size), get as many random Gets of the filled DB, with no blob
// cache, so that every Get reads, verifies and decodes its record.
//
//	CAIRN_BLOB_BENCH_KEYS=10000 go test ./lsm -run XXX -bench BenchmarkBlobCompression -benchtime 1x -count 3
func BenchmarkBlobCompression(b *testing.B) {
	for _, values := range []string{"random", "text"} {
		for _, c := range []Compression{NoCompression, SnappyCompression} {
			name := fmt.Sprintf("values=%s/blob=%s", values, c)
			n := blobBenchKeys()
			var d *DB
			var dirs []string
			b.Run(name+"/fill", func(b *testing.B) {
				for i := range b.N {
					b.StopTimer()
					if d != nil {
						d.Close()
					}
					dir, err := os.MkdirTemp("", "cairn-blob-bench")
					if err != nil {
						b.Fatal(err)
					}
					dirs = append(dirs, dir)
					o := blobBenchOptions(4096)
					o.BlobCompression = c
					o.BlobCacheSizeBytes = -1
					if d, err = Open(dir, o); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					blobBenchFillValues(b, d, n, uint64(i), values == "text")
					b.StopTimer()
					b.ReportMetric(float64(dirBytes(b, dir))/(1<<20), "db-MiB")
					b.ReportMetric(float64(d.Metrics().Blob.FileBytes)/(1<<20), "blob-MiB")
					b.StartTimer()
				}
				b.SetBytes(int64(n) * blobBenchValueSize)
			})
			b.Run(name+"/get", func(b *testing.B) {
				if d == nil {
					b.Skip("needs the fill sub-benchmark")
				}
				rng := rand.New(rand.NewPCG(3, 3))
				var key []byte
				b.SetBytes(int64(n) * blobBenchValueSize)
				b.ResetTimer()
				for range b.N { // n Gets per iteration
					for range n {
						key = benchKey(key, uint64(rng.IntN(n)))
						if _, err := d.Get(key); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/get")
			})
			if d != nil {
				d.Close()
			}
			for _, dir := range dirs {
				os.RemoveAll(dir)
			}
		}
	}
}
