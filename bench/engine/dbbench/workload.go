package dbbench

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// KeySize is the size of every key: the 16-digit decimal of 2i for key i,
// so that the missing key 2i+1 sorts between two present ones (as
// db_bench's readmissing appends "." to a present key).
const KeySize = 16

// DefaultBenchmarks is the order db_bench would run them in: fills on a
// fresh DB, then reads of what the last fill wrote, a full compaction, a
// reopen and the reads again.
var DefaultBenchmarks = []string{
	"fillseq", "fillsync", "fillrandom", "overwrite",
	"readrandom", "readmissing", "seekrandom", "readseq", "readrandom2", "readwhilewriting",
	"compact", "reopen",
	"readrandom", "readmissing", "seekrandom", "readseq",
}

// Options configure one Run.
type Options struct {
	Engine     string
	Dir        string // the DB directory; Run deletes it at every fresh fill and at the end
	Num        int    // keys written by a fill
	Reads      int    // operations of a read benchmark; 0 means Num
	SyncNum    int    // writes of fillsync; 0 means max(Num/100, 1)
	ValueSize  int
	Benchmarks []string
	Config     Config
	Seed       uint64
	// Log receives a db_bench-style line per benchmark; nil discards.
	Log io.Writer
	// Profile, if not nil, is called before each benchmark with its name
	// (with "@compacted" after a compaction); the function it returns, if
	// not nil, is called when the benchmark's timed part ends (a CPU
	// profile of one benchmark: cmd/dbbench --cpuprofile).
	Profile func(name string) (stop func())
}

// Result is one benchmark's figures. A benchmark run after "compact" has
// "@compacted" appended to its Name.
type Result struct {
	Name    string  `json:"name"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	OpsSec  float64 `json:"ops_per_sec"`
	// MBSec is (key+value bytes of the operations) / Seconds, in 10^6 B/s.
	MBSec float64 `json:"mb_per_sec"`
	// Found and Missing count reads that found and did not find a key.
	Found   int64 `json:"found"`
	Missing int64 `json:"missing"`
	// WriterOps is readwhilewriting's writes (its Ops are the reader's).
	WriterOps int64 `json:"writer_ops,omitempty"`
	// UserBytes is the key+value bytes written by the benchmark.
	UserBytes int64 `json:"user_bytes"`
	// DiskWriteBytes is what the process wrote to disk during the
	// benchmark (see WriteBytesSource), -1 if unknown.
	DiskWriteBytes int64 `json:"disk_write_bytes"`
	// WriteAmp is DiskWriteBytes / UserBytes (0 if nothing was written).
	WriteAmp float64 `json:"write_amp"`
	// CumWriteAmp is disk bytes / user bytes since the last fresh fill:
	// it charges compaction debt that spills into later benchmarks.
	CumWriteAmp float64 `json:"cum_write_amp"`
	// DirBytes is the DB directory's allocated size after the benchmark;
	// LogicalBytes the key+value bytes of the live keys; SpaceAmp their
	// ratio.
	DirBytes     int64   `json:"dir_bytes"`
	LogicalBytes int64   `json:"logical_bytes"`
	SpaceAmp     float64 `json:"space_amp"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	// MaxRSSBytes is the process's peak RSS up to the end of the benchmark.
	MaxRSSBytes int64 `json:"max_rss_bytes"`
	// MinorFaults counts the process's minor page faults during the
	// benchmark (getrusage ru_minflt): first touches of fresh memory, which
	// cost ~10 µs each on the shared VM, more than a 4 KiB pread.
	MinorFaults int64 `json:"minor_faults"`
}

// Report is the output of one Run (one process, one engine).
type Report struct {
	Engine           string            `json:"engine"`
	Num              int               `json:"num"`
	Reads            int               `json:"reads"`
	SyncNum          int               `json:"sync_num"`
	KeySize          int               `json:"key_size"`
	ValueSize        int               `json:"value_size"`
	Seed             uint64            `json:"seed"`
	Settings         []string          `json:"settings"`
	Versions         map[string]string `json:"versions"`
	WriteBytesSource string            `json:"write_bytes_source"`
	Results          []Result          `json:"results"`
}

// key writes the 16-digit decimal of n into b.
func key(b []byte, n uint64) []byte {
	b = b[:KeySize]
	for i := KeySize - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return b
}

func presentKey(b []byte, i int) []byte { return key(b, 2*uint64(i)) }
func missingKey(b []byte, i int) []byte { return key(b, 2*uint64(i)+1) }

// valuePoolBytes is the size of the random bytes values are cut from: each
// value is a slice at a random offset, so values are incompressible
// (random) and no two in a block share bytes except by rare chance.
const valuePoolBytes = 4 << 20

type runner struct {
	o         Options
	db        Engine
	settings  []string
	pool      []byte
	rng       *rand.Rand
	present   int // keys 0..present-1 exist
	compacted bool

	cumDisk, cumUser int64 // since the last fresh fill
}

// Run runs the benchmarks of o in order, in this process, and returns their
// figures. It fails when a read finds the wrong keys (readrandom must find
// every key, readmissing none, readseq exactly the keys written).
func Run(o Options) (rep *Report, err error) {
	if o.Num <= 0 || o.ValueSize <= 0 {
		return nil, errors.New("dbbench: Num and ValueSize must be > 0")
	}
	if o.Reads <= 0 {
		o.Reads = o.Num
	}
	if o.SyncNum <= 0 {
		o.SyncNum = max(o.Num/100, 1)
	}
	if len(o.Benchmarks) == 0 {
		o.Benchmarks = DefaultBenchmarks
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	r := &runner{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}
	r.pool = make([]byte, valuePoolBytes+o.ValueSize)
	for i := range r.pool {
		r.pool[i] = byte(r.rng.Uint32())
	}
	rep = &Report{
		Engine: o.Engine, Num: o.Num, Reads: o.Reads, SyncNum: o.SyncNum,
		KeySize: KeySize, ValueSize: o.ValueSize, Seed: o.Seed,
		Versions: Versions(), WriteBytesSource: WriteBytesSource,
	}
	defer func() {
		if r.db != nil {
			if cerr := r.db.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
		os.RemoveAll(o.Dir)
	}()
	for _, name := range o.Benchmarks {
		res, err := r.run(name)
		if err != nil {
			return rep, fmt.Errorf("dbbench: %s %s: %w", o.Engine, name, err)
		}
		rep.Results = append(rep.Results, res)
		fmt.Fprintln(o.Log, res.line())
	}
	rep.Settings = r.settings
	return rep, nil
}

func (res *Result) line() string {
	s := fmt.Sprintf("%-22s: %10.3f micros/op %10.0f ops/sec; %8.1f MB/s", res.Name,
		res.Seconds*1e6/float64(max(res.Ops, 1)), res.OpsSec, res.MBSec)
	if res.UserBytes > 0 {
		s += fmt.Sprintf("; wamp %.2f (cum %.2f)", res.WriteAmp, res.CumWriteAmp)
	}
	s += fmt.Sprintf("; samp %.2f; cpu %.1fs (%.2f µs/op); flt %d; rss %d MiB", res.SpaceAmp, res.CPUSeconds,
		res.CPUSeconds*1e6/float64(max(res.Ops, 1)), res.MinorFaults, res.MaxRSSBytes>>20)
	return s
}

func (r *runner) value() []byte {
	off := r.rng.IntN(valuePoolBytes)
	return r.pool[off : off+r.o.ValueSize]
}

// open (re)opens the DB; fresh deletes it first.
func (r *runner) open(fresh, syncWrites bool) error {
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			return err
		}
		r.db = nil
	}
	if fresh {
		if err := os.RemoveAll(r.o.Dir); err != nil {
			return err
		}
		r.present, r.compacted, r.cumDisk, r.cumUser = 0, false, 0, 0
	}
	cfg := r.o.Config
	cfg.SyncWrites = syncWrites
	db, settings, err := Open(r.o.Engine, r.o.Dir, cfg)
	if err != nil {
		return err
	}
	r.db, r.settings = db, settings
	return nil
}

func (r *runner) run(name string) (Result, error) {
	res := Result{Name: name}
	if r.compacted {
		res.Name += "@compacted"
	}
	// Fills start on a fresh DB (not timed); everything else needs one.
	switch name {
	case "fillseq", "fillrandom":
		if err := r.open(true, false); err != nil {
			return res, err
		}
	case "fillsync":
		if err := r.open(true, true); err != nil {
			return res, err
		}
	default:
		if r.db == nil {
			return res, errors.New("no DB: run a fill first")
		}
	}
	var stopProfile func()
	if r.o.Profile != nil {
		stopProfile = r.o.Profile(res.Name)
	}
	d0, u0, t0 := diskWriteBytes(), getUsage(), time.Now()
	var err error
	switch name {
	case "fillseq":
		err = r.fill(&res, r.o.Num, nil, false)
	case "fillrandom":
		err = r.fill(&res, r.o.Num, r.rng.Perm(r.o.Num), false)
	case "fillsync":
		err = r.fill(&res, r.o.SyncNum, r.rng.Perm(r.o.SyncNum), true)
	case "overwrite":
		err = r.overwrite(&res)
	case "readrandom":
		err = r.readRandom(&res, 1)
	case "readrandom2":
		err = r.readRandom(&res, 2)
	case "readmissing":
		err = r.readMissing(&res)
	case "seekrandom":
		err = r.seekRandom(&res)
	case "readseq":
		err = r.readSeq(&res)
	case "readwhilewriting":
		err = r.readWhileWriting(&res)
	case "compact":
		res.Ops = 1
		err = r.db.Compact()
		r.compacted = true
	case "reopen":
		res.Ops = 1
		err = r.open(false, false)
	default:
		err = fmt.Errorf("unknown benchmark (have %s)", strings.Join(append(DefaultBenchmarks[:10:10], "compact", "reopen"), ","))
	}
	if err != nil {
		return res, err
	}
	elapsed := time.Since(t0)
	if stopProfile != nil {
		stopProfile()
	}
	d1, u1 := diskWriteBytes(), getUsage()
	res.Seconds = elapsed.Seconds()
	res.OpsSec = float64(res.Ops) / res.Seconds
	if name != "compact" && name != "reopen" {
		res.MBSec = float64(res.Ops) * float64(KeySize+r.o.ValueSize) / res.Seconds / 1e6
	}
	res.DiskWriteBytes = -1
	if d0 >= 0 && d1 >= 0 {
		res.DiskWriteBytes = d1 - d0
		r.cumDisk += res.DiskWriteBytes
	}
	r.cumUser += res.UserBytes
	if res.UserBytes > 0 && res.DiskWriteBytes >= 0 {
		res.WriteAmp = float64(res.DiskWriteBytes) / float64(res.UserBytes)
	}
	if r.cumUser > 0 {
		res.CumWriteAmp = float64(r.cumDisk) / float64(r.cumUser)
	}
	res.CPUSeconds = (u1.cpu - u0.cpu).Seconds()
	res.MinorFaults = u1.minFlt - u0.minFlt
	res.MaxRSSBytes = u1.maxRSSKiB << 10
	res.DirBytes = DirBytes(r.o.Dir)
	res.LogicalBytes = int64(r.present) * int64(KeySize+r.o.ValueSize)
	if res.LogicalBytes > 0 {
		res.SpaceAmp = float64(res.DirBytes) / float64(res.LogicalBytes)
	}
	return res, nil
}

// fill writes keys 0..n-1, in order or in the order perm gives.
func (r *runner) fill(res *Result, n int, perm []int, sync bool) error {
	var kb [KeySize]byte
	for i := 0; i < n; i++ {
		k := i
		if perm != nil {
			k = perm[i]
		}
		if err := r.db.Put(presentKey(kb[:], k), r.value(), sync); err != nil {
			return err
		}
	}
	r.present = n
	res.Ops = int64(n)
	res.UserBytes = int64(n) * int64(KeySize+r.o.ValueSize)
	return nil
}

// overwrite writes Num random existing keys (with repetition).
func (r *runner) overwrite(res *Result) error {
	var kb [KeySize]byte
	for i := 0; i < r.o.Num; i++ {
		if err := r.db.Put(presentKey(kb[:], r.rng.IntN(r.present)), r.value(), false); err != nil {
			return err
		}
	}
	res.Ops = int64(r.o.Num)
	res.UserBytes = res.Ops * int64(KeySize+r.o.ValueSize)
	return nil
}

// getLoop reads n random present keys and counts what it finds; every
// value must have ValueSize bytes.
func (r *runner) getLoop(seed uint64, n int, found, missing *atomic.Int64, stop *atomic.Bool) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	var kb [KeySize]byte
	for i := 0; i < n; i++ {
		if stop != nil && stop.Load() {
			return nil
		}
		vlen, ok, err := r.db.Get(presentKey(kb[:], rng.IntN(r.present)))
		if err != nil {
			return err
		}
		if !ok {
			missing.Add(1)
			continue
		}
		if vlen != r.o.ValueSize {
			return fmt.Errorf("value of %d bytes, want %d", vlen, r.o.ValueSize)
		}
		found.Add(1)
	}
	return nil
}

func (r *runner) readRandom(res *Result, threads int) error {
	var found, missing atomic.Int64
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for t := 0; t < threads; t++ {
		wg.Add(1)
		seed := r.rng.Uint64()
		go func() {
			defer wg.Done()
			errs[t] = r.getLoop(seed, r.o.Reads/threads, &found, &missing, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	res.Ops, res.Found, res.Missing = found.Load()+missing.Load(), found.Load(), missing.Load()
	if res.Missing != 0 {
		return fmt.Errorf("%d of %d present keys not found", res.Missing, res.Ops)
	}
	return nil
}

func (r *runner) readMissing(res *Result) error {
	var kb [KeySize]byte
	for i := 0; i < r.o.Reads; i++ {
		_, ok, err := r.db.Get(missingKey(kb[:], r.rng.IntN(r.present)))
		if err != nil {
			return err
		}
		if ok {
			res.Found++
		} else {
			res.Missing++
		}
	}
	res.Ops = int64(r.o.Reads)
	if res.Found != 0 {
		return fmt.Errorf("%d of %d missing keys found", res.Found, res.Ops)
	}
	return nil
}

// seekNexts is db_bench's --seek_nexts for seekrandom.
const seekNexts = 10

// seekRandom seeks to a random present key (it must land on it) and reads
// it and the next 10 entries, values included.
func (r *runner) seekRandom(res *Result) error {
	it, err := r.db.NewIter()
	if err != nil {
		return err
	}
	defer it.Close()
	var kb [KeySize]byte
	for i := 0; i < r.o.Reads; i++ {
		k := presentKey(kb[:], r.rng.IntN(r.present))
		if !it.SeekGE(k) || string(it.Key()) != string(k) {
			return fmt.Errorf("SeekGE(%s) did not land on the key", k)
		}
		res.Found++
		for j := 0; j <= seekNexts; j++ {
			if _, err := it.ValueLen(); err != nil {
				return err
			}
			if j < seekNexts && !it.Next() {
				break
			}
		}
	}
	res.Ops = int64(r.o.Reads)
	return nil
}

// readSeq scans every key; it must count exactly the present keys.
func (r *runner) readSeq(res *Result) error {
	it, err := r.db.NewIter()
	if err != nil {
		return err
	}
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		vlen, err := it.ValueLen()
		if err != nil {
			it.Close()
			return err
		}
		if vlen != r.o.ValueSize {
			it.Close()
			return fmt.Errorf("value of %d bytes, want %d", vlen, r.o.ValueSize)
		}
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	res.Ops, res.Found = n, n
	if n != int64(r.present) {
		return fmt.Errorf("scanned %d keys, want %d", n, r.present)
	}
	return nil
}

// readWhileWriting runs one reader (Reads random Gets, timed) against one
// writer overwriting random keys as fast as it can until the reader is
// done. Ops/s are the reader's.
func (r *runner) readWhileWriting(res *Result) error {
	var stop atomic.Bool
	var writes int64
	var werr error
	var wg sync.WaitGroup
	wseed := r.rng.Uint64()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(wseed, 2))
		var kb [KeySize]byte
		for !stop.Load() {
			off := rng.IntN(valuePoolBytes)
			if err := r.db.Put(presentKey(kb[:], rng.IntN(r.present)), r.pool[off:off+r.o.ValueSize], false); err != nil {
				werr = err
				return
			}
			writes++
		}
	}()
	var found, missing atomic.Int64
	rerr := r.getLoop(r.rng.Uint64(), r.o.Reads, &found, &missing, nil)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(rerr, werr); err != nil {
		return err
	}
	res.Ops, res.Found, res.Missing = found.Load()+missing.Load(), found.Load(), missing.Load()
	res.WriterOps = writes
	res.UserBytes = writes * int64(KeySize+r.o.ValueSize)
	if res.Missing != 0 {
		return fmt.Errorf("%d of %d present keys not found", res.Missing, res.Ops)
	}
	return nil
}

// Versions returns the module versions this binary was built with, for
// the engines and the Go toolchain.
func Versions() map[string]string {
	v := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v["go"] = bi.GoVersion
	for _, m := range bi.Deps {
		switch {
		case strings.HasPrefix(m.Path, "github.com/cockroachdb/pebble"),
			strings.HasPrefix(m.Path, "github.com/dgraph-io/badger"),
			m.Path == "github.com/syndtr/goleveldb",
			m.Path == "github.com/cairnkv/cairn":
			ver := m.Version
			if m.Replace != nil {
				ver += " => " + m.Replace.Path
				if m.Replace.Version != "" {
					ver += " " + m.Replace.Version
				}
			}
			v[m.Path] = ver
		}
	}
	return v
}
