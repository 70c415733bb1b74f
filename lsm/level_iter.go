package lsm

import (
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/trace"
)

// levelIter concatenates the tables of one sorted, non-overlapping level,
// opening each table's iterator only when the iteration reaches it.
type levelIter struct {
	tc    *tableCache
	files []*version.FileMetadata
	idx   int // index of the file under iter; -1 or len(files) when none
	iter  base.InternalIterator
	err   error
	// acc traces the tables' data-block lookups (nil: not traced).
	acc *trace.Access
	// newIter, if set, opens a file's iterator instead of the table
	// cache's reader (compactions read through their own readers).
	newIter func(f *version.FileMetadata) (base.InternalIterator, error)
}

func newLevelIter(tc *tableCache, files []*version.FileMetadata) *levelIter {
	return newLevelIterTraced(tc, files, nil)
}

func newLevelIterTraced(tc *tableCache, files []*version.FileMetadata, acc *trace.Access) *levelIter {
	return &levelIter{tc: tc, files: files, idx: -1, acc: acc}
}

// open positions l on file i, closing the previous file's iterator.
func (l *levelIter) open(i int) bool {
	if l.iter != nil {
		if err := l.iter.Close(); err != nil && l.err == nil {
			l.err = err
		}
		l.iter = nil
	}
	l.idx = i
	if l.err != nil || i < 0 || i >= len(l.files) {
		return false
	}
	if l.newIter != nil {
		it, err := l.newIter(l.files[i])
		if err != nil {
			l.err = err
			return false
		}
		l.iter = it
		return true
	}
	r, err := l.tc.get(l.files[i])
	if err != nil {
		l.err = err
		return false
	}
	l.iter = r.NewIterTraced(nil, nil, l.acc)
	return true
}

// settleForward moves to following files until an entry is found.
func (l *levelIter) settleForward() {
	for l.iter != nil && !l.iter.Valid() {
		if err := l.iter.Error(); err != nil {
			l.err = err
			return
		}
		if !l.open(l.idx + 1) {
			return
		}
		l.iter.First()
	}
}

// settleBackward moves to preceding files until an entry is found.
func (l *levelIter) settleBackward() {
	for l.iter != nil && !l.iter.Valid() {
		if err := l.iter.Error(); err != nil {
			l.err = err
			return
		}
		if !l.open(l.idx - 1) {
			return
		}
		l.iter.Last()
	}
}

func (l *levelIter) SeekGE(ikey []byte) {
	// The first file whose largest key is >= ikey.
	lo, hi := 0, len(l.files)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if base.InternalCompare(l.files[m].Largest, ikey) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if l.open(lo) {
		l.iter.SeekGE(ikey)
		l.settleForward()
	}
}

func (l *levelIter) SeekLT(ikey []byte) {
	// The last file whose smallest key is < ikey.
	lo, hi := 0, len(l.files)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if base.InternalCompare(l.files[m].Smallest, ikey) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if l.open(lo - 1) {
		l.iter.SeekLT(ikey)
		l.settleBackward()
	}
}

func (l *levelIter) First() {
	if l.open(0) {
		l.iter.First()
		l.settleForward()
	}
}

func (l *levelIter) Last() {
	if l.open(len(l.files) - 1) {
		l.iter.Last()
		l.settleBackward()
	}
}

func (l *levelIter) Next() {
	l.iter.Next()
	l.settleForward()
}

func (l *levelIter) Prev() {
	l.iter.Prev()
	l.settleBackward()
}

func (l *levelIter) Valid() bool {
	return l.err == nil && l.iter != nil && l.iter.Valid()
}
func (l *levelIter) Key() []byte   { return l.iter.Key() }
func (l *levelIter) Value() []byte { return l.iter.Value() }
func (l *levelIter) Error() error  { return l.err }

func (l *levelIter) Close() error {
	l.open(-1)
	return l.err
}
