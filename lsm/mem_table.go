package lsm

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/filter"
	"github.com/cairnkv/cairn/lsm/internal/arenaskl"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
)

// memTable holds recent writes in an arena-backed skiplist, fronted by a
// DynamicBloom filter over the user keys of its point entries so that a Get
// for a key the memtable does not hold costs one cache line. Range
// tombstones are kept beside the skiplist, in arrival order.
//
// Writes come only from the commit pipeline, one batch at a time; reads are
// concurrent with writes and take no lock except to snapshot the tombstone
// list.
//
// The arena is memory outside the Go heap (see arenaskl.Arena), freed when
// the last reference is dropped. References: one for the DB's lists
// (d.mu.mem, d.mu.imm; or recovery's memtable), one per readState whose
// mems hold it (readers keep their readState until they stop reading:
// Get and GetFunc until they return, iterators until Close), one for a
// flush writing it.
type memTable struct {
	skl *arenaskl.Skiplist
	// refs counts the references above. Invariant: the arena is released
	// exactly when refs drops to 0, and nothing takes a reference after.
	refs atomic.Int32
	// liveBytes is the owning DB's count of arena bytes not yet released
	// (Metrics.MemTableArenaBytes).
	liveBytes *atomic.Int64
	bloom     *filter.DynamicBloom // nil when disabled
	// logNum is the WAL that holds this memtable's writes; it may be
	// deleted once the memtable is flushed.
	logNum base.FileNum
	// capacityBytes is the arena size; the memtable is full when the next
	// batch would not fit.
	capacityBytes int64
	// forceFlush: a Flush waits for this memtable (see
	// DB.flushReadyLocked). REQUIRES: DB.mu held.
	forceFlush bool
	// scratch is the single writer's internal-key buffer.
	scratch []byte
	// entries counts the entries applied, tombstones included.
	entries atomic.Int64

	mu struct {
		sync.Mutex
		tombstones []base.RangeTombstone
	}
	// tombs is an immutable fragmented view of mu.tombstones, replaced on
	// every range deletion.
	tombs atomic.Pointer[rangedel.Set]

	// Statistics for Metrics.
	bloomChecked atomic.Int64
	bloomUseful  atomic.Int64
}

// memTableArenaOverheadBytes bounds the arena space an entry takes beyond
// its key and value bytes: a node at full height, alignment and the
// internal key's trailer.
var memTableArenaOverheadBytes = int64(arenaskl.MaxNodeSize(base.TrailerLen, 0))

// newMemTable returns a memtable with one reference, its owner's: the
// DB's lists, or recovery. Its arena counts in d.memArenaBytes until
// released.
func (d *DB) newMemTable(capacityBytes int64, logNum base.FileNum) *memTable {
	m := &memTable{
		skl:           arenaskl.NewSkiplist(arenaskl.NewArena(int(capacityBytes))),
		logNum:        logNum,
		capacityBytes: capacityBytes,
		liveBytes:     &d.memArenaBytes,
	}
	m.refs.Store(1)
	m.liveBytes.Add(int64(m.skl.Arena().Capacity()))
	if bloomBitsPerKey := d.opts.MemtableBloomBitsPerKey; bloomBitsPerKey > 0 {
		keys := int(capacityBytes / MemTableBloomAssumedEntryBytes)
		m.bloom = filter.NewDynamicBloomBitsPerKey(keys, bloomBitsPerKey)
	}
	m.tombs.Store(rangedel.NewSet(nil))
	return m
}

// ref takes a reference. REQUIRES: the caller holds one already (directly,
// or through d.mu for the DB's lists' reference).
func (m *memTable) ref() {
	if m.refs.Add(1) <= 1 {
		panic("lsm: memtable referenced after its arena was released")
	}
}

// unref drops a reference, releasing the arena with the last one. Nothing
// may touch the arena's memory (keys, values, iterators) through this
// reference afterwards.
func (m *memTable) unref() {
	switch n := m.refs.Add(-1); {
	case n == 0:
		a := m.skl.Arena()
		m.liveBytes.Add(-int64(a.Capacity()))
		a.Release()
	case n < 0:
		panic("lsm: memtable reference count below zero")
	}
}

// fits reports whether a batch of n encoded bytes and count entries fits
// in the arena.
func (m *memTable) fits(n, count int) bool {
	need := int64(n) + int64(count)*memTableArenaOverheadBytes
	return int64(m.skl.Size())+need <= m.capacityBytes
}

// empty reports whether the memtable holds nothing.
func (m *memTable) empty() bool {
	return m.entries.Load() == 0
}

// apply inserts the batch's entries, the i-th at sequence number seq+i.
// REQUIRES: the caller is the only writer (the commit leader or recovery).
func (m *memTable) apply(r batchReader, seq base.SeqNum) error {
	ikey := m.scratch
	defer func() { m.scratch = ikey[:0] }()
	for i := base.SeqNum(0); ; i++ {
		kind, key, value, ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if kind == base.KindRangeDelete {
			m.addTombstone(base.RangeTombstone{
				Start: bytes.Clone(key), End: bytes.Clone(value), Seq: seq + i,
			})
			m.entries.Add(1)
			continue
		}
		ikey = base.MakeInternalKey(ikey[:0], key, seq+i, kind)
		if err := m.skl.Add(ikey, value); err != nil {
			return err
		}
		if m.bloom != nil {
			m.bloom.Add(filter.Hash(key))
		}
		m.entries.Add(1)
	}
	return nil
}

func (m *memTable) addTombstone(t base.RangeTombstone) {
	if string(t.Start) >= string(t.End) {
		return // empty range: deletes nothing
	}
	m.mu.Lock()
	m.mu.tombstones = append(m.mu.tombstones, t)
	set := rangedel.NewSet(m.mu.tombstones)
	m.mu.Unlock()
	m.tombs.Store(set)
}

// tombstones returns the memtable's range tombstones (fragmented).
func (m *memTable) tombstoneSet() *rangedel.Set { return m.tombs.Load() }

// rawTombstones returns a copy of the unfragmented tombstones.
func (m *memTable) rawTombstones() []base.RangeTombstone {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]base.RangeTombstone(nil), m.mu.tombstones...)
}

// get returns the newest point entry of ukey visible at snapshot snap (with
// a sequence number below snap). h is filter.Hash(ukey).
func (m *memTable) get(ukey []byte, snap base.SeqNum, h uint64) (value []byte, kind base.Kind, seq base.SeqNum, found bool) {
	if m.bloom != nil {
		m.bloomChecked.Add(1)
		if !m.bloom.MayContain(h) {
			m.bloomUseful.Add(1)
			return nil, 0, 0, false
		}
	}
	var buf [128]byte
	search := base.MakeSearchKey(buf[:0], ukey, snap)
	ikey, v, ok := m.skl.Get(search)
	if !ok {
		return nil, 0, 0, false
	}
	k, s, kd, valid := base.ParseInternalKey(ikey)
	if !valid || !bytes.Equal(k, ukey) {
		return nil, 0, 0, false
	}
	return v, kd, s, true
}

// newIter returns an iterator over the memtable's point entries.
func (m *memTable) newIter() base.InternalIterator {
	return m.skl.NewIter()
}

// approximateBytes returns the arena bytes in use.
func (m *memTable) approximateBytes() int64 { return int64(m.skl.Size()) }
