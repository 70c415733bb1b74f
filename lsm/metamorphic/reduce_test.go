package metamorphic

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var flagReproOut = flag.String("repro-out", "", "with -reduce: write the reduced workload as a standalone Go test file (package repro) there")

var flagReduceTries = flag.Int("reduce-tries", 3, "with -reduce: runs of each candidate (a candidate fails if any run does)")

var flagReduce = flag.Bool("reduce", false, "with -seed and -config (one config): shrink the failing workload to a minimal op list and print it")

// TestReduce shrinks a failing workload (delta debugging over its ops,
// then over batch entries and iterator steps) so that an engine bug can be
// reported as a short reproduction:
//
//	go test ./lsm/metamorphic -run TestReduce -reduce -seed N -ops M -config tiny
func TestReduce(t *testing.T) {
	if !*flagReduce {
		t.Skip("run with -reduce -seed N -config NAME")
	}
	cfgs := selectedConfigs(*flagSeed)
	if *flagSeed == 0 || len(cfgs) != 1 {
		t.Fatal("-reduce needs -seed and exactly one -config")
	}
	cfg := cfgs[0]
	w := Generate(*flagSeed, numOps())
	_, err := Run(w, cfg)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("the workload does not fail under %s (err = %v)", cfg.Name, err)
	}
	failType := fmt.Sprintf("%T", w.Ops[min(f.OpIndex, len(w.Ops)-1)])
	run := func(ops []Op) error {
		_, err := Run(&Workload{Seed: w.Seed, Ops: ops, SyncMode: w.SyncMode, Keys: w.Keys}, cfg)
		return err
	}
	// Background flushes and compactions make some failures depend on
	// timing: a candidate fails if any of a few runs does.
	fails := func(ops []Op) bool {
		for range *flagReduceTries {
			var f *Failure
			if errors.As(run(ops), &f) && f.OpIndex <= len(ops) &&
				(f.OpIndex == len(ops) || fmt.Sprintf("%T", ops[f.OpIndex]) == failType) {
				return true
			}
		}
		return false
	}
	ops := w.Ops[:min(f.OpIndex+1, len(w.Ops))]
	for {
		before := fmt.Sprint(ops)
		ops = reduceOnce(ops, fails)
		if fmt.Sprint(ops) == before {
			break
		}
	}
	failed := 0
	for range 20 {
		if run(ops) != nil {
			failed++
		}
	}
	t.Logf("the reduced workload fails in %d of 20 runs", failed)
	var b strings.Builder
	for i, op := range ops {
		fmt.Fprintf(&b, "  #%d %s\n", i, op)
	}
	t.Logf("reduced to %d ops under %s:\n%s=> %v", len(ops), cfg, b.String(), run(ops))
	if *flagReproOut != "" {
		if err := os.WriteFile(*flagReproOut, []byte(goRepro(cfg, ops)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote a standalone Go test of the reduced workload to %s", *flagReproOut)
	}
}

// replace returns ops with ops[i] replaced by op.
func replace(ops []Op, i int, op Op) []Op {
	return append(append(append([]Op(nil), ops[:i]...), op), ops[i+1:]...)
}

// reduceOnce removes whatever ops, batch entries and iterator steps it
// can while fails stays true; it also replaces an iterator by a nested op
// it runs.
func reduceOnce(ops []Op, fails func([]Op) bool) []Op {
	for chunk := len(ops) / 2; chunk >= 1; {
		removed := false
		for i := 0; i+chunk <= len(ops); {
			cand := append(append([]Op(nil), ops[:i]...), ops[i+chunk:]...)
			if fails(cand) {
				ops, removed = cand, true
				continue
			}
			i += chunk
		}
		if !removed {
			chunk /= 2
		}
	}
	for i := range ops {
		switch o := ops[i].(type) {
		case *batchOp:
			for j := 0; j < len(o.ents) && len(o.ents) > 1; {
				c := &batchOp{sync: o.sync, ents: append(append([]entry(nil), o.ents[:j]...), o.ents[j+1:]...)}
				if cand := replace(ops, i, c); fails(cand) {
					ops, o = cand, c
					continue
				}
				j++
			}
		case *iterOp:
			replaced := false
			for _, st := range o.steps {
				if st.kind == stepDB {
					if cand := replace(ops, i, st.op); fails(cand) {
						ops, replaced = cand, true
						break
					}
				}
			}
			for j := 0; !replaced && j < len(o.steps) && len(o.steps) > 1; {
				c := *o
				c.steps = append(append([]iterStep(nil), o.steps[:j]...), o.steps[j+1:]...)
				if cand := replace(ops, i, &c); fails(cand) {
					ops, o = cand, &c
					continue
				}
				j++
			}
		}
	}
	return ops
}
