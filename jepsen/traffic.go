package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/jepsen/history"
)

// A workload generates one client operation at a time and knows how to set
// up its keys and read the final state. Traffic runs Clients workers, each
// with a client of its own (its own client ID, connections and leader
// guess), all with the client library's retries on: they are part of what
// is tested.
type workload interface {
	// setup prepares the keys before traffic starts (not recorded).
	setup(ctx context.Context, c *client.Client) error
	// step performs one operation and returns it with F, arguments,
	// Outcome and results filled in; Call and Return are set by the caller.
	// A zero F means "nothing to do this time".
	step(ctx context.Context, c *client.Client, w *worker) history.Op
	// finalReads are the reads run once after recovery (each retried
	// until it succeeds, a few times), recorded as ordinary ops.
	finalReads() []stepFunc
}

type stepFunc func(ctx context.Context, c *client.Client, w *worker) history.Op

// worker is one client process. After an indeterminate (Info) operation
// the process takes a new id, as in Jepsen: the old one may still have an
// operation in flight.
type worker struct {
	process int
	rng     *rand.Rand
	// last holds, per register key, values this worker saw or wrote (for
	// cas expectations).
	last map[string]int64
}

// traffic runs the workers until ctx ends.
type traffic struct {
	wl        workload
	clients   int
	endpoints []string
	opTimeout time.Duration
	rate      float64 // total ops/s across workers; 0: as fast as they go
	seed      int64
	tls       *tls.Config // nil: plaintext
	rec       *recorder
	nextProc  atomic.Int64
}

func newClient(endpoints []string, id string, tlsCfg *tls.Config) (*client.Client, error) {
	return client.New(client.Config{
		Endpoints:       endpoints,
		ClientID:        id,
		TLS:             tlsCfg,
		MaxRetryBackoff: 250 * time.Millisecond,
	})
}

func (t *traffic) run(ctx context.Context) error {
	var wg sync.WaitGroup
	t.nextProc.Store(int64(t.clients))
	errs := make(chan error, t.clients)
	for i := range t.clients {
		c, err := newClient(t.endpoints, fmt.Sprintf("jepsen-%d-%d", t.seed, i), t.tls)
		if err != nil {
			return err
		}
		w := &worker{process: i, rng: rand.New(rand.NewPCG(uint64(t.seed), uint64(i)+1)), last: map[string]int64{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs <- t.loop(ctx, c, w)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *traffic) loop(ctx context.Context, c *client.Client, w *worker) error {
	var interval time.Duration
	if t.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(t.clients) / t.rate)
	}
	next := time.Now()
	for ctx.Err() == nil {
		if interval > 0 {
			// Poisson-ish pacing: exponential gaps with the right mean.
			next = next.Add(time.Duration(w.rng.ExpFloat64() * float64(interval)))
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(d):
				}
			} else {
				next = time.Now()
			}
		}
		t.do(ctx, c, w, t.wl.step)
	}
	return nil
}

// do runs one operation and records it. The operation's context is not
// the run's: an operation in flight when the run ends completes (or
// times out) normally.
func (t *traffic) do(ctx context.Context, c *client.Client, w *worker,
	f stepFunc) history.Outcome {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opTimeout)
	defer cancel()
	call := t.rec.now()
	op := f(octx, c, w)
	if op.F == "" {
		return ""
	}
	op.Return = t.rec.now()
	op.Call = call
	op.Process = w.process
	t.rec.op(op)
	if op.Outcome == history.Info {
		w.process = int(t.nextProc.Add(1)) - 1
	}
	return op.Outcome
}

// final runs the workload's final reads on a fresh client and records them.
func (t *traffic) final(ctx context.Context) error {
	c, err := newClient(t.endpoints, fmt.Sprintf("jepsen-%d-final", t.seed), t.tls)
	if err != nil {
		return err
	}
	defer c.Close()
	w := &worker{process: int(t.nextProc.Add(1)) - 1, rng: rand.New(rand.NewPCG(uint64(t.seed), 0)), last: map[string]int64{}}
	for _, f := range t.wl.finalReads() {
		ok := false
		for range 5 {
			if t.do(ctx, c, w, f) == history.OK {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("a final read failed 5 times")
		}
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
