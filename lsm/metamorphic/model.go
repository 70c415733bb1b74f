package metamorphic

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// model is the reference the engine is checked against: a plain map from
// user key to value. Values are never modified in place once stored, so
// clones share them.
type model struct {
	m map[string][]byte
	// sorted caches the keys in ascending order; nil after a mutation.
	sorted []string
}

func newModel() *model { return &model{m: make(map[string][]byte)} }

func (m *model) clone() *model { return &model{m: maps.Clone(m.m), sorted: m.sorted} }

func (m *model) get(key []byte) ([]byte, bool) {
	v, ok := m.m[string(key)]
	return v, ok
}

func (m *model) set(key, value []byte) {
	if _, ok := m.m[string(key)]; !ok {
		m.sorted = nil
	}
	m.m[string(key)] = value
}

func (m *model) delete(key []byte) {
	if _, ok := m.m[string(key)]; ok {
		delete(m.m, string(key))
		m.sorted = nil
	}
}

// deleteRange removes every key k with start <= k < end.
func (m *model) deleteRange(start, end []byte) {
	for _, k := range m.keys() {
		if k >= string(start) && k < string(end) {
			delete(m.m, k)
			m.sorted = nil
		}
	}
}

// apply applies a write operation (put, delete, range delete or batch).
func (m *model) apply(op writeOp) {
	for _, e := range op.entries() {
		switch e.kind {
		case entrySet:
			m.set(e.key, e.value)
		case entryDelete:
			m.delete(e.key)
		case entryDeleteRange:
			m.deleteRange(e.key, e.end)
		}
	}
}

// keys returns the keys in ascending order. The result must not be
// modified.
func (m *model) keys() []string {
	if m.sorted == nil {
		m.sorted = slices.Sorted(maps.Keys(m.m))
	}
	return m.sorted
}

// boundedKeys returns the keys k with lower <= k < upper (nil bounds are
// open), ascending.
func (m *model) boundedKeys(lower, upper []byte) []string {
	keys := m.keys()
	lo, hi := 0, len(keys)
	if lower != nil {
		lo, _ = slices.BinarySearch(keys, string(lower))
	}
	if upper != nil {
		hi, _ = slices.BinarySearch(keys, string(upper))
	}
	if lo > hi {
		return nil
	}
	return keys[lo:hi]
}

// diff describes how got (the engine's contents, as key/value pairs in
// ascending order) differs from the model, or returns "" if it does not.
// At most a few differences are listed.
func (m *model) diff(got []kv) string {
	var b strings.Builder
	n := 0
	note := func(format string, args ...any) {
		if n < 8 {
			fmt.Fprintf(&b, "\n\t"+format, args...)
		}
		n++
	}
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1].key, got[i].key) >= 0 {
			note("engine keys out of order: %q then %q", got[i-1].key, got[i].key)
		}
	}
	seen := make(map[string]bool, len(got))
	for _, e := range got {
		seen[string(e.key)] = true
		want, ok := m.m[string(e.key)]
		switch {
		case !ok:
			note("key %q: engine has %s, model has no value", e.key, fmtValue(e.value))
		case !bytes.Equal(want, e.value):
			note("key %q: engine has %s, model has %s", e.key, fmtValue(e.value), fmtValue(want))
		}
	}
	for _, k := range m.keys() {
		if !seen[k] {
			note("key %q: engine has no value, model has %s", k, fmtValue(m.m[k]))
		}
	}
	if n > 8 {
		fmt.Fprintf(&b, "\n\t... and %d more differences", n-8)
	}
	return b.String()
}

// kv is one key/value pair read from the engine.
type kv struct{ key, value []byte }

// modelIter mimics lsm.Iterator over a frozen model state: positioning
// calls report whether they landed on a key; Next and Prev on an
// unpositioned iterator stay unpositioned (the engine's contract).
type modelIter struct {
	keys  []string // the keys within the bounds, ascending
	vals  *model
	lower []byte
	upper []byte
	pos   int // index into keys; -1 when not positioned
}

func newModelIter(m *model, lower, upper []byte) *modelIter {
	return &modelIter{keys: m.boundedKeys(lower, upper), vals: m, lower: lower, upper: upper, pos: -1}
}

func (it *modelIter) valid() bool { return it.pos >= 0 && it.pos < len(it.keys) }

func (it *modelIter) set(pos int) bool {
	if pos < 0 || pos >= len(it.keys) {
		it.pos = -1
		return false
	}
	it.pos = pos
	return true
}

func (it *modelIter) first() bool { return it.set(0) }
func (it *modelIter) last() bool  { return it.set(len(it.keys) - 1) }

func (it *modelIter) seekGE(key []byte) bool {
	i, _ := slices.BinarySearch(it.keys, string(key))
	return it.set(i)
}

func (it *modelIter) seekLT(key []byte) bool {
	i, _ := slices.BinarySearch(it.keys, string(key))
	return it.set(i - 1)
}

func (it *modelIter) next() bool {
	if !it.valid() {
		return false
	}
	return it.set(it.pos + 1)
}

func (it *modelIter) prev() bool {
	if !it.valid() {
		return false
	}
	return it.set(it.pos - 1)
}

func (it *modelIter) key() []byte { return []byte(it.keys[it.pos]) }

func (it *modelIter) value() []byte { return it.vals.m[it.keys[it.pos]] }
