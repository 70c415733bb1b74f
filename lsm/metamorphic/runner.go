package metamorphic

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// DBDir is the directory of the DB under test in its MemFS.
const DBDir = "/db"

// Result is what a run of a workload produced.
type Result struct {
	Config string
	// History has one line per op: the op and what it returned. It
	// depends only on the workload, so two configs that ran the same
	// workload have the same history, up to the first crash at which they
	// recovered different numbers of unsynced writes (a config with
	// smaller memtables syncs its WAL more often). Crash lines start with
	// CrashLinePrefix.
	History []string
	Stats   Stats
}

// CrashLinePrefix starts the history line of a crash op.
const CrashLinePrefix = "crash:"

// Stats summarize what a run exercised.
type Stats struct {
	Flushes, Compactions int64
	// MaxL0Files and MaxLevelFiles are the most files seen in L0 and in
	// any single deeper level; DeepestLevel the deepest non-empty level.
	MaxL0Files, MaxLevelFiles, DeepestLevel int
	Reopens, Crashes, Checkpoints           int
	// MaxBlobFiles is the most blob files seen in a version; BlobCacheHits
	// the blob cache hits seen (key-value separation configs).
	MaxBlobFiles  int
	BlobCacheHits int64
	// CrashesLosingWrites counts crashes that recovered fewer writes than
	// were acknowledged (allowed for unsynced writes).
	CrashesLosingWrites int
}

// Failure reports that the engine disagreed with the model, or failed.
type Failure struct {
	Config  string
	OpIndex int
	Op      string
	Msg     string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("config %s, op #%d %s: %s", f.Config, f.OpIndex, f.Op, f.Msg)
}

// runner executes a workload against one DB and the model.
type runner struct {
	cfg  Config
	keys [][]byte
	fs   *vfs.MemFS
	db   *lsm.DB
	cur  *model
	// durable is the model as of the last point at which every write
	// acknowledged before it was durable: a synced write, a flush or a
	// compaction, a reopen or a crash. unsynced are the writes
	// acknowledged since, in order. A crash must recover durable plus a
	// prefix of unsynced (lsm's durability contract).
	durable  *model
	unsynced []writeOp
	snaps    map[int]*snapshot
	// ckpt is the last checkpoint, kept until the next one and checked
	// again then, at the end, and after crashes.
	ckpt     *checkpoint
	ckptSeq  int
	hist     []string
	stats    Stats
	opIndex  int
	opString string
}

type snapshot struct {
	s *lsm.Snapshot
	m *model
}

type checkpoint struct {
	dir string
	m   *model
	op  int
}

// Run executes w under cfg on a fresh MemFS, checking every read against
// the model. It returns a *Failure on the first disagreement.
func Run(w *Workload, cfg Config) (res *Result, err error) {
	r := &runner{
		cfg:     cfg,
		keys:    w.Keys,
		fs:      vfs.NewMem(),
		cur:     newModel(),
		durable: newModel(),
		snaps:   make(map[int]*snapshot),
		opIndex: -1,
	}
	defer func() {
		if err != nil {
			r.abandon()
		}
	}()
	// The harness creates the DB directory and makes its entry durable,
	// as an installer would: Open does not sync the parent directory.
	if err := r.fs.MkdirAll(DBDir, 0o755); err != nil {
		return nil, err
	}
	if err := vfs.SyncDir(r.fs, "/"); err != nil {
		return nil, err
	}
	if r.db, err = lsm.Open(DBDir, r.options()); err != nil {
		return nil, r.failf("open: %v", err)
	}
	for i, op := range w.Ops {
		r.opIndex, r.opString = i, op.String()
		line, err := r.exec(op)
		if err != nil {
			return nil, err
		}
		r.hist = append(r.hist, fmt.Sprintf("#%d %s → %s", i, r.opString, line))
	}
	r.opIndex, r.opString = len(w.Ops), "final check and close"
	if err := r.closeSnapshots(); err != nil {
		return nil, err
	}
	if err := r.verifyAll(r.db, r.cur, "final state"); err != nil {
		return nil, err
	}
	if err := r.verifyCheckpoint(); err != nil {
		return nil, err
	}
	if err := r.closeDB(); err != nil {
		return nil, err
	}
	return &Result{Config: r.cfg.Name, History: r.hist, Stats: r.stats}, nil
}

// abandon closes what a failed run left open, ignoring errors.
func (r *runner) abandon() {
	for id, s := range r.snaps {
		s.s.Close()
		delete(r.snaps, id)
	}
	if r.db != nil {
		r.db.Close()
		r.db = nil
	}
}

func (r *runner) options() *lsm.Options {
	o := r.cfg.Opts
	o.FS = r.fs
	return &o
}

func (r *runner) failf(format string, args ...any) error {
	return &Failure{Config: r.cfg.Name, OpIndex: r.opIndex, Op: r.opString, Msg: fmt.Sprintf(format, args...)}
}

func (r *runner) exec(op Op) (string, error) {
	switch o := op.(type) {
	case writeOp:
		return r.write(o)
	case *getOp:
		return r.get(o)
	case *newSnapshotOp:
		s, err := r.db.NewSnapshot()
		if err != nil {
			return "", r.failf("NewSnapshot: %v", err)
		}
		r.snaps[o.id] = &snapshot{s: s, m: r.cur.clone()}
		return "ok", nil
	case *closeSnapshotOp:
		s, ok := r.snaps[o.id]
		if !ok {
			return "skipped (no such snapshot)", nil // only in reduced workloads
		}
		delete(r.snaps, o.id)
		if err := s.s.Close(); err != nil {
			return "", r.failf("Snapshot.Close: %v", err)
		}
		if _, err := s.s.Get(r.keys[0]); !errors.Is(err, lsm.ErrClosed) {
			return "", r.failf("Get on a closed snapshot returned %v, want ErrClosed", err)
		}
		return "ok", nil
	case *iterOp:
		return r.iter(o)
	case *flushOp:
		if err := r.db.Flush(); err != nil {
			return "", r.failf("Flush: %v", err)
		}
		r.markDurable()
		return "ok", nil
	case *blobGCOp:
		// No markDurable: GC syncs the WAL only when it rewrites.
		if err := r.db.BlobGC(o.minRatio); err != nil {
			return "", r.failf("BlobGC: %v", err)
		}
		return "ok", nil
	case *compactOp:
		if err := r.db.Compact(o.start, o.end); err != nil {
			return "", r.failf("Compact: %v", err)
		}
		r.markDurable()
		return "ok", nil
	case *checkpointOp:
		return r.checkpoint()
	case *reopenOp:
		return r.reopen()
	case *crashOp:
		return r.crash(o)
	case *metricsOp:
		return r.metrics()
	case *invalidOp:
		return r.invalid(o)
	}
	return "", r.failf("unknown op type %T", op)
}

func (r *runner) markDurable() {
	r.durable = r.cur.clone()
	r.unsynced = nil
}

// write applies a write op to the DB and, once acknowledged, to the model.
// The engine gets copies of the keys and values, which are scribbled over
// after the call: it must not keep the caller's buffers.
func (r *runner) write(op writeOp) (string, error) {
	wo := lsm.NoSync
	if op.synced() {
		wo = lsm.Sync
	}
	var scratch [][]byte
	cp := func(b []byte) []byte {
		c := bytes.Clone(b)
		if c == nil {
			c = []byte{}
		}
		scratch = append(scratch, c)
		return c
	}
	var err error
	switch o := op.(type) {
	case *putOp:
		err = r.db.Put(cp(o.key), cp(o.value), wo)
	case *deleteOp:
		err = r.db.Delete(cp(o.key), wo)
	case *deleteRangeOp:
		err = r.db.DeleteRange(cp(o.start), cp(o.end), wo)
	case *batchOp:
		b := lsm.NewBatch()
		for _, e := range o.ents {
			switch e.kind {
			case entrySet:
				b.Set(cp(e.key), cp(e.value))
			case entryDelete:
				b.Delete(cp(e.key))
			case entryDeleteRange:
				b.DeleteRange(cp(e.key), cp(e.end))
			}
		}
		if b.Count() != len(o.ents) {
			return "", r.failf("batch holds %d entries, want %d", b.Count(), len(o.ents))
		}
		err = r.db.Write(b, wo)
	}
	for _, s := range scratch {
		for i := range s {
			s[i] = 0xee
		}
	}
	if err != nil {
		return "", r.failf("write: %v", err)
	}
	r.cur.apply(op)
	if op.synced() && !r.cfg.Opts.DisableWAL {
		r.markDurable()
	} else {
		r.unsynced = append(r.unsynced, op)
	}
	return "ok", nil
}

func (r *runner) get(o *getOp) (string, error) {
	m := r.cur
	var v []byte
	var err error
	if o.snap < 0 {
		v, err = r.db.Get(o.key)
	} else {
		s, ok := r.snaps[o.snap]
		if !ok {
			return "skipped (no such snapshot)", nil // only in reduced workloads
		}
		m = s.m
		v, err = s.s.Get(o.key)
	}
	res, cerr := r.checkGet(o.key, v, err, m)
	if cerr != nil {
		return "", cerr
	}
	// The value must be the caller's copy.
	for i := range v {
		v[i] = 0xdd
	}
	return res, nil
}

// checkGet compares the result of a Get of key with model m and returns it
// rendered for the history.
func (r *runner) checkGet(key, v []byte, err error, m *model) (string, error) {
	want, ok := m.get(key)
	switch {
	case !ok && errors.Is(err, lsm.ErrNotFound):
		return "not found", nil
	case !ok && err == nil:
		return "", r.failf("Get(%q) = %s, want not found", key, fmtValue(v))
	case ok && err == nil && bytes.Equal(v, want):
		return fmtValue(v), nil
	case ok && err == nil:
		return "", r.failf("Get(%q) = %s, want %s", key, fmtValue(v), fmtValue(want))
	case ok && errors.Is(err, lsm.ErrNotFound):
		return "", r.failf("Get(%q) = not found, want %s", key, fmtValue(want))
	default:
		return "", r.failf("Get(%q): %v", key, err)
	}
}

// iter runs an iterator op. Bounds are passed as copies scribbled over
// after NewIter returns: the iterator must keep its own.
func (r *runner) iter(o *iterOp) (string, error) {
	lower, upper := bytes.Clone(o.lower), bytes.Clone(o.upper)
	opts := &lsm.IterOptions{LowerBound: lower, UpperBound: upper}
	var m *model
	var it *lsm.Iterator
	var err error
	if o.snap < 0 {
		m = r.cur.clone()
		it, err = r.db.NewIter(opts)
	} else {
		s, ok := r.snaps[o.snap]
		if !ok {
			return "skipped (no such snapshot)", nil // only in reduced workloads
		}
		m = s.m
		it, err = s.s.NewIter(opts)
	}
	if err != nil {
		return "", r.failf("NewIter: %v", err)
	}
	for i := range lower {
		lower[i] = 0xcc
	}
	for i := range upper {
		upper[i] = 0xcc
	}
	mi := newModelIter(m, o.lower, o.upper)
	var out []string
	for i, s := range o.steps {
		var ok, mok bool
		switch s.kind {
		case stepFirst:
			ok, mok = it.First(), mi.first()
		case stepLast:
			ok, mok = it.Last(), mi.last()
		case stepSeekGE:
			ok, mok = it.SeekGE(s.key), mi.seekGE(s.key)
		case stepSeekLT:
			ok, mok = it.SeekLT(s.key), mi.seekLT(s.key)
		case stepNext:
			ok, mok = it.Next(), mi.next()
		case stepPrev:
			ok, mok = it.Prev(), mi.prev()
		case stepDB:
			res, err := r.exec(s.op)
			if err != nil {
				it.Close()
				return "", err
			}
			out = append(out, "db:"+res)
			continue
		}
		where := func() string {
			return fmt.Sprintf("iterator step %d (%s; steps so far: %s)", i, s, strings.Join(out, " "))
		}
		if err := it.Error(); err != nil {
			it.Close()
			return "", r.failf("%s: iterator error: %v", where(), err)
		}
		if ok != it.Valid() {
			it.Close()
			return "", r.failf("%s: returned %v but Valid() = %v", where(), ok, it.Valid())
		}
		switch {
		case ok && !mok:
			err = r.failf("%s: at key %q, model has no key there", where(), it.Key())
		case !ok && mok:
			err = r.failf("%s: exhausted, model at key %q (%s)", where(), mi.key(), fmtValue(mi.value()))
		case ok && !bytes.Equal(it.Key(), mi.key()):
			err = r.failf("%s: at key %q, model at key %q", where(), it.Key(), mi.key())
		case ok && !bytes.Equal(it.Value(), mi.value()):
			err = r.failf("%s: at key %q with value %s, model has %s", where(), it.Key(), fmtValue(it.Value()), fmtValue(mi.value()))
		}
		if err != nil {
			it.Close()
			return "", err
		}
		if ok {
			out = append(out, fmt.Sprintf("%q", it.Key()))
		} else {
			out = append(out, ".")
		}
	}
	if err := it.Close(); err != nil {
		return "", r.failf("Iterator.Close: %v", err)
	}
	return strings.Join(out, " "), nil
}

// scan reads the full contents of db forward and backward; both must
// agree.
func scan(db *lsm.DB) ([]kv, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("NewIter: %w", err)
	}
	var fwd []kv
	for ok := it.First(); ok; ok = it.Next() {
		fwd = append(fwd, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	var back []kv
	for ok := it.Last(); ok; ok = it.Prev() {
		back = append(back, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("iterator: %w", err)
	}
	slices.Reverse(back)
	if len(fwd) != len(back) {
		return nil, fmt.Errorf("forward scan found %d keys, backward scan %d", len(fwd), len(back))
	}
	for i := range fwd {
		if !bytes.Equal(fwd[i].key, back[i].key) || !bytes.Equal(fwd[i].value, back[i].value) {
			return nil, fmt.Errorf("forward scan has %q=%s at position %d, backward scan %q=%s",
				fwd[i].key, fmtValue(fwd[i].value), i, back[i].key, fmtValue(back[i].value))
		}
	}
	return fwd, nil
}

// verifyAll compares db's full contents, and a Get of every key of the key
// space, with m.
func (r *runner) verifyAll(db *lsm.DB, m *model, what string) error {
	got, err := scan(db)
	if err != nil {
		return r.failf("%s: %v", what, err)
	}
	if d := m.diff(got); d != "" {
		return r.failf("%s differs from the model:%s", what, d)
	}
	for _, k := range r.keys {
		v, err := db.Get(k)
		if _, err := r.checkGet(k, v, err, m); err != nil {
			return r.failf("%s: %v", what, err.(*Failure).Msg)
		}
	}
	return nil
}

// closeSnapshots closes every open snapshot: a reopen or crash ends them.
func (r *runner) closeSnapshots() error {
	for _, id := range slices.Sorted(maps.Keys(r.snaps)) {
		if err := r.snaps[id].s.Close(); err != nil {
			return r.failf("Snapshot.Close: %v", err)
		}
		delete(r.snaps, id)
	}
	return nil
}

// closeDB records the DB's metrics and closes it.
func (r *runner) closeDB() error {
	r.recordMetrics(r.db.Metrics())
	err := r.db.Close()
	r.db = nil
	if err != nil {
		return r.failf("Close: %v", err)
	}
	return nil
}

func (r *runner) recordMetrics(m *lsm.Metrics) {
	r.stats.Flushes += m.Flushes
	r.stats.Compactions += m.Compactions
	r.noteLevels(m)
}

func (r *runner) noteLevels(m *lsm.Metrics) {
	r.stats.MaxL0Files = max(r.stats.MaxL0Files, m.Levels[0].NumFiles)
	r.stats.MaxBlobFiles = max(r.stats.MaxBlobFiles, m.Blob.Files)
	r.stats.BlobCacheHits = max(r.stats.BlobCacheHits, m.Blob.Cache.Hits)
	for l := 1; l < len(m.Levels); l++ {
		if n := m.Levels[l].NumFiles; n > 0 {
			r.stats.MaxLevelFiles = max(r.stats.MaxLevelFiles, n)
			r.stats.DeepestLevel = max(r.stats.DeepestLevel, l)
		}
	}
}

func (r *runner) reopen() (string, error) {
	if err := r.closeSnapshots(); err != nil {
		return "", err
	}
	if r.cfg.Opts.DisableWAL {
		// Without a WAL, Close does not keep unflushed writes.
		if err := r.db.Flush(); err != nil {
			return "", r.failf("Flush: %v", err)
		}
	}
	if err := r.closeDB(); err != nil {
		return "", err
	}
	db, err := lsm.Open(DBDir, r.options())
	if err != nil {
		return "", r.failf("reopen: %v", err)
	}
	r.db = db
	r.stats.Reopens++
	if err := r.verifyAll(r.db, r.cur, "state after reopen"); err != nil {
		return "", err
	}
	r.markDurable()
	return "ok", nil
}

// crash reopens the DB on a crash clone of its file system. The recovered
// state must be the durable state plus some prefix of the writes
// acknowledged since (all of them, if every write was synced).
func (r *runner) crash(o *crashOp) (string, error) {
	if r.cfg.Opts.DisableWAL {
		// Without a WAL only flushed writes survive: flush, then
		// everything acknowledged must survive the crash.
		if err := r.db.Flush(); err != nil {
			return "", r.failf("Flush: %v", err)
		}
		r.markDurable()
	}
	var clone *vfs.MemFS
	if o.torn {
		clone = r.fs.CrashCloneTorn(rand.New(rand.NewPCG(o.tornSeed, 0)))
	} else {
		clone = r.fs.CrashClone()
	}
	if err := r.closeSnapshots(); err != nil {
		return "", err
	}
	if err := r.closeDB(); err != nil {
		return "", err
	}
	r.fs = clone
	db, err := lsm.Open(DBDir, r.options())
	if err != nil {
		return "", r.failf("open after crash: %v\nfiles:\n%s", err, r.fs)
	}
	r.db = db
	r.stats.Crashes++
	got, err := scan(db)
	if err != nil {
		return "", r.failf("after crash: %v", err)
	}
	m := r.durable.clone()
	k := -1
	if m.diff(got) == "" {
		k = 0
	}
	for i := 0; k < 0 && i < len(r.unsynced); i++ {
		m.apply(r.unsynced[i])
		if m.diff(got) == "" {
			k = i + 1
		}
	}
	if k < 0 {
		return "", r.failf("state after crash is not the durable state plus a prefix of the %d unsynced writes since;\n"+
			"against the durable state:%s\nagainst every acknowledged write:%s\nfiles:\n%s",
			len(r.unsynced), r.durable.diff(got), r.cur.diff(got), r.fs)
	}
	n := len(r.unsynced)
	if k < n {
		r.stats.CrashesLosingWrites++
	}
	r.cur = m
	if err := r.verifyAll(r.db, r.cur, "state after crash"); err != nil {
		return "", err
	}
	r.markDurable()
	// A checkpoint is durable once Checkpoint returns.
	if err := r.verifyCheckpoint(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s recovered %d of %d unsynced writes", CrashLinePrefix, k, n), nil
}

// checkpoint writes a checkpoint, opens it and compares its contents with
// the model. The previous checkpoint is checked again and removed.
func (r *runner) checkpoint() (string, error) {
	if err := r.verifyCheckpoint(); err != nil {
		return "", err
	}
	if r.ckpt != nil {
		if err := r.fs.RemoveAll(r.ckpt.dir); err != nil {
			return "", r.failf("removing checkpoint: %v", err)
		}
		r.ckpt = nil
	}
	r.ckptSeq++
	dir := fmt.Sprintf("/ckpt/%d", r.ckptSeq)
	if err := r.db.Checkpoint(dir); err != nil {
		return "", r.failf("Checkpoint: %v", err)
	}
	if err := r.db.Checkpoint(dir); err == nil {
		return "", r.failf("a second Checkpoint into existing %s succeeded", dir)
	}
	r.markDurable()
	r.stats.Checkpoints++
	r.ckpt = &checkpoint{dir: dir, m: r.cur.clone(), op: r.opIndex}
	if err := r.verifyCheckpoint(); err != nil {
		return "", err
	}
	return fmt.Sprintf("ok (%d keys)", len(r.cur.keys())), nil
}

// verifyCheckpoint opens the kept checkpoint, if any, as a DB and compares
// its contents with the model as of the checkpoint.
func (r *runner) verifyCheckpoint() error {
	if r.ckpt == nil {
		return nil
	}
	db, err := lsm.Open(r.ckpt.dir, r.options())
	if err != nil {
		return r.failf("opening checkpoint %s (taken at op #%d): %v", r.ckpt.dir, r.ckpt.op, err)
	}
	verr := r.verifyAll(db, r.ckpt.m, fmt.Sprintf("checkpoint %s (taken at op #%d)", r.ckpt.dir, r.ckpt.op))
	if err := db.Close(); err != nil && verr == nil {
		verr = r.failf("closing checkpoint: %v", err)
	}
	return verr
}

func (r *runner) metrics() (string, error) {
	m := r.db.Metrics()
	if m.BackgroundErr != nil {
		return "", r.failf("Metrics().BackgroundErr = %v", m.BackgroundErr)
	}
	for l, lm := range m.Levels {
		if lm.NumFiles < 0 || lm.SizeBytes < 0 || (lm.NumFiles == 0) != (lm.SizeBytes == 0) {
			return "", r.failf("Metrics().Levels[%d] = %d files, %d bytes", l, lm.NumFiles, lm.SizeBytes)
		}
	}
	if m.String() == "" {
		return "", r.failf("Metrics().String() is empty")
	}
	r.noteLevels(m)
	return "ok", nil
}

// invalid issues a write the engine must refuse with ErrInvalidArgument,
// then checks that it wrote nothing.
func (r *runner) invalid(o *invalidOp) (string, error) {
	var err error
	switch o.kind {
	case invalidEmptyKeyPut:
		err = r.db.Put(nil, []byte("v"), lsm.NoSync)
	case invalidEmptyKeyDelete:
		err = r.db.Delete([]byte{}, lsm.NoSync)
	case invalidReversedRange:
		err = r.db.DeleteRange(o.start, o.end, lsm.NoSync)
	default:
		b := lsm.NewBatch()
		b.Set(o.start, []byte("must not be written"))
		b.Set(nil, []byte("v"))
		if b.Err() == nil {
			return "", r.failf("Batch.Err() is nil after Set of an empty key")
		}
		err = r.db.Write(b, lsm.NoSync)
	}
	if !errors.Is(err, lsm.ErrInvalidArgument) {
		return "", r.failf("got error %v, want ErrInvalidArgument", err)
	}
	v, err := r.db.Get(o.start)
	if _, err := r.checkGet(o.start, v, err, r.cur); err != nil {
		return "", r.failf("after a refused write: %s", err.(*Failure).Msg)
	}
	return "invalid argument", nil
}

// CompareHistories compares the histories of two runs of one workload. They
// must agree line by line up to the first crash at which they recovered
// different numbers of unsynced writes; from there on each run was checked
// against its own model only. It returns the index of that crash (or -1)
// and an error describing the first disagreement before it.
func CompareHistories(a, b *Result) (divergedAt int, err error) {
	n := min(len(a.History), len(b.History))
	for i := 0; i < n; i++ {
		x, y := a.History[i], b.History[i]
		if x == y {
			continue
		}
		if isCrashLine(x) && isCrashLine(y) {
			return i, nil
		}
		return -1, fmt.Errorf("histories of %s and %s differ at op #%d:\n\t%s: %s\n\t%s: %s",
			a.Config, b.Config, i, a.Config, x, b.Config, y)
	}
	if len(a.History) != len(b.History) {
		return -1, fmt.Errorf("histories of %s and %s have %d and %d lines", a.Config, b.Config, len(a.History), len(b.History))
	}
	return -1, nil
}

func isCrashLine(s string) bool {
	_, rest, ok := strings.Cut(s, "→ ")
	return ok && strings.HasPrefix(rest, CrashLinePrefix)
}
