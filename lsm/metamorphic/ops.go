package metamorphic

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Op is one step of a test: a write, a read, or an operation on the DB as
// a whole (flush, compact, checkpoint, reopen, crash). Ops are plain data,
// generated from a seed by Generate and executed by Run.
type Op interface {
	String() string
}

// writeOp is an Op that changes the DB's contents: put, delete, range
// delete or batch.
type writeOp interface {
	Op
	entries() []entry
	synced() bool
}

type entryKind uint8

const (
	entrySet entryKind = iota
	entryDelete
	entryDeleteRange
)

// entry is one write of a batch. For entryDeleteRange, end is the exclusive
// end of the range.
type entry struct {
	kind  entryKind
	key   []byte
	end   []byte
	value []byte
}

func (e entry) String() string {
	switch e.kind {
	case entrySet:
		return fmt.Sprintf("set(%q, %s)", e.key, fmtValue(e.value))
	case entryDelete:
		return fmt.Sprintf("del(%q)", e.key)
	default:
		return fmt.Sprintf("delrange(%q, %q)", e.key, e.end)
	}
}

type putOp struct {
	key, value []byte
	sync       bool
}

type deleteOp struct {
	key  []byte
	sync bool
}

type deleteRangeOp struct {
	start, end []byte
	sync       bool
}

type batchOp struct {
	ents []entry
	sync bool
}

func (o *putOp) entries() []entry    { return []entry{{kind: entrySet, key: o.key, value: o.value}} }
func (o *deleteOp) entries() []entry { return []entry{{kind: entryDelete, key: o.key}} }
func (o *deleteRangeOp) entries() []entry {
	return []entry{{kind: entryDeleteRange, key: o.start, end: o.end}}
}
func (o *batchOp) entries() []entry { return o.ents }

func (o *putOp) synced() bool         { return o.sync }
func (o *deleteOp) synced() bool      { return o.sync }
func (o *deleteRangeOp) synced() bool { return o.sync }
func (o *batchOp) synced() bool       { return o.sync }

func syncStr(sync bool) string {
	if sync {
		return "sync"
	}
	return "nosync"
}

func (o *putOp) String() string {
	return fmt.Sprintf("put(%q, %s, %s)", o.key, fmtValue(o.value), syncStr(o.sync))
}

func (o *deleteOp) String() string { return fmt.Sprintf("delete(%q, %s)", o.key, syncStr(o.sync)) }

func (o *deleteRangeOp) String() string {
	return fmt.Sprintf("deleteRange(%q, %q, %s)", o.start, o.end, syncStr(o.sync))
}

func (o *batchOp) String() string {
	parts := make([]string, len(o.ents))
	for i, e := range o.ents {
		parts[i] = e.String()
	}
	return fmt.Sprintf("batch[%s](%s)", syncStr(o.sync), strings.Join(parts, ", "))
}

// getOp reads one key from the latest state (snap < 0) or a snapshot.
type getOp struct {
	key  []byte
	snap int
}

func (o *getOp) String() string {
	if o.snap < 0 {
		return fmt.Sprintf("get(%q)", o.key)
	}
	return fmt.Sprintf("snap%d.get(%q)", o.snap, o.key)
}

type newSnapshotOp struct{ id int }

func (o *newSnapshotOp) String() string { return fmt.Sprintf("snap%d = newSnapshot()", o.id) }

type closeSnapshotOp struct{ id int }

func (o *closeSnapshotOp) String() string { return fmt.Sprintf("snap%d.close()", o.id) }

type stepKind uint8

const (
	stepFirst stepKind = iota
	stepLast
	stepSeekGE
	stepSeekLT
	stepNext
	stepPrev
	// stepDB runs a nested op (a write, flush or compaction) on the DB
	// while the iterator is open: the iterator must not see it.
	stepDB
)

// iterStep is one call on an open iterator.
type iterStep struct {
	kind stepKind
	key  []byte // seek key
	op   Op     // nested op of stepDB
}

func (s iterStep) String() string {
	switch s.kind {
	case stepFirst:
		return "first"
	case stepLast:
		return "last"
	case stepSeekGE:
		return fmt.Sprintf("seekGE(%q)", s.key)
	case stepSeekLT:
		return fmt.Sprintf("seekLT(%q)", s.key)
	case stepNext:
		return "next"
	case stepPrev:
		return "prev"
	default:
		return "db." + s.op.String()
	}
}

// iterOp opens an iterator on the latest state (snap < 0) or a snapshot,
// runs its steps, checking every position against the model, and closes
// it.
type iterOp struct {
	snap         int
	lower, upper []byte
	steps        []iterStep
}

func (o *iterOp) String() string {
	parts := make([]string, len(o.steps))
	for i, s := range o.steps {
		parts[i] = s.String()
	}
	src := "db"
	if o.snap >= 0 {
		src = fmt.Sprintf("snap%d", o.snap)
	}
	return fmt.Sprintf("%s.iter([%s, %s)): %s", src, fmtBound(o.lower), fmtBound(o.upper), strings.Join(parts, " "))
}

func fmtBound(b []byte) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", b)
}

type flushOp struct{}

// blobGCOp forces blob GC of every blob file whose garbage ratio is at
// least minRatio (0: every file), with whatever snapshots and iterators
// are open.
type blobGCOp struct{ minRatio float64 }

func (o *blobGCOp) String() string { return fmt.Sprintf("blobGC(%.1f)", o.minRatio) }

func (o *flushOp) String() string { return "flush()" }

// compactOp compacts [start, end] (inclusive user keys; nil is unbounded).
type compactOp struct{ start, end []byte }

func (o *compactOp) String() string {
	return fmt.Sprintf("compact(%s, %s)", fmtBound(o.start), fmtBound(o.end))
}

// checkpointOp writes a checkpoint, opens it as a DB and compares its full
// contents with the model.
type checkpointOp struct{}

func (o *checkpointOp) String() string { return "checkpoint()" }

// reopenOp closes the DB cleanly and opens it again.
type reopenOp struct{}

func (o *reopenOp) String() string { return "reopen()" }

// crashOp simulates a power loss: the DB is reopened on a CrashClone of its
// file system (with torn unsynced tails if torn is set).
type crashOp struct {
	torn     bool
	tornSeed uint64
}

func (o *crashOp) String() string {
	if o.torn {
		return fmt.Sprintf("crash(torn, seed=%d)", o.tornSeed)
	}
	return "crash()"
}

// metricsOp reads the DB's metrics and checks their sanity.
type metricsOp struct{}

func (o *metricsOp) String() string { return "metrics()" }

// invalidOp issues a write the engine must refuse with ErrInvalidArgument
// without changing anything.
type invalidOp struct {
	kind       int
	start, end []byte
}

const (
	invalidEmptyKeyPut = iota
	invalidEmptyKeyDelete
	invalidReversedRange
	invalidBatchWithBadEntry
	numInvalidKinds
)

func (o *invalidOp) String() string {
	switch o.kind {
	case invalidEmptyKeyPut:
		return "invalid:put(\"\")"
	case invalidEmptyKeyDelete:
		return "invalid:delete(\"\")"
	case invalidReversedRange:
		return fmt.Sprintf("invalid:deleteRange(%q, %q)", o.start, o.end)
	default:
		return fmt.Sprintf("invalid:batch[set(%q), set(\"\")]", o.start)
	}
}

// fmtValue renders a value compactly: its length and a hash of its bytes.
func fmtValue(v []byte) string {
	h := fnv.New32a()
	h.Write(v)
	return fmt.Sprintf("%dB#%08x", len(v), h.Sum32())
}
