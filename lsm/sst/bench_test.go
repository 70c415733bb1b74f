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
				r.Get(k, base.SeqNumMax, hashes[i]) // Warm the cache.
			}
			rng := rand.New(rand.NewPCG(1, 1))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				i := rng.IntN(len(ukeys))
				if _, _, _, found, err := r.Get(ukeys[i], base.SeqNumMax, hashes[i]); !found || err != nil {
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
		if _, _, _, found, err := r.Get(absent[j], base.SeqNumMax, hashes[j]); found || err != nil {
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
