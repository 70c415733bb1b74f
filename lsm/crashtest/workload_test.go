package crashtest

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm"
)

// The workload of one round is a deterministic function of the round's
// seed: the child runs it and the parent regenerates it to know what each
// acknowledgement means.

const numKeys = 500

func key(i int) []byte { return fmt.Appendf(nil, "key-%04d", i) }

type opKind int

const (
	opPut opKind = iota
	opDelete
	opDeleteRange
	opBatch
	opFlush
	opCompact
)

// ent is one write of a batch; end is the exclusive end of a range
// deletion.
type ent struct {
	kind  opKind // opPut, opDelete or opDeleteRange
	key   []byte
	end   []byte
	value []byte
}

type op struct {
	kind opKind
	ents []ent // the writes of a put, delete, range delete or batch
	sync bool
	// start and end bound a compaction (nil: unbounded).
	start, end []byte
}

func (o op) isWrite() bool { return o.kind <= opBatch }

func (o op) String() string {
	switch o.kind {
	case opFlush:
		return "flush"
	case opCompact:
		return fmt.Sprintf("compact(%q, %q)", o.start, o.end)
	}
	var parts []string
	for _, e := range o.ents {
		switch e.kind {
		case opPut:
			parts = append(parts, fmt.Sprintf("set(%q, %s)", e.key, fmtValue(e.value)))
		case opDelete:
			parts = append(parts, fmt.Sprintf("del(%q)", e.key))
		default:
			parts = append(parts, fmt.Sprintf("delrange(%q, %q)", e.key, e.end))
		}
	}
	s := "nosync"
	if o.sync {
		s = "sync"
	}
	return fmt.Sprintf("write[%s](%s)", s, strings.Join(parts, ", "))
}

// workload generates a round's ops one at a time, so that a long run holds
// none of them in memory.
type workload struct {
	seed uint64
	rng  *rand.Rand
	i    int
	// syncPct is the percentage of writes that ask for Sync: most, half,
	// or almost none (unsynced writes are fast, so a kill then usually
	// lands right after an unsynced write was acknowledged).
	syncPct int
}

func newWorkload(seed uint64) *workload {
	w := &workload{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x637261736874))}
	w.syncPct = []int{90, 50, 5}[w.rng.IntN(3)]
	return w
}

func (w *workload) next() op {
	i := w.i
	w.i++
	switch {
	case i%97 == 96:
		return op{kind: opFlush}
	case i%331 == 330:
		o := op{kind: opCompact}
		if w.rng.IntN(3) > 0 {
			a := w.rng.IntN(numKeys)
			o.start, o.end = key(a), key(min(numKeys-1, a+w.rng.IntN(200)))
		}
		return o
	}
	o := op{sync: w.rng.IntN(100) < w.syncPct}
	switch x := w.rng.IntN(100); {
	case x < 72:
		o.kind = opPut
		o.ents = []ent{w.put(i)}
	case x < 84:
		o.kind = opDelete
		o.ents = []ent{{kind: opDelete, key: key(w.rng.IntN(numKeys))}}
	case x < 88:
		o.kind = opDeleteRange
		o.ents = []ent{w.deleteRange()}
	default:
		o.kind = opBatch
		for range 2 + w.rng.IntN(8) {
			switch y := w.rng.IntN(10); {
			case y < 7:
				o.ents = append(o.ents, w.put(i))
			case y < 9:
				o.ents = append(o.ents, ent{kind: opDelete, key: key(w.rng.IntN(numKeys))})
			default:
				o.ents = append(o.ents, w.deleteRange())
			}
		}
	}
	return o
}

func (w *workload) deleteRange() ent {
	a := w.rng.IntN(numKeys)
	return ent{kind: opDeleteRange, key: key(a), end: key(min(numKeys-1, a+1+w.rng.IntN(8)))}
}

// put returns a write of a random key. The value names the round seed and
// op index that wrote it (unless it is too short to), so that a wrong value
// found after a crash tells where it came from.
func (w *workload) put(i int) ent {
	var n int
	switch x := w.rng.IntN(100); {
	case x < 8:
		n = 0
	case x < 65:
		n = 1 + w.rng.IntN(200)
	case x < 95:
		n = 200 + w.rng.IntN(1800)
	default:
		n = 2000 + w.rng.IntN(18000)
	}
	tag := fmt.Sprintf("seed=%d op=%d;", w.seed, i)
	v := make([]byte, n)
	copy(v, tag)
	for j := len(tag); j < n; j++ {
		v[j] = byte(w.rng.Uint32())
	}
	return ent{kind: opPut, key: key(w.rng.IntN(numKeys)), value: v}
}

// apply runs o on db (the child's side).
func apply(db *lsm.DB, o op) error {
	wo := lsm.NoSync
	if o.sync {
		wo = lsm.Sync
	}
	switch o.kind {
	case opFlush:
		return db.Flush()
	case opCompact:
		return db.Compact(o.start, o.end)
	case opPut:
		return db.Put(o.ents[0].key, o.ents[0].value, wo)
	case opDelete:
		return db.Delete(o.ents[0].key, wo)
	case opDeleteRange:
		return db.DeleteRange(o.ents[0].key, o.ents[0].end, wo)
	}
	b := lsm.NewBatch()
	for _, e := range o.ents {
		switch e.kind {
		case opPut:
			b.Set(e.key, e.value)
		case opDelete:
			b.Delete(e.key)
		default:
			b.DeleteRange(e.key, e.end)
		}
	}
	return db.Write(b, wo)
}

// model is the parent's picture of the DB: key → value.
type model map[string][]byte

func (m model) clone() model {
	return maps.Clone(m)
}

// apply applies o's writes to m.
func (m model) apply(o op) {
	for _, e := range o.ents {
		switch e.kind {
		case opPut:
			m[string(e.key)] = e.value
		case opDelete:
			delete(m, string(e.key))
		default:
			for k := range m {
				if k >= string(e.key) && k < string(e.end) {
					delete(m, k)
				}
			}
		}
	}
}

// equal reports whether the engine's contents got are m.
func (m model) equal(got map[string][]byte) bool {
	if len(m) != len(got) {
		return false
	}
	for k, v := range got {
		if want, ok := m[k]; !ok || !bytes.Equal(want, v) {
			return false
		}
	}
	return true
}

// diff describes how the engine's contents got differ from m ("" if they
// do not), listing a few differences.
func (m model) diff(got map[string][]byte) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(got)) {
		want, ok := m[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("%q: engine has %s, expected absent", k, fmtValue(got[k])))
		case !bytes.Equal(want, got[k]):
			lines = append(lines, fmt.Sprintf("%q: engine has %s, expected %s", k, fmtValue(got[k]), fmtValue(want)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if _, ok := got[k]; !ok {
			lines = append(lines, fmt.Sprintf("%q: engine has no value, expected %s", k, fmtValue(m[k])))
		}
	}
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
	}
	return strings.Join(lines, "\n\t")
}

// fmtValue shows a value's length and the tag of the op that wrote it.
func fmtValue(v []byte) string {
	tag, _, ok := bytes.Cut(v, []byte(";"))
	if !ok || len(tag) > 40 {
		return fmt.Sprintf("%dB", len(v))
	}
	return fmt.Sprintf("%dB[%s]", len(v), tag)
}
