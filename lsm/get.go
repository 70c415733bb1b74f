package lsm

import (
	"bytes"
	"fmt"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/filter"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/trace"
)

// get returns a copy of the newest value of key visible at snapshot snap
// (0: the latest state).
//
// The lookup consults, newest first, the memtables (each behind its
// DynamicBloom filter), the L0 files whose bounds hold the key, and the one
// file per deeper level whose bounds hold it, each behind its SST filter,
// the bottom level included. The first point entry found is the newest; it
// counts only if no range tombstone newer than it covers the key.
//
// While a trace runs, the Get's block and blob cache lookups are recorded
// under a new get id; otherwise the only cost is the tracer's atomic load.
func (d *DB) get(key []byte, snap base.SeqNum) ([]byte, error) {
	var acc *trace.Access
	if traceHooks {
		acc = d.tracer.NewAccess(trace.CallerGet, 0, snap != 0)
	}
	if acc == nil {
		return d.getAccess(key, snap, d.resolveGet, nil)
	}
	return d.getAccess(key, snap, func(rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error) {
		return d.resolveGetAccess(rs, key, v, kind, seq, tombSeq, acc)
	}, acc)
}

// getResolver turns the newest entry found for key into get's result. v
// aliases the memtable or a table block: copy what is kept.
type getResolver func(rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error)

// getWith is get with the last step (resolving the entry found) given. Its
// lookups are traced as a compaction's: its caller is blob GC.
func (d *DB) getWith(key []byte, snap base.SeqNum, resolve getResolver) ([]byte, error) {
	return d.getAccess(key, snap, resolve, d.tracer.NewAccess(trace.CallerCompaction, 0, false))
}

// getAccess is getWith whose table lookups are traced as acc's (nil: not
// traced).
func (d *DB) getAccess(key []byte, snap base.SeqNum, resolve getResolver, acc *trace.Access) ([]byte, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if len(key) == 0 || len(key) > MaxKeySize {
		return nil, base.InvalidArgumentf("key of %d bytes (must be 1..%d)", len(key), MaxKeySize)
	}
	latest := snap == 0
	if snap == 0 {
		// Load the sequence number before the readState: every write
		// below it was applied to a memtable that this or a later
		// readState holds.
		snap = base.SeqNum(d.visibleSeq.Load())
	}
	rs := d.loadReadState()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.unref()
	if latest && snap < rs.minLatestSeq {
		// Blob GC retired a blob file between the two loads: the old
		// snapshot could meet an index into it (see readState).
		snap = base.SeqNum(d.visibleSeq.Load())
	}

	// The newest range tombstone covering key, over every source.
	var tombSeq base.SeqNum
	for _, m := range rs.mems {
		tombSeq = max(tombSeq, m.tombstoneSet().MaxCoveringSeq(key, snap))
	}
	tt, err := rs.tableTombstones()
	if err != nil {
		return nil, err
	}
	tombSeq = max(tombSeq, tt.MaxCoveringSeq(key, snap))

	h := filter.Hash(key)
	for _, m := range rs.mems {
		if v, kind, seq, ok := m.get(key, snap, h); ok {
			return resolve(rs, key, v, kind, seq, tombSeq)
		}
	}
	v := rs.version
	l0 := v.Levels[0]
	for i := len(l0) - 1; i >= 0; i-- { // L0 is ordered oldest first
		f := l0[i]
		if !fileHoldsUserKey(f, key) {
			continue
		}
		if val, kind, seq, ok, rel, err := d.tableGet(f, key, snap, h, acc, 0); err != nil {
			return nil, err
		} else if ok {
			return resolvePinned(resolve, rel, rs, key, val, kind, seq, tombSeq)
		}
	}
	for level := 1; level < version.NumLevels; level++ {
		f := findFileForUserKey(v.Levels[level], key)
		if f == nil {
			continue
		}
		if val, kind, seq, ok, rel, err := d.tableGet(f, key, snap, h, acc, level); err != nil {
			return nil, err
		} else if ok {
			return resolvePinned(resolve, rel, rs, key, val, kind, seq, tombSeq)
		}
	}
	return nil, ErrNotFound
}

// GetFunc calls fn with the newest value of key without copying it: the
// value is a view of the memtable, a table block, the blob cache or a
// mapped blob file, valid only during fn, which must not modify or keep it
// (Badger's Item.Value). It returns ErrNotFound, without calling fn, if
// key has no value, and otherwise fn's error. A Get that the caller
// consumes at once is cheaper this way: a 4 KiB separated value costs no
// allocation and no copy.
//
// A running trace records its lookups as a Get's, like Get's.
func (d *DB) GetFunc(key []byte, fn func(value []byte) error) error {
	var acc *trace.Access
	if traceHooks {
		acc = d.tracer.NewAccess(trace.CallerGet, 0, false)
	}
	_, err := d.getAccess(key, 0, func(rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error) {
		if seq < tombSeq {
			return nil, ErrNotFound
		}
		switch kind {
		case base.KindSet:
			return nil, fn(v)
		case base.KindDelete:
			return nil, ErrNotFound
		case base.KindBlobIndex:
			h, err := d.blobValueTraced(rs.version, key, v, nil, acc)
			if err != nil {
				return nil, err
			}
			defer h.Release()
			return nil, fn(h.Value())
		}
		return nil, base.CorruptionErrorf("entry of kind %s where a value was expected", kind)
	}, acc)
	return err
}

func (d *DB) resolveGet(rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error) {
	return d.resolveGetAccess(rs, key, v, kind, seq, tombSeq, nil)
}

// resolveGetAccess is resolveGet tracing a blob cache lookup as acc's.
func (d *DB) resolveGetAccess(rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum, acc *trace.Access) ([]byte, error) {
	if seq < tombSeq {
		return nil, ErrNotFound
	}
	switch kind {
	case base.KindSet:
		return bytes.Clone(v), nil
	case base.KindDelete:
		return nil, ErrNotFound
	case base.KindBlobIndex:
		// Cache first (see blobValue); the value is copied once, from
		// the cache's memory into the result.
		h, err := d.blobValueTraced(rs.version, key, v, nil, acc)
		if err != nil {
			return nil, err
		}
		out := bytes.Clone(h.Value())
		if out == nil {
			out = []byte{}
		}
		h.Release()
		return out, nil
	}
	return nil, base.CorruptionErrorf("entry of kind %s where a value was expected", kind)
}

// tableGet looks key up in one table, at level, tracing as acc's. The value
// is a view of a block that rel pins until rel.Release (see
// resolvePinned); rel is empty when ok is false.
func (d *DB) tableGet(f *version.FileMetadata, key []byte, snap base.SeqNum, h uint64, acc *trace.Access, level int) (v []byte, kind base.Kind, seq base.SeqNum, ok bool, rel cache.Handle, err error) {
	r, err := d.tables.get(f)
	if err != nil {
		return nil, 0, 0, false, cache.Handle{}, err
	}
	d.tableFilter.checked.Add(1)
	if !r.MayContain(h) {
		d.tableFilter.useful.Add(1)
		return nil, 0, 0, false, cache.Handle{}, nil
	}
	if acc != nil {
		acc.Level = int32(level)
	}
	v, kind, seq, ok, rel, err = r.GetUnfilteredTraced(key, snap, acc)
	if err != nil {
		return nil, 0, 0, false, cache.Handle{}, fmt.Errorf("lsm: table %s: %w", f.FileNum, err)
	}
	return v, kind, seq, ok, rel, nil
}

// resolvePinned is resolve of a table's entry whose value rel pins: the
// block is released once resolve has copied or used the value (GetFunc's
// callback runs inside resolve), panic or not.
func resolvePinned(resolve getResolver, rel cache.Handle, rs *readState, key, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error) {
	defer rel.Release()
	return resolve(rs, key, v, kind, seq, tombSeq)
}

// fileHoldsUserKey reports whether ukey lies within f's bounds. A largest
// bound that is a range-deletion sentinel is exclusive.
func fileHoldsUserKey(f *version.FileMetadata, ukey []byte) bool {
	if bytes.Compare(ukey, base.UserKey(f.Smallest)) < 0 {
		return false
	}
	c := bytes.Compare(ukey, base.UserKey(f.Largest))
	return c < 0 || (c == 0 && !base.IsRangeDeleteSentinel(f.Largest))
}

// findFileForUserKey returns the file of a sorted, non-overlapping level
// whose bounds hold ukey, or nil.
func findFileForUserKey(files []*version.FileMetadata, ukey []byte) *version.FileMetadata {
	// The first file whose upper bound is past ukey: largest user key >
	// ukey, or == ukey and inclusive (not a range-deletion sentinel).
	lo, hi := 0, len(files)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		largest := files[m].Largest
		c := bytes.Compare(base.UserKey(largest), ukey)
		if c < 0 || (c == 0 && base.IsRangeDeleteSentinel(largest)) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(files) && fileHoldsUserKey(files[lo], ukey) {
		return files[lo]
	}
	return nil
}
