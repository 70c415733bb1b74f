package fsm

import "bytes"

// overlay holds the writes of the batch being built, so that a command
// reads the effects of the commands before it in the same batch (the
// engine only sees them once the batch is written). Writes are numbered in
// the order they are made; the latest one covering a key decides it.
//
// Not safe for concurrent use: only the apply path uses it.
type overlay struct {
	points map[string]overlayPoint
	ranges []overlayRange
	n      int
}

type overlayPoint struct {
	rec     record
	deleted bool
	pos     int
}

// overlayRange is a range deletion of the user keys [start, end); a nil end
// is unbounded.
type overlayRange struct {
	start, end []byte
	pos        int
}

func (o *overlay) reset() {
	if o.points == nil {
		o.points = make(map[string]overlayPoint)
	}
	clear(o.points)
	clear(o.ranges)
	o.ranges = o.ranges[:0]
	o.n = 0
}

func (o *overlay) put(key []byte, rec record) {
	o.n++
	o.points[string(key)] = overlayPoint{rec: rec, pos: o.n}
}

func (o *overlay) delete(key []byte) {
	o.n++
	o.points[string(key)] = overlayPoint{deleted: true, pos: o.n}
}

func (o *overlay) deleteRange(start, end []byte) {
	o.n++
	o.ranges = append(o.ranges, overlayRange{start: start, end: end, pos: o.n})
}

// lookup returns what the batch's writes say of key: decided is false if
// none of them covers it (the engine decides); otherwise found reports
// whether the key exists, with rec its record.
func (o *overlay) lookup(key []byte) (rec record, found, decided bool) {
	p, hasPoint := o.points[string(key)]
	rangePos := 0
	for i := range o.ranges {
		r := &o.ranges[i]
		if r.pos > rangePos && bytes.Compare(key, r.start) >= 0 && (r.end == nil || bytes.Compare(key, r.end) < 0) {
			rangePos = r.pos
		}
	}
	switch {
	case hasPoint && p.pos > rangePos:
		return p.rec, !p.deleted, true
	case rangePos > 0:
		return record{}, false, true
	}
	return record{}, false, false
}
