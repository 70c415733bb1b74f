package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/client"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// loadResult is what a load process prints as its last line (JSON).
type loadResult struct {
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	P999    float64 `json:"p999_ms"`
}

// kv is one client of either system.
type kv interface {
	put(ctx context.Context, key, value []byte) error
	get(ctx context.Context, key []byte, serializable bool) error
	close()
}

type cairnKV struct{ c *client.Client }

func (k cairnKV) put(ctx context.Context, key, value []byte) error {
	_, err := k.c.Put(ctx, key, value)
	return err
}

func (k cairnKV) get(ctx context.Context, key []byte, ser bool) error {
	var opts []client.Option
	if ser {
		opts = append(opts, client.WithSerializable())
	}
	_, err := k.c.Get(ctx, key, opts...)
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return err
}

func (k cairnKV) close() { k.c.Close() }

type etcdKV struct{ c *clientv3.Client }

func (k etcdKV) put(ctx context.Context, key, value []byte) error {
	_, err := k.c.Put(ctx, string(key), string(value))
	return err
}

func (k etcdKV) get(ctx context.Context, key []byte, ser bool) error {
	var opts []clientv3.OpOption
	if ser {
		opts = append(opts, clientv3.WithSerializable())
	}
	_, err := k.c.Get(ctx, string(key), opts...)
	return err
}

func (k etcdKV) close() { k.c.Close() }

func newKV(target string, endpoints []string) (kv, error) {
	switch target {
	case "cairn":
		c, err := client.New(client.Config{Endpoints: endpoints})
		if err != nil {
			return nil, err
		}
		return cairnKV{c}, nil
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		return etcdKV{c}, nil
	}
	return nil, fmt.Errorf("unknown target %q", target)
}

func key(i int) []byte { return fmt.Appendf(nil, "%08d", i) }

// runLoad drives one workload and prints "start", "end" (the measured
// window, for the parent's /proc samples) and the JSON result.
func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	target := fs.String("target", "cairn", "cairn or etcd")
	eps := fs.String("endpoints", "", "comma-separated endpoints")
	op := fs.String("op", "put", "put, lin (linearizable get), ser (serializable get), mix (90% lin get / 10% put), fill")
	clients := fs.Int("clients", 1, "concurrent clients")
	perConn := fs.Int("clients-per-conn", 16, "concurrent clients sharing one client object")
	dur := fs.Duration("duration", 10*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "unmeasured warm-up")
	vsize := fs.Int("value-size", 256, "value bytes")
	nkeys := fs.Int("keys", 100000, "key space")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process over the measured window to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	endpoints := strings.Split(*eps, ",")
	nconn := max(1, (*clients+*perConn-1) / *perConn)
	kvs := make([]kv, nconn)
	for i := range kvs {
		k, err := newKV(*target, endpoints)
		if err != nil {
			return err
		}
		defer k.close()
		kvs[i] = k
	}
	value := make([]byte, *vsize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	ctx := context.Background()

	if *op == "fill" {
		// Every key once, untimed.
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := 0; w < *clients; w++ {
			wg.Add(1)
			go func(k kv) {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= *nkeys {
						return
					}
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					if err := k.put(cctx, key(i), value); err != nil {
						failed.Add(1)
					}
					cancel()
				}
			}(kvs[w%nconn])
		}
		wg.Wait()
		if f := failed.Load(); f > 0 {
			return fmt.Errorf("fill: %d puts failed", f)
		}
		return json.NewEncoder(os.Stdout).Encode(loadResult{Ops: int64(*nkeys)})
	}

	var measuring, stop atomic.Bool
	lats := make([][]time.Duration, *clients)
	var errs atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func(w int, k kv) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var mine []time.Duration
			for !stop.Load() {
				kk := key(rng.IntN(*nkeys))
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				var err error
				switch *op {
				case "put":
					err = k.put(cctx, kk, value)
				case "lin":
					err = k.get(cctx, kk, false)
				case "ser":
					err = k.get(cctx, kk, true)
				case "mix":
					if rng.IntN(10) == 0 {
						err = k.put(cctx, kk, value)
					} else {
						err = k.get(cctx, kk, false)
					}
				}
				d := time.Since(t0)
				cancel()
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, d)
			}
			lats[w] = mine
		}(w, kvs[w%nconn])
	}
	time.Sleep(*warm)
	var prof *os.File
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		prof = f
	}
	fmt.Println("start")
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(*dur)
	measuring.Store(false)
	el := time.Since(t0)
	if prof != nil {
		pprof.StopCPUProfile()
		if err := prof.Close(); err != nil {
			return err
		}
	}
	fmt.Println("end")
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := min(int(p*float64(len(all))), len(all)-1)
		return float64(all[i]) / 1e6
	}
	return json.NewEncoder(os.Stdout).Encode(loadResult{
		Ops: int64(len(all)), Errors: errs.Load(), Seconds: el.Seconds(),
		P50: pct(0.50), P99: pct(0.99), P999: pct(0.999),
	})
}
