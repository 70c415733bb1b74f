package lsm

import (
	"errors"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// mergingIter merges child iterators into one stream in internal-key order.
// Children hold disjoint entries (every internal key is unique: sequence
// numbers are), so the merge needs no tie-breaking.
//
// It follows LevelDB's MergingIterator: the current child is found by a
// linear scan over the children (a DB has a handful: memtables, L0 files and
// one iterator per deeper level), and a change of direction re-seeks every
// child around the current key.
type mergingIter struct {
	children []base.InternalIterator
	cur      int // index of the current child, -1 when exhausted
	forward  bool
	err      error
}

func newMergingIter(children []base.InternalIterator) *mergingIter {
	return &mergingIter{children: children, cur: -1, forward: true}
}

func (m *mergingIter) checkErrors() bool {
	for _, c := range m.children {
		if err := c.Error(); err != nil {
			m.err = err
			m.cur = -1
			return false
		}
	}
	return true
}

func (m *mergingIter) findSmallest() {
	m.cur = -1
	if !m.checkErrors() {
		return
	}
	for i, c := range m.children {
		if c.Valid() && (m.cur < 0 || base.InternalCompare(c.Key(), m.children[m.cur].Key()) < 0) {
			m.cur = i
		}
	}
}

func (m *mergingIter) findLargest() {
	m.cur = -1
	if !m.checkErrors() {
		return
	}
	for i, c := range m.children {
		if c.Valid() && (m.cur < 0 || base.InternalCompare(c.Key(), m.children[m.cur].Key()) > 0) {
			m.cur = i
		}
	}
}

func (m *mergingIter) SeekGE(ikey []byte) {
	if m.err != nil {
		return
	}
	for _, c := range m.children {
		c.SeekGE(ikey)
	}
	m.forward = true
	m.findSmallest()
}

func (m *mergingIter) SeekLT(ikey []byte) {
	if m.err != nil {
		return
	}
	for _, c := range m.children {
		c.SeekLT(ikey)
	}
	m.forward = false
	m.findLargest()
}

func (m *mergingIter) First() {
	if m.err != nil {
		return
	}
	for _, c := range m.children {
		c.First()
	}
	m.forward = true
	m.findSmallest()
}

func (m *mergingIter) Last() {
	if m.err != nil {
		return
	}
	for _, c := range m.children {
		c.Last()
	}
	m.forward = false
	m.findLargest()
}

func (m *mergingIter) Next() {
	if m.cur < 0 {
		return
	}
	cur := m.children[m.cur]
	if !m.forward {
		// Every other child is positioned before the current key; move
		// each to the first entry after it.
		key := append([]byte(nil), cur.Key()...)
		for i, c := range m.children {
			if i == m.cur {
				continue
			}
			c.SeekGE(key)
			if c.Valid() && base.InternalCompare(c.Key(), key) == 0 {
				c.Next()
			}
		}
		m.forward = true
	}
	cur.Next()
	m.findSmallest()
}

func (m *mergingIter) Prev() {
	if m.cur < 0 {
		return
	}
	cur := m.children[m.cur]
	if m.forward {
		// Every other child is positioned after the current key; move
		// each to the last entry before it.
		key := append([]byte(nil), cur.Key()...)
		for i, c := range m.children {
			if i == m.cur {
				continue
			}
			c.SeekLT(key)
		}
		m.forward = false
	}
	cur.Prev()
	m.findLargest()
}

func (m *mergingIter) Valid() bool   { return m.cur >= 0 }
func (m *mergingIter) Key() []byte   { return m.children[m.cur].Key() }
func (m *mergingIter) Value() []byte { return m.children[m.cur].Value() }
func (m *mergingIter) Error() error  { return m.err }

func (m *mergingIter) Close() error {
	errs := []error{m.err}
	for _, c := range m.children {
		errs = append(errs, c.Close())
	}
	m.children = nil
	m.cur = -1
	return errors.Join(errs...)
}
