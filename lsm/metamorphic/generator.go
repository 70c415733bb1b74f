package metamorphic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// DefaultNumKeys is the size of a workload's key space: small, so that
// overwrites, deletions and range deletions keep meeting each other.
const DefaultNumKeys = 200

// Workload is a generated sequence of operations. Everything in it is a
// function of Seed and the generation parameters: Generate(seed, n) always
// returns the same ops.
type Workload struct {
	Seed uint64
	Ops  []Op
	// SyncMode says which writes ask for Sync: "all", "none" or "mixed".
	SyncMode string
	// Keys is the key space, ascending.
	Keys [][]byte
}

// opKind indexes the generator's weights.
type opKind int

const (
	kindPut opKind = iota
	kindDelete
	kindDeleteRange
	kindBatch
	kindGet
	kindSnapGet
	kindNewSnap
	kindCloseSnap
	kindIter
	kindSnapIter
	kindFlush
	kindCompact
	kindCheckpoint
	kindReopen
	kindCrash
	kindMetrics
	kindInvalid
	kindBlobGC
	numOpKinds
)

// baseWeights are the relative frequencies of the op kinds, before each
// workload scales them randomly.
var baseWeights = [numOpKinds]float64{
	kindPut:         25,
	kindDelete:      6,
	kindDeleteRange: 3,
	kindBatch:       8,
	kindGet:         15,
	kindSnapGet:     5,
	kindNewSnap:     1.5,
	kindCloseSnap:   1.2,
	kindIter:        10,
	kindSnapIter:    4,
	kindFlush:       1.2,
	kindCompact:     0.8,
	kindCheckpoint:  0.15,
	kindReopen:      0.3,
	kindCrash:       0.5,
	kindMetrics:     0.5,
	kindInvalid:     0.3,
	kindBlobGC:      0.6,
}

// maxOpenSnapshots bounds the snapshots a workload holds open at once.
const maxOpenSnapshots = 6

type generator struct {
	rng       *rand.Rand
	keys      [][]byte
	hot       [][]byte
	weights   [numOpKinds]float64
	total     float64
	syncProb  float64
	openSnaps []int
	nextSnap  int
}

// Generate returns a workload of numOps operations drawn from seed.
func Generate(seed uint64, numOps int) *Workload {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x6d6574616d6f7270))}
	w := &Workload{Seed: seed}
	switch g.rng.IntN(3) {
	case 0:
		w.SyncMode, g.syncProb = "all", 1
	case 1:
		w.SyncMode, g.syncProb = "none", 0
	default:
		w.SyncMode, g.syncProb = "mixed", 0.25
	}
	g.keys = g.makeKeys(DefaultNumKeys)
	w.Keys = g.keys
	for i := 0; i < 8; i++ {
		g.hot = append(g.hot, g.keys[g.rng.IntN(len(g.keys))])
	}
	for k := range g.weights {
		g.weights[k] = baseWeights[k] * (0.5 + g.rng.Float64())
		g.total += g.weights[k]
	}
	for len(w.Ops) < numOps {
		w.Ops = append(w.Ops, g.next())
	}
	return w
}

// makeKeys returns n distinct keys, ascending. Keys share prefixes, some
// are prefixes of others, and some hold 0x00 and 0xff bytes.
func (g *generator) makeKeys(n int) [][]byte {
	prefixes := []string{"a", "ab", "abc", "b", "b/", "user/", "user/1", "x\x00", "\xff"}
	const alphabet = "0123/ab\x00\xff"
	seen := make(map[string]bool, n)
	var keys [][]byte
	for len(keys) < n {
		var b strings.Builder
		b.WriteString(prefixes[g.rng.IntN(len(prefixes))])
		for range g.rng.IntN(9) {
			b.WriteByte(alphabet[g.rng.IntN(len(alphabet))])
		}
		if k := b.String(); !seen[k] {
			seen[k] = true
			keys = append(keys, []byte(k))
		}
	}
	slices.SortFunc(keys, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
	return keys
}

func (g *generator) next() Op {
	for {
		x := g.rng.Float64() * g.total
		k := opKind(0)
		for ; k < numOpKinds-1; k++ {
			if x < g.weights[k] {
				break
			}
			x -= g.weights[k]
		}
		if op := g.make(k); op != nil {
			return op
		}
	}
}

// make returns an op of kind k, or nil if none is possible now (such as
// closing a snapshot when none is open).
func (g *generator) make(k opKind) Op {
	switch k {
	case kindPut, kindDelete, kindDeleteRange, kindBatch:
		return g.write(k)
	case kindGet:
		return &getOp{key: g.seekKey(), snap: -1}
	case kindSnapGet:
		if len(g.openSnaps) == 0 {
			return nil
		}
		return &getOp{key: g.seekKey(), snap: g.pickSnap()}
	case kindNewSnap:
		if len(g.openSnaps) >= maxOpenSnapshots {
			return nil
		}
		id := g.nextSnap
		g.nextSnap++
		g.openSnaps = append(g.openSnaps, id)
		return &newSnapshotOp{id: id}
	case kindCloseSnap:
		if len(g.openSnaps) == 0 {
			return nil
		}
		i := g.rng.IntN(len(g.openSnaps))
		id := g.openSnaps[i]
		g.openSnaps = slices.Delete(g.openSnaps, i, i+1)
		return &closeSnapshotOp{id: id}
	case kindIter:
		return g.iter(-1)
	case kindSnapIter:
		if len(g.openSnaps) == 0 {
			return nil
		}
		return g.iter(g.pickSnap())
	case kindFlush:
		return &flushOp{}
	case kindBlobGC:
		return &blobGCOp{minRatio: []float64{0, 0.2, 0.5}[g.rng.IntN(3)]}
	case kindCompact:
		start, end := g.keyRange()
		if g.rng.IntN(4) == 0 {
			start = nil
		}
		if g.rng.IntN(4) == 0 {
			end = nil
		}
		return &compactOp{start: start, end: end}
	case kindCheckpoint:
		return &checkpointOp{}
	case kindReopen:
		g.openSnaps = nil
		return &reopenOp{}
	case kindCrash:
		g.openSnaps = nil
		if g.rng.IntN(2) == 0 {
			return &crashOp{torn: true, tornSeed: g.rng.Uint64()}
		}
		return &crashOp{}
	case kindMetrics:
		return &metricsOp{}
	case kindInvalid:
		o := &invalidOp{kind: g.rng.IntN(numInvalidKinds), start: g.key()}
		if o.kind == invalidReversedRange {
			a, b := g.keyRange()
			if string(a) == string(b) {
				return nil
			}
			o.start, o.end = b, a
		}
		return o
	}
	panic(fmt.Sprintf("metamorphic: unknown op kind %d", k))
}

func (g *generator) pickSnap() int { return g.openSnaps[g.rng.IntN(len(g.openSnaps))] }

func (g *generator) sync() bool { return g.rng.Float64() < g.syncProb }

func (g *generator) write(k opKind) writeOp {
	switch k {
	case kindPut:
		return &putOp{key: g.key(), value: g.value(), sync: g.sync()}
	case kindDelete:
		return &deleteOp{key: g.key(), sync: g.sync()}
	case kindDeleteRange:
		start, end := g.keyRange()
		return &deleteRangeOp{start: start, end: end, sync: g.sync()}
	default:
		n := 1 + g.rng.IntN(12)
		if g.rng.IntN(10) == 0 {
			n += g.rng.IntN(60)
		}
		b := &batchOp{sync: g.sync()}
		for range n {
			switch x := g.rng.IntN(20); {
			case x < 13:
				b.ents = append(b.ents, entry{kind: entrySet, key: g.key(), value: g.value()})
			case x < 18:
				b.ents = append(b.ents, entry{kind: entryDelete, key: g.key()})
			default:
				start, end := g.keyRange()
				b.ents = append(b.ents, entry{kind: entryDeleteRange, key: start, end: end})
			}
		}
		return b
	}
}

// key returns a key of the key space, often one of a few hot keys.
func (g *generator) key() []byte {
	if g.rng.IntN(4) == 0 {
		return g.hot[g.rng.IntN(len(g.hot))]
	}
	return g.keys[g.rng.IntN(len(g.keys))]
}

// seekKey returns a key of the key space or one next to it: a key just
// after or before one, or a short string that may fall anywhere.
func (g *generator) seekKey() []byte {
	k := g.key()
	switch x := g.rng.IntN(20); {
	case x < 12:
		return k
	case x < 15:
		return append(slices.Clip(k), 0)
	case x < 17:
		if len(k) > 1 {
			return k[:len(k)-1]
		}
		return k
	case x < 19:
		return append(slices.Clip(k), 0xff)
	default:
		return []byte{"\x00abuxz\xff"[g.rng.IntN(7)]}
	}
}

// keyRange returns start <= end, usually a few keys apart, sometimes far.
func (g *generator) keyRange() (start, end []byte) {
	i := g.rng.IntN(len(g.keys))
	span := 1 + g.rng.IntN(4)
	if g.rng.IntN(5) == 0 {
		span = g.rng.IntN(len(g.keys))
	}
	j := min(i+span, len(g.keys)-1)
	start, end = g.keys[i], g.keys[j]
	switch g.rng.IntN(6) {
	case 0:
		start = append(slices.Clip(start), 0)
	case 1:
		end = append(slices.Clip(end), 0)
	case 2:
		end = start // empty range
	}
	if string(start) > string(end) {
		start, end = end, start
	}
	return start, end
}

// value returns a value of random size: empty, small, or up to tens of
// KiB, either random bytes or a repeated pattern (compressible).
func (g *generator) value() []byte {
	var n int
	switch x := g.rng.IntN(100); {
	case x < 8:
		n = 0
	case x < 55:
		n = 1 + g.rng.IntN(32)
	case x < 85:
		n = 33 + g.rng.IntN(480)
	case x < 99:
		n = 513 + g.rng.IntN(4096)
	default:
		n = 4096 + g.rng.IntN(60<<10)
	}
	v := make([]byte, n)
	if g.rng.IntN(2) == 0 {
		for i := range v {
			v[i] = byte(g.rng.Uint32())
		}
		return v
	}
	pat := make([]byte, 1+g.rng.IntN(16))
	for i := range pat {
		pat[i] = byte(g.rng.Uint32())
	}
	for i := range v {
		v[i] = pat[i%len(pat)]
	}
	if n > 0 {
		v[g.rng.IntN(n)] = byte(g.rng.Uint32()) // distinct from other values
	}
	return v
}

// iter returns an iterator op over the latest state (snap < 0) or a
// snapshot: random bounds, then a positioning call followed by runs of Next
// and Prev with direction changes, re-seeks, and now and then a write,
// flush or compaction on the DB while the iterator is open.
func (g *generator) iter(snap int) Op {
	o := &iterOp{snap: snap}
	if g.rng.IntN(3) == 0 {
		o.lower, o.upper = g.keyRange()
		if g.rng.IntN(3) == 0 {
			o.lower = nil
		} else if g.rng.IntN(3) == 0 {
			o.upper = nil
		}
	}
	n := 1 + g.rng.IntN(24)
	if g.rng.IntN(10) == 0 {
		n += g.rng.IntN(200)
	}
	forward := true
	nested := 0
	for i := range n {
		x := g.rng.IntN(100)
		switch {
		case i == 0 || x < 12:
			o.steps = append(o.steps, g.position())
		case x < 15 && nested < 2:
			nested++
			var op Op
			switch y := g.rng.IntN(10); {
			case y < 7:
				op = g.write(kindPut + opKind(g.rng.IntN(4)))
			case y < 8:
				op = &flushOp{}
			case y < 9:
				op = &blobGCOp{}
			default:
				start, end := g.keyRange()
				op = &compactOp{start: start, end: end}
			}
			o.steps = append(o.steps, iterStep{kind: stepDB, op: op})
		default:
			if g.rng.IntN(4) == 0 {
				forward = !forward
			}
			if forward {
				o.steps = append(o.steps, iterStep{kind: stepNext})
			} else {
				o.steps = append(o.steps, iterStep{kind: stepPrev})
			}
		}
	}
	return o
}

func (g *generator) position() iterStep {
	switch g.rng.IntN(4) {
	case 0:
		return iterStep{kind: stepFirst}
	case 1:
		return iterStep{kind: stepLast}
	case 2:
		return iterStep{kind: stepSeekGE, key: g.seekKey()}
	default:
		return iterStep{kind: stepSeekLT, key: g.seekKey()}
	}
}
