package sst

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
)

// benchTable writes n entries with 16-byte user keys and 64-byte values.
func benchTable(b *testing.B, n int, comp Compression) (*Reader, [][]byte) {
	b.Helper()
	var spec tableSpec
	ukeys := make([][]byte, n)
	for i := range ukeys {
		ukeys[i] = fmt.Appendf(nil, "user%012d", i*2)
		v := make([]byte, 64)
		for j := range v {
			v[j] = byte('a' + (i+j)%7)
		}
		spec.points = append(spec.points, kv{base.MakeInternalKey(nil, ukeys[i], base.SeqNum(i+1), base.KindSet), v})
	}
	data, _ := writeTable(b, spec, WriterOptions{Compression: comp, FilterBitsPerKey: 10})
	return openTable(b, data, cache.New(256<<20)), ukeys
}

func BenchmarkGetHit(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			r, ukeys := benchTable(b, n, SnappyCompression)
			defer r.Close()
			hashes := make([]uint64, len(ukeys))
			for i, k := range ukeys {
				hashes[i] = hashOf(k)
				_, _, _, _, rel, _ := r.Get(k, base.SeqNumMax, hashes[i]) // Warm the cache.
				rel.Release()
			}
			rng := rand.New(rand.NewPCG(1, 1))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				i := rng.IntN(len(ukeys))
				_, _, _, found, rel, err := r.Get(ukeys[i], base.SeqNumMax, hashes[i])
				rel.Release()
				if !found || err != nil {
					b.Fatal("miss")
				}
			}
		})
	}
}

func BenchmarkGetMiss(b *testing.B) {
	r, ukeys := benchTable(b, 100_000, SnappyCompression)
	defer r.Close()
	absent := make([][]byte, 4096)
	hashes := make([]uint64, len(absent))
	for i := range absent {
		absent[i] = fmt.Appendf(nil, "user%012dx", i*2*len(ukeys)/len(absent)) // Suffix: absent.
		hashes[i] = hashOf(absent[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j := i % len(absent)
		if _, _, _, found, _, err := r.Get(absent[j], base.SeqNumMax, hashes[j]); found || err != nil {
			b.Fatal("found an absent key")
		}
	}
}

func BenchmarkIterate(b *testing.B) {
	for _, comp := range allCompressions {
		b.Run(comp.String(), func(b *testing.B) {
			r, _ := benchTable(b, 100_000, comp)
			defer r.Close()
			p := r.Properties()
			b.SetBytes(int64(p.RawKeySize + p.RawValueSize))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				it := r.NewIter()
				n := 0
				for it.First(); it.Valid(); it.Next() {
					n++
				}
				if err := it.Close(); err != nil || n != 100_000 {
					b.Fatalf("%d entries, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkIterateCold reads every block from the file: checksum,
// decompression and verification.
func BenchmarkIterateCold(b *testing.B) {
	for _, comp := range allCompressions {
		b.Run(comp.String(), func(b *testing.B) {
			r, _ := benchTable(b, 100_000, comp)
			r.opts.Cache = nil
			defer r.Close()
			p := r.Properties()
			b.SetBytes(int64(p.RawKeySize + p.RawValueSize))
			b.ReportAllocs()
			for b.Loop() {
				it := r.NewIter()
				for it.First(); it.Valid(); it.Next() {
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWriter(b *testing.B) {
	keys := make([][]byte, 100_000)
	for i := range keys {
		keys[i] = base.MakeInternalKey(nil, fmt.Appendf(nil, "user%012d", i), base.SeqNum(i+1), base.KindSet)
	}
	val := make([]byte, 64)
	b.SetBytes(int64(len(keys) * (len(keys[0]) + len(val))))
	b.ReportAllocs()
	for b.Loop() {
		w := NewWriter(&bytesFile{}, WriterOptions{Compression: SnappyCompression, FilterBitsPerKey: 10})
		for _, k := range keys {
			if err := w.Add(k, val); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriterCostPerMB is the cost of writing a table per MB of
// key+value input (16-byte user keys, 100-byte values, 4 KiB blocks, 10
// bits/key filter), split into its parts: the whole writer with and
// without Snappy, on random (incompressible) and repetitive values, and
// Snappy and CRC-32C alone over 4 KiB blocks. MB/s is reported; 1e6/(MB/s)
// is µs per MB.
func BenchmarkWriterCostPerMB(b *testing.B) {
	const n = 20_000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = base.MakeInternalKey(nil, fmt.Appendf(nil, "%016d", i), base.SeqNum(i+1), base.KindSet)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, n*100)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	repetitive := make([]byte, n*100)
	for i := range repetitive {
		repetitive[i] = byte('a' + i%7)
	}
	for _, vals := range []struct {
		name string
		data []byte
	}{{"random", random}, {"repetitive", repetitive}} {
		for _, comp := range []struct {
			name string
			c    Compression
		}{{"none", NoCompression}, {"snappy", SnappyCompression}} {
			b.Run("writer/"+vals.name+"/"+comp.name, func(b *testing.B) {
				b.SetBytes(int64(n * (16 + 100)))
				b.ReportAllocs()
				for b.Loop() {
					w := NewWriter(&bytesFile{}, WriterOptions{Compression: comp.c, FilterBitsPerKey: 10, BlockSize: 4096})
					for i, k := range keys {
						if err := w.Add(k, vals.data[i*100:(i+1)*100]); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := w.Finish(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run("snappy-block/"+vals.name, func(b *testing.B) {
			var dst []byte
			b.SetBytes(4096)
			for i := 0; b.Loop(); i++ {
				off := (i * 4096) % (len(vals.data) - 4096)
				dst, _ = compressBlock(dst, vals.data[off:off+4096], SnappyCompression)
			}
		})
	}
	b.Run("crc32c-block", func(b *testing.B) {
		b.SetBytes(4096)
		var sink uint32
		for i := 0; b.Loop(); i++ {
			off := (i * 4096) % (len(random) - 4096)
			sink += blockChecksum(random[off:off+4096], 0)
		}
		_ = sink
	})
}
