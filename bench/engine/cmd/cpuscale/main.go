// Command cpuscale measures how much work this machine does with two
// goroutines against one, on loads that share nothing: the ceiling for any
// engine's 2-goroutine readrandom ratio on the same machine. A guest's
// two vCPUs may be one core's two hyperthreads, or share a busy host,
// and then no engine scales 2x.
//
//	go run ./cmd/cpuscale [--duration 2s] [--rounds 3]
//
// Loads: alu (a register-only hash loop), mem (dependent random loads
// from a 256 MiB array per goroutine: cache and TLB misses, as an index
// or filter lookup in a large table makes), pread (4 KiB preads at random
// offsets of a 64 MiB file in the page cache, one file shared by the
// goroutines, as an engine's readers share its tables), pread-own (the
// same, a file per goroutine).
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	duration := flag.Duration("duration", 2*time.Second, "time per measurement")
	rounds := flag.Int("rounds", 3, "measurements per load and goroutine count (the median is printed)")
	flag.Parse()
	if *duration <= 0 || *rounds <= 0 {
		log.Fatal("cpuscale: --duration and --rounds must be positive")
	}
	dir, err := os.MkdirTemp("", "cpuscale-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f, err := preadFile(filepath.Join(dir, "data"))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ownFiles := 0
	loads := []struct {
		name string
		new  func() func() // returns one goroutine's operation
	}{
		{"alu", aluOp},
		{"mem", memOp},
		{"pread", func() func() { return preadOp(f) }},
		{"pread-own", func() func() {
			own, err := preadFile(filepath.Join(dir, fmt.Sprintf("own-%d", ownFiles)))
			if err != nil {
				log.Fatal(err)
			}
			ownFiles++
			return preadOp(own)
		}},
	}
	fmt.Printf("GOMAXPROCS %d, NumCPU %d, %s per measurement, median of %d\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), *duration, *rounds)
	fmt.Printf("%-9s %14s %14s %7s\n", "load", "1 goroutine/s", "2 goroutines/s", "ratio")
	for _, l := range loads {
		// One instance per goroutine, set up once, outside the timed part.
		ops := []func(){l.new(), l.new()}
		var one, two []float64
		for range *rounds {
			one = append(one, measure(ops[:1], *duration))
			two = append(two, measure(ops, *duration))
		}
		m1, m2 := median(one), median(two)
		fmt.Printf("%-9s %14.0f %14.0f %7.2f\n", l.name, m1, m2, m2/m1)
	}
}

// measure runs a goroutine per op for d and returns operations per
// second, all goroutines together.
func measure(ops []func(), d time.Duration) float64 {
	var stop atomic.Bool
	var wg sync.WaitGroup
	counts := make([]int64, len(ops))
	start := time.Now()
	for i := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c int64
			for !stop.Load() {
				for range 64 {
					ops[i]()
				}
				c += 64
			}
			counts[i] = c
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	var total int64
	for _, c := range counts {
		total += c
	}
	return float64(total) / time.Since(start).Seconds()
}

// result keeps one goroutine's last value, so the compiler cannot drop
// its loop; a cache line of its own, so the goroutines share nothing (a
// shared sink written by both made alu run at 0.56x with 2 goroutines:
// the line moved between the cores on every operation).
type result struct {
	v uint64
	_ [56]byte
}

func aluOp() func() {
	r := &result{v: rand.Uint64() | 1}
	return func() {
		x := r.v
		for range 100 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		r.v = x
	}
}

func memOp() func() {
	const n = 256 << 20 / 8
	// A random cycle, so each load depends on the one before it.
	a := make([]uint64, n)
	perm := rand.Perm(n)
	for i := range n {
		a[perm[i]] = uint64(perm[(i+1)%n])
	}
	r := &result{v: uint64(perm[0])}
	return func() {
		j := r.v
		for range 10 {
			j = a[j]
		}
		r.v = j
	}
}

func preadFile(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for range 64 {
		for i := range buf {
			buf[i] = byte(rand.Uint32())
		}
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func preadOp(f *os.File) func() {
	buf := make([]byte, 4096)
	return func() {
		off := rand.Int64N(64<<20/4096) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			log.Fatal(err)
		}
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
