package lsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// Engine benchmarks in the spirit of db_bench: fillrandom, readrandom (keys
// present), readmissing (keys absent), on the real file system in a temp
// directory. 16-byte keys, 100-byte values.

const benchKeys = 200_000

func benchKey(buf []byte, i uint64) []byte {
	buf = append(buf[:0], "key-"...)
	return binary.BigEndian.AppendUint64(buf, i*2654435761%(1<<40))
}

func benchDB(b *testing.B) *DB {
	b.Helper()
	d, err := Open(b.TempDir(), &Options{FS: vfs.Default})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func fillDB(b *testing.B, d *DB, n int) {
	b.Helper()
	value := make([]byte, 100)
	var key []byte
	batch := NewBatch()
	for i := 0; i < n; i++ {
		key = benchKey(key, uint64(i))
		batch.Set(key, value)
		if batch.Count() == 1000 {
			if err := d.Write(batch, NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if err := d.Write(batch, NoSync); err != nil {
		b.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkFillRandom(b *testing.B) {
	d := benchDB(b)
	value := make([]byte, 100)
	rng := rand.New(rand.NewPCG(1, 1))
	var key []byte
	b.SetBytes(int64(len(value) + 12))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key = benchKey(key, rng.Uint64N(1<<32))
		if err := d.Put(key, value, NoSync); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFillRandomParallel(b *testing.B) {
	d := benchDB(b)
	b.SetBytes(112)
	b.RunParallel(func(pb *testing.PB) {
		value := make([]byte, 100)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		var key []byte
		for pb.Next() {
			key = benchKey(key, rng.Uint64N(1<<32))
			if err := d.Put(key, value, NoSync); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadRandom(b *testing.B) {
	for _, where := range []string{"memtable", "tables"} {
		b.Run(where, func(b *testing.B) {
			d := benchDB(b)
			n := benchKeys
			if where == "memtable" {
				n = 50_000 // fits in one 16 MiB memtable
				value := make([]byte, 100)
				var key []byte
				for i := 0; i < n; i++ {
					key = benchKey(key, uint64(i))
					d.Put(key, value, NoSync)
				}
			} else {
				fillDB(b, d, n)
				if err := d.Compact(nil, nil); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(2, 2))
			var key []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key = benchKey(key, rng.Uint64N(uint64(n)))
				if _, err := d.Get(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadRandomParallel is readrandom with b.RunParallel over
// compacted tables, all blocks cached: run it with
// -cpu 1,2 to see how Gets on two cores get in each other's way (shared
// counters, reference counts) without the page cache's costs.
func BenchmarkReadRandomParallel(b *testing.B) {
	d := benchDB(b)
	fillDB(b, d, benchKeys)
	if err := d.Compact(nil, nil); err != nil { // one layout for every run
		b.Fatal(err)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 4))
		var key []byte
		for pb.Next() {
			key = benchKey(key, rng.Uint64N(benchKeys))
			if err := d.GetFunc(key, func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadMissing(b *testing.B) {
	d := benchDB(b)
	fillDB(b, d, benchKeys)
	if err := d.Compact(nil, nil); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var key []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key = benchKey(key, benchKeys+rng.Uint64N(1<<30))
		if _, err := d.Get(key); err != ErrNotFound {
			b.Fatal(fmt.Sprint("want ErrNotFound, got ", err))
		}
	}
	b.StopTimer()
	m := d.Metrics()
	if m.TableFilter.Checked > 0 {
		b.ReportMetric(float64(m.TableFilter.Useful)/float64(m.TableFilter.Checked), "filter-useful-ratio")
	}
}

func BenchmarkIterate(b *testing.B) {
	d := benchDB(b)
	fillDB(b, d, benchKeys)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		it, err := d.NewIter(nil)
		if err != nil {
			b.Fatal(err)
		}
		for ok := it.First(); ok && n < 1000; ok = it.Next() {
			n++
		}
		it.Close()
		n = 0
	}
}

// BenchmarkFillSync is db_bench's fillsync: sequential Puts, each with
// Sync, on the real file system. Every Put is one WAL append and one fsync
// (no group commit with a single writer), so it measures the durable-write
// path, including whatever that path records in the manifest.
func BenchmarkFillSync(b *testing.B) {
	benchFillSync(b, benchDB(b))
}

// BenchmarkFillSyncWALRecord is BenchmarkFillSync with the WAL's synced
// size recorded in the manifest at every synced write, once per MiB of WAL
// (the default), or only when a WAL is closed: the figures behind
// DefaultWALSyncRecordBytes.
func BenchmarkFillSyncWALRecord(b *testing.B) {
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"every-sync", 1}, {"per-MiB", 1 << 20}, {"close-only", -1}} {
		b.Run(c.name, func(b *testing.B) {
			d, err := Open(b.TempDir(), &Options{FS: vfs.Default, WALSyncRecordBytes: c.bytes})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			benchFillSync(b, d)
		})
	}
}

func benchFillSync(b *testing.B, d *DB) {
	value := make([]byte, 100)
	var key []byte
	b.SetBytes(int64(len(value) + 12))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key = benchKey(key, uint64(i))
		if err := d.Put(key, value, Sync); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDBBenchFill is bench/engine's fillseq and fillrandom in one
// process, for profiling: 16-byte decimal keys, 100-byte random values, a
// 64 MiB memtable, one Put per key, NoSync. Run with a fixed -benchtime
// (e.g. 250000x) so that both fills write the same keys.
func BenchmarkDBBenchFill(b *testing.B) {
	for _, order := range []string{"seq", "random"} {
		b.Run(order, func(b *testing.B) {
			d, err := Open(b.TempDir(), &Options{FS: vfs.Default, MemTableSizeBytes: 64 << 20, CacheSizeBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			rng := rand.New(rand.NewPCG(7, 7))
			pool := make([]byte, 1<<20+100)
			for i := range pool {
				pool[i] = byte(rng.Uint32())
			}
			keys := make([]int, b.N)
			for i := range keys {
				keys[i] = i
			}
			if order == "random" {
				rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			}
			var kb [16]byte
			b.SetBytes(116)
			b.ReportAllocs()
			b.ResetTimer()
			for _, k := range keys {
				n := uint64(2 * k)
				for i := 15; i >= 0; i-- {
					kb[i] = byte('0' + n%10)
					n /= 10
				}
				off := rng.IntN(1 << 20)
				if err := d.Put(kb[:], pool[off:off+100], NoSync); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDBBenchCompact is bench/engine's compact after fillrandom:
// 250,000 random 16-byte keys with 100-byte random values in a 64 MiB
// memtable, then a timed Compact(nil, nil) (flush, then every level down).
func BenchmarkDBBenchCompact(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d, err := Open(b.TempDir(), &Options{FS: vfs.Default, MemTableSizeBytes: 64 << 20, CacheSizeBytes: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 7))
		pool := make([]byte, 1<<20+100)
		for i := range pool {
			pool[i] = byte(rng.Uint32())
		}
		var kb [16]byte
		for _, k := range rng.Perm(250_000) {
			n := uint64(2 * k)
			for i := 15; i >= 0; i-- {
				kb[i] = byte('0' + n%10)
				n /= 10
			}
			off := rng.IntN(1 << 20)
			if err := d.Put(kb[:], pool[off:off+100], NoSync); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := d.Compact(nil, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		d.Close()
	}
}

// BenchmarkFillSeqLowKey is a sequential fill in which every batch also
// rewrites one key that sorts below all the others, as cairn's state
// machine does with its applied index: every flushed table spans the key
// space. 1 KiB random values, batches of 16 keys, a 4 MiB memtable and
// 4 MiB base level so that levels form within the run. It reports the
// bytes compactions wrote per byte put (compact-amp) and the largest
// compaction's input relative to the engine's size when it finished, once
// the engine passed 32 MiB (max-compaction-frac: while the base level is
// the bottom one, every L0 compaction rewrites all of it).
func BenchmarkFillSeqLowKey(b *testing.B) {
	var maxFrac float64
	var mu sync.Mutex
	var d *DB
	d, err := Open(b.TempDir(), &Options{
		FS: vfs.Default, MemTableSizeBytes: 4 << 20, LBaseMaxBytes: 4 << 20,
		EventListener: &EventListener{CompactionInstalled: func(info CompactionInfo) {
			var in, size int64
			for _, t := range info.Inputs {
				in += t.Size
			}
			for _, l := range d.Metrics().Levels {
				size += l.SizeBytes
			}
			if size >= 32<<20 {
				mu.Lock()
				maxFrac = max(maxFrac, float64(in)/float64(size))
				mu.Unlock()
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	rng := rand.New(rand.NewPCG(5, 5))
	value := make([]byte, 1024)
	batch := NewBatch()
	var key [8]byte
	b.SetBytes(int64(len(value) + len(key)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint64(key[:], uint64(i)|1<<56)
		batch.Set(key[:], value)
		if batch.Count() == 16 || i == b.N-1 {
			batch.Set([]byte{0, 'a'}, key[:])
			if err := d.Write(batch, NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(float64(d.Metrics().CompactionBytesWritten)/float64(int64(b.N)*int64(len(value)+len(key))), "compact-amp")
	b.ReportMetric(maxFrac, "max-compaction-frac")
}
