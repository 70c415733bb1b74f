package analyze

import "sort"

// reuseTracker computes stack distances: for each access to a block seen
// before, the number of distinct other blocks accessed since its previous
// access and their total charge. It keeps, per block, the position of its
// last access, and two Fenwick trees over positions that hold 1 (and the
// block's charge) at each block's last position. Positions are renumbered
// densely when they outgrow twice the number of blocks, so the memory is
// O(distinct blocks).
type reuseTracker struct {
	last   []int32 // per id: position of its last access (1-based), 0 if none
	charge []int64 // per id: charge at its last access
	cnt    []int64 // Fenwick tree of counts, index 0 unused
	bytes  []int64 // Fenwick tree of charges, index 0 unused
	live   int     // ids with a position
}

func newReuseTracker() *reuseTracker {
	return &reuseTracker{cnt: []int64{0}, bytes: []int64{0}}
}

func prefix(t []int64, i int) int64 {
	var s int64
	for ; i > 0; i -= i & -i {
		s += t[i]
	}
	return s
}

func add(t []int64, i int, v int64) {
	for ; i < len(t); i += i & -i {
		t[i] += v
	}
}

// appendPos appends a position holding v to the Fenwick tree t.
func appendPos(t []int64, v int64) []int64 {
	i := len(t)
	lo := i - i&-i
	// Node i covers (lo, i]: v plus the sum over (lo, i-1].
	return append(t, v+prefix(t, i-1)-prefix(t, lo))
}

// access records an access to id with the given charge. seen is false for
// a first access; else blocks and bytes are the distinct other blocks
// accessed since id's previous access and their charges.
func (r *reuseTracker) access(id int32, charge int64) (blocks, bytes int64, seen bool) {
	r.last, r.charge = grow(r.last, id), grow(r.charge, id)
	n := len(r.cnt) - 1
	if p := int(r.last[id]); p > 0 {
		seen = true
		blocks = prefix(r.cnt, n) - prefix(r.cnt, p)
		bytes = prefix(r.bytes, n) - prefix(r.bytes, p)
		add(r.cnt, p, -1)
		add(r.bytes, p, -r.charge[id])
	} else {
		r.live++
	}
	if n >= 2*r.live+1024 || n >= 1<<31-2 {
		r.compact(id)
	}
	r.cnt = appendPos(r.cnt, 1)
	r.bytes = appendPos(r.bytes, charge)
	r.last[id] = int32(len(r.cnt) - 1)
	r.charge[id] = charge
	return blocks, bytes, seen
}

// compact renumbers the live positions 1..live in their order and rebuilds
// the trees. skip is the id being accessed, whose position was just
// cleared: it gets its new position right after.
func (r *reuseTracker) compact(skip int32) {
	r.last[skip] = 0
	ids := make([]int32, 0, r.live)
	for id, p := range r.last {
		if p > 0 {
			ids = append(ids, int32(id))
		}
	}
	sort.Slice(ids, func(i, j int) bool { return r.last[ids[i]] < r.last[ids[j]] })
	cnt := make([]int64, 1, 2*len(ids)+1024)
	byt := make([]int64, 1, 2*len(ids)+1024)
	for _, id := range ids {
		cnt = append(cnt, 1)
		byt = append(byt, r.charge[id])
		r.last[id] = int32(len(cnt) - 1)
	}
	// Linear Fenwick build.
	for _, t := range [][]int64{cnt, byt} {
		for i := 1; i < len(t); i++ {
			if j := i + i&-i; j < len(t) {
				t[j] += t[i]
			}
		}
	}
	r.cnt, r.bytes = cnt, byt
}
