package filter

import (
	"fmt"
	"sync"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
)

// The benchmarks compare DynamicBloom and BlockedFilter with
// github.com/bits-and-blooms/bloom/v3 sized for the same keys and FP rate
// (about 1%; ours at 10 bits/key, theirs by NewWithEstimates(n, 0.01),
// 9.6 bits/key and 7 probes). Our filters get pre-hashed keys; bits-and-blooms
// is measured with its natural API (Add/Test hash the key) and with
// precomputed Locations (TestLocations), which is its pre-hashed form.
//
//	go test -run '^$' -bench . -count 5 ./lsm/filter

// benchSizes are the key counts: a filter that fits in L1 and one of
// about 1.2 MiB, a large memtable's worth of keys.
var benchSizes = []int{10_000, 1_000_000}

// benchQueries is the number of distinct query keys cycled through.
const benchQueries = 1 << 16

type benchFixture struct {
	// members and misses are query keys in and not in the set.
	members, misses         [][]byte
	memberHash, missHash    []uint64
	memberLocs, missLocs    [][]uint64
	dyn                     *DynamicBloom
	blocked                 BlockedFilter
	bab                     *bloom.BloomFilter
	babKeysTotal, babProbes uint
}

var (
	benchMu       sync.Mutex
	benchFixtures = map[int]*benchFixture{}
)

func fixture(n int) *benchFixture {
	benchMu.Lock()
	defer benchMu.Unlock()
	if fx, ok := benchFixtures[n]; ok {
		return fx
	}
	fx := &benchFixture{
		dyn: NewDynamicBloomBitsPerKey(n, 10),
		bab: bloom.NewWithEstimates(uint(n), 0.01),
	}
	bb := NewBlockedBuilder(10)
	for i := 0; i < n; i++ {
		k := testKey(0xbe7c4, i)
		h := Hash(k)
		fx.dyn.Add(h)
		bb.AddHash(h)
		fx.bab.Add(k)
	}
	var err error
	if fx.blocked, err = ParseBlocked(bb.Finish(nil)); err != nil {
		panic(err)
	}
	q := benchQueries
	for q > n {
		q /= 2 // a power of two, so that i&(q-1) cycles through all
	}
	for i := 0; i < q; i++ {
		// Members spread over the whole set; misses are fresh keys.
		m, x := testKey(0xbe7c4, int(uint64(i)*uint64(n)/uint64(q))), testKey(0xbe7c4, n+i)
		fx.members, fx.misses = append(fx.members, m), append(fx.misses, x)
		fx.memberHash, fx.missHash = append(fx.memberHash, Hash(m)), append(fx.missHash, Hash(x))
		fx.memberLocs = append(fx.memberLocs, bloom.Locations(m, fx.bab.K()))
		fx.missLocs = append(fx.missLocs, bloom.Locations(x, fx.bab.K()))
	}
	benchFixtures[n] = fx
	return fx
}

// forSizes runs fn as a sub-benchmark for each size.
func forSizes(b *testing.B, fn func(b *testing.B, fx *benchFixture)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			fx := fixture(n)
			b.ReportAllocs()
			b.ResetTimer()
			fn(b, fx)
		})
	}
}

// hitMiss runs fn over the member and over the miss queries.
func hitMiss[T any](b *testing.B, hits, misses []T, fn func(q T) bool) {
	for _, c := range []struct {
		name string
		qs   []T
	}{{"hit", hits}, {"miss", misses}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			found, mask := 0, len(c.qs)-1 // len is a power of two
			for i := 0; i < b.N; i++ {
				if fn(c.qs[i&mask]) {
					found++
				}
			}
			b.ReportMetric(float64(found)/float64(b.N), "positive/op")
		})
	}
}

func BenchmarkDynamicBloomAdd(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hs, mask := fx.missHash, len(fx.missHash)-1
		d := NewDynamicBloom(uint64(fx.dyn.SizeBytes())*8, fx.dyn.NumProbes())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			d.Add(hs[i&mask])
		}
	})
}

func BenchmarkBitsAndBloomsAdd(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		ks, mask := fx.misses, len(fx.misses)-1
		f := bloom.New(fx.bab.Cap(), fx.bab.K())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			f.Add(ks[i&mask])
		}
	})
}

func BenchmarkDynamicBloomMayContain(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hitMiss(b, fx.memberHash, fx.missHash, fx.dyn.MayContain)
	})
}

// BenchmarkDynamicBloomMayContainKey includes hashing the key, like
// bits-and-blooms' Test.
func BenchmarkDynamicBloomMayContainKey(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hitMiss(b, fx.members, fx.misses, fx.dyn.MayContainKey)
	})
}

func BenchmarkBitsAndBloomsTest(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hitMiss(b, fx.members, fx.misses, fx.bab.Test)
	})
}

func BenchmarkBitsAndBloomsTestLocations(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hitMiss(b, fx.memberLocs, fx.missLocs, fx.bab.TestLocations)
	})
}

func BenchmarkBlockedMayContain(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		hitMiss(b, fx.memberHash, fx.missHash, fx.blocked.MayContain)
	})
}

func BenchmarkBlockedBuild(b *testing.B) {
	forSizes(b, func(b *testing.B, fx *benchFixture) {
		n := 0
		bb := NewBlockedBuilder(10)
		var buf []byte
		for i := 0; i < b.N; i++ {
			bb.AddHash(fx.missHash[i&(len(fx.missHash)-1)])
			if n++; n == len(fx.missHash) {
				buf = bb.Finish(buf[:0])
				n = 0
			}
		}
	})
}

func BenchmarkHash(b *testing.B) {
	k := testKey(1, 2)
	b.ReportAllocs()
	b.SetBytes(int64(len(k)))
	var sink uint64
	for i := 0; i < b.N; i++ {
		sink += Hash(k)
	}
	_ = sink
}
