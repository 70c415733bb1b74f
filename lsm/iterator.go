package lsm

import (
	"bytes"
	"errors"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/trace"
)

// Iterator iterates over the live user keys of a DB as of one snapshot, in
// ascending key order, within optional bounds. It is not safe for
// concurrent use; Key and Value are valid until the next positioning call.
//
// An iterator pins the memtables and files it reads: close it promptly.
type Iterator struct {
	rs    *readState
	iter  *mergingIter
	snap  base.SeqNum
	tombs []*rangedel.Set
	lower []byte
	upper []byte

	forward bool
	valid   bool
	err     error
	closed  bool
	// In the reverse direction the internal iterator sits before the
	// current entry, whose key and value are copied here. In the forward
	// direction key aliases the internal iterator's key.
	key, value []byte
	savedKey   []byte
	savedValue []byte
	seekBuf    []byte
	// blobHandle holds the current value when it is a separated one: Value
	// is a view of the blob cache's memory (a hit) or of ra's buffer (a
	// miss) until the next positioning call (no copy). ra reads ahead in
	// blob files during scans.
	blobHandle blob.Handle
	ra         blobReadahead
	// acc traces the iterator's blob cache lookups; nil if no trace ran
	// when it was created.
	acc *trace.Access
}

// setBlobValue resolves the blob index idx of ukey into it.value. It
// reports false, with it.err set, on failure.
func (it *Iterator) setBlobValue(ukey, idx []byte) bool {
	it.releaseBlob()
	h, err := it.rs.d.blobValueTraced(it.rs.version, ukey, idx, &it.ra, it.acc)
	if err != nil {
		it.err = err
		it.valid = false
		return false
	}
	it.blobHandle = h
	it.value = h.Value()
	return true
}

func (it *Iterator) releaseBlob() {
	it.blobHandle.Release()
	it.blobHandle = blob.Handle{}
}

// NewIter returns an iterator over the DB. With o.Snapshot it reads the
// snapshot, otherwise the state at the time of the call.
func (d *DB) NewIter(o *IterOptions) (*Iterator, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	var opts IterOptions
	if o != nil {
		opts = *o
	}
	snap := base.SeqNum(d.visibleSeq.Load())
	if opts.Snapshot != nil {
		if opts.Snapshot.db != d {
			return nil, base.InvalidArgumentf("snapshot belongs to another DB")
		}
		if opts.Snapshot.closed.Load() {
			return nil, ErrClosed
		}
		snap = opts.Snapshot.seq
	}
	rs := d.loadReadState()
	if rs == nil {
		return nil, ErrClosed
	}
	if opts.Snapshot == nil && snap < rs.minLatestSeq {
		snap = base.SeqNum(d.visibleSeq.Load()) // see readState.minLatestSeq
	}
	tombs, err := rs.tombstoneSets()
	if err != nil {
		rs.unref()
		return nil, err
	}
	// A trace running now records the iterator's lookups (one atomic
	// load); one started later does not.
	acc := d.tracer.NewAccess(trace.CallerIterator, -1, false)
	var children []base.InternalIterator
	for _, m := range rs.mems {
		children = append(children, m.newIter())
	}
	v := rs.version
	for i := len(v.Levels[0]) - 1; i >= 0; i-- {
		f := v.Levels[0][i]
		if !overlapsBounds(f, opts.LowerBound, opts.UpperBound) {
			continue
		}
		r, err := d.tables.get(f)
		if err != nil {
			for _, c := range children {
				c.Close()
			}
			rs.unref()
			return nil, err
		}
		children = append(children, r.NewIterTraced(nil, nil, acc.AtLevel(0)))
	}
	for level := 1; level < len(v.Levels); level++ {
		if len(v.Levels[level]) > 0 {
			children = append(children, newLevelIterTraced(d.tables, v.Levels[level], acc.AtLevel(level)))
		}
	}
	return &Iterator{
		rs:    rs,
		iter:  newMergingIter(children),
		snap:  snap,
		tombs: tombs,
		lower: bytes.Clone(opts.LowerBound),
		upper: bytes.Clone(opts.UpperBound),
		acc:   acc,
	}, nil
}

// overlapsBounds reports whether f may hold keys in [lower, upper).
func overlapsBounds(f *version.FileMetadata, lower, upper []byte) bool {
	smallest, largest, largestExclusive := f.UserKeyBounds()
	if upper != nil && bytes.Compare(smallest, upper) >= 0 {
		return false
	}
	if lower != nil {
		c := bytes.Compare(largest, lower)
		if c < 0 || (c == 0 && largestExclusive) {
			return false
		}
	}
	return true
}

// covered reports whether a range tombstone visible at the iterator's
// snapshot deletes ukey written at seq.
func (it *Iterator) covered(ukey []byte, seq base.SeqNum) bool {
	for _, t := range it.tombs {
		if t.MaxCoveringSeq(ukey, it.snap) > seq {
			return true
		}
	}
	return false
}

func (it *Iterator) searchKey(ukey []byte) []byte {
	it.seekBuf = base.MakeSearchKey(it.seekBuf[:0], ukey, it.snap)
	return it.seekBuf
}

// First moves to the first key; it reports whether one exists.
func (it *Iterator) First() bool {
	if it.lower != nil {
		return it.SeekGE(it.lower)
	}
	if !it.usable() {
		return false
	}
	it.iter.First()
	it.findNextEntry(nil)
	return it.valid
}

// Last moves to the last key; it reports whether one exists.
func (it *Iterator) Last() bool {
	if it.upper != nil {
		return it.SeekLT(it.upper)
	}
	if !it.usable() {
		return false
	}
	it.iter.Last()
	it.findPrevEntry()
	return it.valid
}

// SeekGE moves to the first key >= key; it reports whether one exists.
func (it *Iterator) SeekGE(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	it.iter.SeekGE(it.searchKey(key))
	it.findNextEntry(nil)
	return it.valid
}

// SeekLT moves to the last key < key; it reports whether one exists.
func (it *Iterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	// The first internal key of key sorts before all its versions.
	it.seekBuf = base.MakeInternalKey(it.seekBuf[:0], key, base.SeqNumMax, base.KindMax)
	it.iter.SeekLT(it.seekBuf)
	it.findPrevEntry()
	return it.valid
}

// Next moves to the next key; it reports whether one exists.
func (it *Iterator) Next() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if !it.forward {
		// The internal iterator sits before the entries of the current
		// key: step into them, then skip them all.
		if !it.iter.Valid() {
			it.iter.First()
		} else {
			it.iter.Next()
		}
		it.savedKey = append(it.savedKey[:0], it.key...)
		it.findNextEntry(it.savedKey)
		return it.valid
	}
	it.savedKey = append(it.savedKey[:0], it.key...)
	it.iter.Next()
	it.findNextEntry(it.savedKey)
	return it.valid
}

// Prev moves to the previous key; it reports whether one exists.
func (it *Iterator) Prev() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if it.forward {
		// The internal iterator sits on the current entry: step back
		// over every entry of the current key.
		it.savedKey = append(it.savedKey[:0], it.key...)
		for {
			it.iter.Prev()
			if !it.iter.Valid() {
				break
			}
			if bytes.Compare(base.UserKey(it.iter.Key()), it.savedKey) < 0 {
				break
			}
		}
	}
	it.findPrevEntry()
	return it.valid
}

// findNextEntry moves forward from the internal iterator's position to the
// first live user key greater than skip (any key if skip is nil).
func (it *Iterator) findNextEntry(skip []byte) {
	it.forward = true
	it.valid = false
	it.releaseBlob()
	skipping := skip != nil
	for ; it.iter.Valid(); it.iter.Next() {
		ukey, seq, kind, ok := base.ParseInternalKey(it.iter.Key())
		if !ok {
			it.err = base.CorruptionErrorf("malformed internal key %q", it.iter.Key())
			return
		}
		if seq >= it.snap {
			continue
		}
		if skipping && bytes.Compare(ukey, skip) <= 0 {
			continue
		}
		if it.upper != nil && bytes.Compare(ukey, it.upper) >= 0 {
			return
		}
		switch kind {
		case base.KindDelete:
			skip = append(it.savedKey[:0], ukey...)
			it.savedKey = skip
			skipping = true
		case base.KindSet, base.KindBlobIndex:
			if it.covered(ukey, seq) {
				skip = append(it.savedKey[:0], ukey...)
				it.savedKey = skip
				skipping = true
				continue
			}
			it.key, it.value = ukey, it.iter.Value()
			it.valid = true
			if kind == base.KindBlobIndex {
				it.setBlobValue(ukey, it.value)
			}
			return
		default:
			it.err = base.CorruptionErrorf("unexpected entry kind %s", kind)
			return
		}
	}
	it.err = it.iter.Error()
}

// findPrevEntry moves backward from the internal iterator's position to the
// last live user key at or before it. It scans each user key's versions
// from oldest to newest and keeps the newest visible one.
func (it *Iterator) findPrevEntry() {
	it.forward = false
	it.valid = false
	it.releaseBlob()
	haveValue := false // the saved entry is a live value (not a deletion)
	savedBlob := false // the saved value is a blob index
	it.savedKey = it.savedKey[:0]
	for ; it.iter.Valid(); it.iter.Prev() {
		ukey, seq, kind, ok := base.ParseInternalKey(it.iter.Key())
		if !ok {
			it.err = base.CorruptionErrorf("malformed internal key %q", it.iter.Key())
			return
		}
		if seq >= it.snap {
			continue
		}
		if haveValue && bytes.Compare(ukey, it.savedKey) < 0 {
			// The saved key's newest visible version is a value.
			break
		}
		if it.lower != nil && bytes.Compare(ukey, it.lower) < 0 {
			haveValue = false
			break
		}
		switch kind {
		case base.KindDelete:
			haveValue = false
		case base.KindSet, base.KindBlobIndex:
			if it.covered(ukey, seq) {
				haveValue = false
				continue
			}
			it.savedKey = append(it.savedKey[:0], ukey...)
			it.savedValue = append(it.savedValue[:0], it.iter.Value()...)
			haveValue = true
			savedBlob = kind == base.KindBlobIndex
		default:
			it.err = base.CorruptionErrorf("unexpected entry kind %s", kind)
			return
		}
	}
	if err := it.iter.Error(); err != nil {
		it.err = err
		return
	}
	if haveValue {
		if it.upper != nil && bytes.Compare(it.savedKey, it.upper) >= 0 {
			return
		}
		it.key, it.value = it.savedKey, it.savedValue
		it.valid = true
		if savedBlob {
			it.setBlobValue(it.savedKey, it.savedValue)
		}
	}
}

func (it *Iterator) usable() bool {
	if it.closed {
		it.err = ErrClosed
	}
	return it.err == nil
}

// Valid reports whether the iterator is positioned on a key.
func (it *Iterator) Valid() bool { return it.valid && it.err == nil }

// Key returns the current key.
func (it *Iterator) Key() []byte { return it.key }

// Value returns the current value. Like Key, it is valid only until the
// next positioning call or Close: a separated value (Options.MinBlobSize)
// is a view of the blob cache's memory or of the iterator's readahead
// buffer, both reused afterwards.
func (it *Iterator) Value() []byte { return it.value }

// Error returns the error, if any, that ended the iteration early.
func (it *Iterator) Error() error { return it.err }

// Close releases the iterator; it returns the iteration's error, if any.
func (it *Iterator) Close() error {
	if it.closed {
		return ErrClosed
	}
	it.closed = true
	it.releaseBlob()
	err := errors.Join(it.err, it.iter.Close())
	// key and value may alias a memtable's arena, which dropping the
	// readState may release (unmap): forget them first.
	it.key, it.value = nil, nil
	it.valid = false
	it.rs.unref()
	return err
}
