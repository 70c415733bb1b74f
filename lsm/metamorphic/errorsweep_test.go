package metamorphic

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// The error-injection sweep runs a fixed workload (open, synced writes,
// reads, flushes, a compaction, a checkpoint, close, reopen with WAL
// replay, close) on errorfs over a MemFS, once to count its file system
// operations, then once per operation index n with the n-th operation
// failing. For every n:
//
//   - the injected error must surface: some API call returns an error that
//     wraps errorfs.ErrInjected, or Metrics().BackgroundErr does (a failed
//     background flush or compaction), unless the failed operation is one
//     the engine legitimately absorbs (see absorbed);
//   - no API call fails with any other error;
//   - no read during the run returns a wrong value;
//   - reopening the underlying MemFS without injection, and a crash clone
//     of it taken before the final Close, finds every write acknowledged
//     (all are synced) with its value; a write that failed may or may not
//     be there; the recovered DB accepts writes and a flush.

var flagSweepN = flag.Int64("sweep-n", -1, "run the error-injection sweep for this operation index only")

// sweepKeys is the sweep workload's key space.
var sweepKeys = func() [][]byte {
	var keys [][]byte
	for i := range 60 {
		keys = append(keys, fmt.Appendf(nil, "key-%03d", i))
	}
	return keys
}()

// possible maps each key to the values it may have: one after an
// acknowledged write, more after writes that failed (and so may or may
// not have happened). A nil element means "absent".
type possible map[string][][]byte

func newPossible() possible {
	p := make(possible)
	for _, k := range sweepKeys {
		p[string(k)] = [][]byte{nil}
	}
	return p
}

func (p possible) clone() possible {
	c := make(possible, len(p))
	for k, v := range p {
		c[k] = slices.Clone(v)
	}
	return c
}

// apply records the effect of entries: exact if the write was
// acknowledged, one more possibility if it failed.
func (p possible) apply(ents []entry, acked bool) {
	set := func(k string, v []byte) {
		if acked {
			p[k] = [][]byte{v}
		} else {
			p[k] = append(p[k], v)
		}
	}
	for _, e := range ents {
		switch e.kind {
		case entrySet:
			set(string(e.key), e.value)
		case entryDelete:
			set(string(e.key), nil)
		case entryDeleteRange:
			for _, k := range sweepKeys {
				if string(k) >= string(e.key) && string(k) < string(e.end) {
					set(string(k), nil)
				}
			}
		}
	}
}

// allows reports whether key may have the value v (present) or be absent.
func (p possible) allows(key string, v []byte, present bool) bool {
	for _, w := range p[key] {
		if (w == nil) == !present && (!present || bytes.Equal(v, w)) {
			return true
		}
	}
	return false
}

func (p possible) describe(key string) string {
	var parts []string
	for _, w := range p[key] {
		if w == nil {
			parts = append(parts, "absent")
		} else {
			parts = append(parts, fmtValue(w))
		}
	}
	return strings.Join(parts, " or ")
}

// checkContents reads every key of db with Get and a full scan and
// compares them with p. A read error is returned as readErr; a wrong value
// as wrong.
func checkContents(db *lsm.DB, p possible) (wrong string, readErr error) {
	for _, k := range sweepKeys {
		v, err := db.Get(k)
		switch {
		case err == nil:
			if !p.allows(string(k), v, true) {
				return fmt.Sprintf("Get(%q) = %s, want %s", k, fmtValue(v), p.describe(string(k))), nil
			}
		case errors.Is(err, lsm.ErrNotFound):
			if !p.allows(string(k), nil, false) {
				return fmt.Sprintf("Get(%q) = not found, want %s", k, p.describe(string(k))), nil
			}
		default:
			return "", err
		}
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return "", err
	}
	seen := make(map[string]bool)
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		seen[k] = true
		if _, known := p[k]; !known {
			it.Close()
			return fmt.Sprintf("scan found key %q, which was never written", k), nil
		}
		if !p.allows(k, it.Value(), true) {
			it.Close()
			return fmt.Sprintf("scan found %q = %s, want %s", k, fmtValue(it.Value()), p.describe(k)), nil
		}
	}
	if err := it.Close(); err != nil {
		return "", err
	}
	for _, k := range sweepKeys {
		if !seen[string(k)] && !p.allows(string(k), nil, false) {
			return fmt.Sprintf("scan is missing %q, want %s", k, p.describe(string(k))), nil
		}
	}
	return "", nil
}

// injection records the one operation an Index injector failed.
type injection struct {
	op   errorfs.Op
	path string
}

type recordingInjector struct {
	inner *errorfs.Index
	mu    sync.Mutex
	got   *injection
}

func (r *recordingInjector) MaybeError(op errorfs.Op, path string) error {
	err := r.inner.MaybeError(op, path)
	if err != nil {
		r.mu.Lock()
		r.got = &injection{op: op, path: path}
		r.mu.Unlock()
	}
	return err
}

func (r *recordingInjector) injected() *injection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

// trackFS sits above errorfs and notes three failures that lose nothing:
// the Close of a file opened read-only; a Stat of CURRENT right after
// another Stat of it found none (Open checks whether the DB exists, then
// version.Create checks again and takes any error for "absent"); and,
// during DB.Close, the Close of a table or blob file the DB then removes
// within the same DB.Close.
//
// The last is a compaction that Close cancelled: it closes and removes
// its unfinished outputs and installs nothing, and a cancellation is not a
// failure, so nothing reports the close error. It can be nothing else:
// DB.Close deletes no obsolete file (it leaves them to the next Open), and
// a flush or compaction that fails on the Close of its output reports
// that error, which DB.Close returns.
type trackFS struct {
	vfs.FS
	readOnlyCloseFailed atomic.Bool
	// dbClosing is set while the sweep's DB.Close runs.
	dbClosing atomic.Bool
	// cancelledCloseFailed: a file whose Close failed during a DB.Close
	// was removed by the same DB.Close.
	cancelledCloseFailed atomic.Bool
	mu                   sync.Mutex
	currentAbsent        bool // the last Stat of CURRENT returned ErrNotExist
	recheckFailed        bool
	// closeFailedInDBClose are the tables and blob files whose Close
	// failed during the DB.Close in progress.
	closeFailedInDBClose map[string]bool
}

func (fs *trackFS) Stat(name string) (os.FileInfo, error) {
	fi, err := fs.FS.Stat(name)
	if strings.HasSuffix(name, "/CURRENT") {
		fs.mu.Lock()
		if errors.Is(err, errorfs.ErrInjected) && fs.currentAbsent {
			fs.recheckFailed = true
		}
		fs.currentAbsent = errors.Is(err, os.ErrNotExist)
		fs.mu.Unlock()
	}
	return fi, err
}

func (fs *trackFS) Open(name string) (vfs.File, error) {
	f, err := fs.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &readOnlyFile{File: f, fs: fs}, nil
}

func (fs *trackFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &createdFile{File: f, fs: fs, name: name}, nil
}

func (fs *trackFS) Remove(name string) error {
	err := fs.FS.Remove(name)
	if err == nil && fs.dbClosing.Load() {
		fs.mu.Lock()
		if fs.closeFailedInDBClose[name] {
			fs.cancelledCloseFailed.Store(true)
		}
		fs.mu.Unlock()
	}
	return err
}

// beginDBClose and endDBClose bracket a DB.Close.
func (fs *trackFS) beginDBClose() {
	fs.mu.Lock()
	fs.closeFailedInDBClose = nil
	fs.mu.Unlock()
	fs.dbClosing.Store(true)
}

func (fs *trackFS) endDBClose() { fs.dbClosing.Store(false) }

type createdFile struct {
	vfs.File
	fs   *trackFS
	name string
}

func (f *createdFile) Close() error {
	err := f.File.Close()
	if errors.Is(err, errorfs.ErrInjected) && f.fs.dbClosing.Load() &&
		(strings.HasSuffix(f.name, ".sst") || strings.HasSuffix(f.name, ".blob")) {
		f.fs.mu.Lock()
		if f.fs.closeFailedInDBClose == nil {
			f.fs.closeFailedInDBClose = map[string]bool{}
		}
		f.fs.closeFailedInDBClose[f.name] = true
		f.fs.mu.Unlock()
	}
	return err
}

type readOnlyFile struct {
	vfs.File
	fs *trackFS
}

func (f *readOnlyFile) Close() error {
	err := f.File.Close()
	if errors.Is(err, errorfs.ErrInjected) {
		f.fs.readOnlyCloseFailed.Store(true)
	}
	return err
}

// sweepRun is one run of the sweep workload with the n-th operation
// failing (n < 0: none).
type sweepRun struct {
	n    int64
	opts lsm.Options
	mem  *vfs.MemFS
	rec  *recordingInjector
	fs   *trackFS
	db   *lsm.DB
	p    possible
	step int
	// apiErrs are the errors API calls returned, with the call.
	apiErrs []string
	// injectedSeen is set when an API call or BackgroundErr returned an
	// error wrapping errorfs.ErrInjected.
	injectedSeen bool
	// foreign is the first API error that is not an injected one.
	foreign string
	// wrong is the first read that returned a wrong value.
	wrong string
	// crashFS is a crash clone taken before the final Close.
	crashFS *vfs.MemFS
	ckpts   []sweepCheckpoint
}

type sweepCheckpoint struct {
	dir string
	p   possible
}

func newSweepRun(n int64, opts lsm.Options) *sweepRun {
	mem := vfs.NewMem()
	if err := mem.MkdirAll(DBDir, 0o755); err != nil {
		panic(err)
	}
	if err := vfs.SyncDir(mem, "/"); err != nil {
		panic(err)
	}
	rec := &recordingInjector{inner: errorfs.OnIndex(n)}
	return &sweepRun{
		n:    n,
		opts: opts,
		mem:  mem,
		rec:  rec,
		fs:   &trackFS{FS: errorfs.Wrap(mem, rec)},
		p:    newPossible(),
	}
}

// noteErr records the error of an API call.
func (s *sweepRun) noteErr(call string, err error) {
	if err == nil {
		return
	}
	s.apiErrs = append(s.apiErrs, fmt.Sprintf("step %d %s: %v", s.step, call, err))
	if errors.Is(err, errorfs.ErrInjected) {
		s.injectedSeen = true
	} else if s.foreign == "" {
		s.foreign = fmt.Sprintf("step %d %s: %v", s.step, call, err)
	}
}

func (s *sweepRun) open() {
	s.step++
	if s.db != nil {
		return
	}
	o := s.opts
	o.FS = s.fs
	db, err := lsm.Open(DBDir, &o)
	s.noteErr("Open", err)
	s.db = db
}

func (s *sweepRun) close() {
	s.step++
	if s.db == nil {
		return
	}
	if err := s.db.Metrics().BackgroundErr; err != nil {
		s.noteErr("Metrics().BackgroundErr", err)
	}
	s.fs.beginDBClose()
	s.noteErr("Close", s.db.Close())
	s.fs.endDBClose()
	s.db = nil
}

func (s *sweepRun) value(i int) []byte {
	n := 10 + (i*37)%300
	switch {
	case i%11 == 0:
		n = 5000 + i%1000
	case i%5 == 0:
		n = 0
	}
	v := make([]byte, n)
	for j := range v {
		v[j] = byte(i*131 + j*7)
	}
	return v
}

// write issues a synced write of ents.
func (s *sweepRun) write(ents ...entry) {
	s.step++
	if s.db == nil {
		return
	}
	var err error
	call := "Write"
	if len(ents) == 1 {
		e := ents[0]
		switch e.kind {
		case entrySet:
			call, err = "Put", s.db.Put(e.key, e.value, lsm.Sync)
		case entryDelete:
			call, err = "Delete", s.db.Delete(e.key, lsm.Sync)
		default:
			call, err = "DeleteRange", s.db.DeleteRange(e.key, e.end, lsm.Sync)
		}
	} else {
		b := lsm.NewBatch()
		for _, e := range ents {
			switch e.kind {
			case entrySet:
				b.Set(e.key, e.value)
			case entryDelete:
				b.Delete(e.key)
			default:
				b.DeleteRange(e.key, e.end)
			}
		}
		err = s.db.Write(b, lsm.Sync)
	}
	s.noteErr(call, err)
	s.p.apply(ents, err == nil)
}

func (s *sweepRun) writes(from, count int) {
	for i := from; i < from+count; i++ {
		k := sweepKeys[(i*7)%len(sweepKeys)]
		switch {
		case i%13 == 0:
			s.write(entry{kind: entryDelete, key: k})
		case i%29 == 0:
			s.write(entry{kind: entryDeleteRange, key: k, end: append(slices.Clip(k), 'z')})
		case i%17 == 0:
			s.write(
				entry{kind: entrySet, key: k, value: s.value(i)},
				entry{kind: entrySet, key: sweepKeys[(i*3)%len(sweepKeys)], value: s.value(i + 1)},
				entry{kind: entryDelete, key: sweepKeys[(i*5)%len(sweepKeys)]},
			)
		default:
			s.write(entry{kind: entrySet, key: k, value: s.value(i)})
		}
	}
}

// read checks the DB's contents against what is possible.
func (s *sweepRun) read() {
	s.step++
	if s.db == nil {
		return
	}
	wrong, err := checkContents(s.db, s.p)
	s.noteErr("read", err)
	if wrong != "" && s.wrong == "" {
		s.wrong = fmt.Sprintf("step %d: %s", s.step, wrong)
	}
}

func (s *sweepRun) flush() {
	s.step++
	if s.db != nil {
		s.noteErr("Flush", s.db.Flush())
	}
}

func (s *sweepRun) compact() {
	s.step++
	if s.db != nil {
		s.noteErr("Compact", s.db.Compact(nil, nil))
	}
}

// blobGC rewrites every blob file (key-value separation configs only).
func (s *sweepRun) blobGC() {
	s.step++
	if s.db != nil {
		s.noteErr("BlobGC", s.db.BlobGC(0))
	}
}

func (s *sweepRun) checkpoint(dir string) {
	s.step++
	if s.db == nil {
		return
	}
	err := s.db.Checkpoint(dir)
	s.noteErr("Checkpoint", err)
	if err == nil {
		s.ckpts = append(s.ckpts, sweepCheckpoint{dir: dir, p: s.p.clone()})
	}
}

// run executes the workload.
func (s *sweepRun) run() {
	s.open()
	s.writes(0, 40)
	s.read()
	s.flush()
	s.writes(40, 40)
	s.flush()
	s.writes(80, 25)
	s.compact()
	if s.opts.MinBlobSize > 0 {
		s.blobGC()
	}
	s.read()
	s.writes(105, 20) // left in the WAL for the reopen to replay
	s.close()
	s.open()
	s.read()
	s.writes(125, 10)
	s.checkpoint("/ckpt")
	s.writes(135, 5)
	s.crashFS = s.mem.CrashClone()
	s.close()
}

// absorbed reports whether a failure of inj may legitimately leave no
// trace in any API result, and why.
func (s *sweepRun) absorbed(inj *injection) (bool, string) {
	switch {
	case inj.op == errorfs.OpRemove || inj.op == errorfs.OpRemoveAll:
		return true, "deleting an obsolete file (it is deleted again at the next Open)"
	case inj.op == errorfs.OpLink:
		return true, "Checkpoint copies a table it cannot hard-link (the copy is checked)"
	case inj.op == errorfs.OpClose && s.fs.readOnlyCloseFailed.Load():
		return true, "closing a file opened read-only loses nothing"
	case inj.op == errorfs.OpClose && s.fs.cancelledCloseFailed.Load():
		return true, "closing an output of a compaction Close cancelled, which it then removed, loses nothing"
	}
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	if inj.op == errorfs.OpStat && s.fs.recheckFailed {
		return true, "version.Create re-checks that CURRENT is absent and takes the error for absent; Open had just found it absent"
	}
	return false, ""
}

// verify checks the run's outcome; it returns a description of each
// problem.
func (s *sweepRun) verify() []string {
	var problems []string
	inj := s.rec.injected()
	if s.foreign != "" {
		problems = append(problems, "an API call failed with an error that is not the injected one: "+s.foreign)
	}
	if s.wrong != "" {
		problems = append(problems, "a read during the run returned a wrong value: "+s.wrong)
	}
	switch {
	case inj == nil && len(s.apiErrs) > 0:
		problems = append(problems, fmt.Sprintf("nothing was injected, yet: %s", strings.Join(s.apiErrs, "; ")))
	case inj != nil && !s.injectedSeen:
		if ok, _ := s.absorbed(inj); !ok {
			problems = append(problems, fmt.Sprintf("the injected failure of %s %s surfaced in no API result", inj.op, inj.path))
		}
	}
	check := func(what string, fs *vfs.MemFS, dir string, p possible) {
		o := s.opts
		o.FS = fs
		db, err := lsm.Open(dir, &o)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: Open: %v", what, err))
			return
		}
		if wrong, err := checkContents(db, p); err != nil || wrong != "" {
			problems = append(problems, fmt.Sprintf("%s: %s%v", what, wrong, errOrEmpty(err)))
		}
		// The recovered DB must work.
		marker := []byte("marker")
		err = db.Put(marker, marker, lsm.Sync)
		if err == nil {
			err = db.Flush()
		}
		if err == nil {
			var v []byte
			if v, err = db.Get(marker); err == nil && !bytes.Equal(v, marker) {
				err = fmt.Errorf("Get(marker) = %q", v)
			}
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the recovered DB does not work: %v", what, err))
		}
	}
	if s.crashFS != nil {
		check("crash clone taken before the final Close", s.crashFS, DBDir, s.p)
	}
	check("reopen without injection", s.mem, DBDir, s.p)
	for _, c := range s.ckpts {
		check("checkpoint "+c.dir, s.mem, c.dir, c.p)
	}
	return problems
}

func errOrEmpty(err error) any {
	if err == nil {
		return ""
	}
	return err
}

// watchdog fails loudly, with every goroutine's stack, if a run hangs.
func watchdog(what string, d time.Duration) (stop func() bool) {
	t := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "%s hung for %s; goroutines:\n%s\n", what, d, buf)
		panic(what + " hung")
	})
	return t.Stop
}

var sweepConfigs = []struct {
	name string
	opts lsm.Options
	// deterministic: background work never races with the workload, so
	// operation indexes mean the same thing in every run.
	deterministic bool
}{
	{
		name: "manual",
		opts: lsm.Options{
			MemTableSizeBytes:         64 << 10,
			L0CompactionThreshold:     20,
			L0SlowdownWritesThreshold: 40,
			L0StopWritesThreshold:     40,
			BlockSizeBytes:            512,
			// Synced writes record the WAL's size in the manifest every
			// few KiB, so that the sweep fails those manifest writes too.
			WALSyncRecordBytes: 4 << 10,
		},
		deterministic: true,
	},
	{
		// Automatic compactions: failures hit background work, whose
		// errors surface through later writes or BackgroundErr.
		name: "background",
		opts: lsm.Options{
			MemTableSizeBytes:     64 << 10,
			L0CompactionThreshold: 2,
			TargetFileSizeBytes:   8 << 10,
			BlockSizeBytes:        256,
			Compression:           lsm.SnappyCompression,
		},
	},
	{
		// Key-value separation: failures hit blob file creation, writes,
		// syncs, the directory sync before the manifest edit, blob reads
		// on cache misses, and the deletion of blob files whose indexes
		// compactions dropped.
		name: "blob",
		opts: lsm.Options{
			MemTableSizeBytes:         64 << 10,
			L0CompactionThreshold:     20,
			L0SlowdownWritesThreshold: 40,
			L0StopWritesThreshold:     40,
			BlockSizeBytes:            512,
			MinBlobSize:               100,
			BlobTargetFileSizeBytes:   16 << 10,
			BlobCacheSizeBytes:        -1,
			// GC runs where the workload says (deterministic indexes).
			BlobGCDiscardRatio: -1,
		},
		deterministic: true,
	},
}

func TestErrorInjectionSweep(t *testing.T) {
	for _, cfg := range sweepConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			counter := newSweepRun(-1, cfg.opts)
			counter.run()
			if problems := counter.verify(); len(problems) > 0 {
				t.Fatalf("the sweep workload fails without injection:\n\t%s", strings.Join(problems, "\n\t"))
			}
			count := counter.rec.inner.Count()
			stride := int64(1)
			if testing.Short() || raceEnabled {
				stride = 7
			}
			t.Logf("%d file system operations (deterministic indexes: %v); failing each %s", count, cfg.deterministic,
				map[bool]string{true: "one", false: fmt.Sprintf("%dth", stride)}[stride == 1])
			failures := 0
			absorbed := make(map[string]int)
			from, to := int64(0), count
			if *flagSweepN >= 0 {
				from, to, stride = *flagSweepN, *flagSweepN+1, 1
			}
			for n := from; n < to; n += stride {
				s := newSweepRun(n, cfg.opts)
				stop := watchdog(fmt.Sprintf("error sweep %s n=%d", cfg.name, n), 30*time.Second)
				s.run()
				problems := s.verify()
				stop()
				inj := s.rec.injected()
				if inj != nil && !s.injectedSeen {
					if ok, why := s.absorbed(inj); ok {
						absorbed[fmt.Sprintf("%s (%s)", inj.op, why)]++
					}
				}
				if len(problems) == 0 {
					continue
				}
				what := "nothing (the run had fewer operations)"
				if inj != nil {
					what = fmt.Sprintf("%s %s", inj.op, inj.path)
				}
				errs := s.apiErrs
				if len(errs) > 4 {
					errs = append(errs[:4:4], fmt.Sprintf("... %d more", len(s.apiErrs)-4))
				}
				t.Errorf("config %s, failing operation #%d (%s):\n\t%s\n\tAPI errors: %s\n\treplay: go test ./lsm/metamorphic -run 'TestErrorInjectionSweep/%s' -sweep-n %d -v",
					cfg.name, n, what, strings.Join(problems, "\n\t"), strings.Join(errs, "\n\t\t"), cfg.name, n)
				if failures++; failures >= 5 {
					t.Fatalf("stopping after %d failing indexes", failures)
				}
			}
			for k, v := range absorbed {
				t.Logf("absorbed without an API error (allowed): %d× %s", v, k)
			}
		})
	}
}
