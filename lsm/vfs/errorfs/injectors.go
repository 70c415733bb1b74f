package errorfs

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// opSet is a set of Ops; the zero value holds every Op.
type opSet struct {
	set  [numOps]bool
	some bool // false: all ops
}

// makeOpSet returns the set of ops; no ops means every op.
func makeOpSet(ops []Op) opSet {
	if len(ops) == 0 {
		return opSet{}
	}
	s := opSet{some: true}
	for _, o := range ops {
		if o < numOps {
			s.set[o] = true
		}
	}
	return s
}

func (s *opSet) has(o Op) bool { return !s.some || (o < numOps && s.set[o]) }

// Index is an Injector that fails exactly the n-th matching operation
// (counting from 0) and counts the matching operations it sees. It is safe
// for concurrent use; when operations race, which of them is the n-th is
// decided by an atomic counter.
type Index struct {
	n     int64
	ops   opSet
	count atomic.Int64
}

// OnIndex returns an Injector that fails the n-th operation (from 0),
// counted across all operations and all files. A negative n fails nothing
// and only counts.
func OnIndex(n int64) *Index { return &Index{n: n} }

// WithOps restricts the injector to the given operations (none: all): only
// they are counted and only they can fail. It returns ii and must be called before
// use.
func (ii *Index) WithOps(ops ...Op) *Index {
	ii.ops = makeOpSet(ops)
	return ii
}

// Count returns how many matching operations have been seen.
func (ii *Index) Count() int64 { return ii.count.Load() }

// Injected reports whether the n-th operation has been reached (and failed).
func (ii *Index) Injected() bool { return ii.n >= 0 && ii.count.Load() > ii.n }

// MaybeError implements Injector.
func (ii *Index) MaybeError(op Op, path string) error {
	if !ii.ops.has(op) {
		return nil
	}
	if i := ii.count.Add(1) - 1; i == ii.n {
		return fmt.Errorf("%w (%s %s, op #%d)", ErrInjected, op, path, i)
	}
	return nil
}

// RandomInjector fails each matching operation with probability p, drawing
// from a seeded generator (the same sequence of operations fails the same
// way for the same seed). It is safe for concurrent use.
type RandomInjector struct {
	p   float64
	ops opSet
	mu  struct {
		sync.Mutex
		rng *rand.Rand
	}
	injected atomic.Int64
}

// Random returns an Injector failing each operation with probability p.
func Random(p float64, seed uint64) *RandomInjector {
	r := &RandomInjector{p: p}
	r.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return r
}

// WithOps restricts the injector to the given operations. It returns r and
// must be called before use.
func (r *RandomInjector) WithOps(ops ...Op) *RandomInjector {
	r.ops = makeOpSet(ops)
	return r
}

// Injected returns how many errors have been injected.
func (r *RandomInjector) Injected() int64 { return r.injected.Load() }

// MaybeError implements Injector.
func (r *RandomInjector) MaybeError(op Op, path string) error {
	if !r.ops.has(op) {
		return nil
	}
	r.mu.Lock()
	fail := r.mu.rng.Float64() < r.p
	r.mu.Unlock()
	if !fail {
		return nil
	}
	r.injected.Add(1)
	return fmt.Errorf("%w (%s %s, random)", ErrInjected, op, path)
}

// Filter passes to inj only the given operations (none: all) on paths for which match
// (if not nil) returns true; others never fail.
func Filter(inj Injector, match func(path string) bool, ops ...Op) Injector {
	s := makeOpSet(ops)
	return InjectorFunc(func(op Op, path string) error {
		if !s.has(op) || (match != nil && !match(path)) {
			return nil
		}
		return inj.MaybeError(op, path)
	})
}
