package analyze

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sort"

	"github.com/cairnkv/cairn/trace"
)

// Options configure Run.
type Options struct {
	// Sizes are the simulated cache sizes in bytes; none: no simulation.
	Sizes []int64
	// Policies are the simulated policies (default: LRU only).
	Policies []Policy
	// EntryOverhead is added to each block's size to get the bytes it
	// costs in a simulated cache (the engine's: lsm/cache.EntryOverhead).
	EntryOverhead int64
	// Types, when not empty, restricts the simulated caches to records of
	// these block types (say, the block cache's types without the blob
	// cache's). The statistics cover every record.
	Types []trace.BlockType
	// Warmup is the number of leading simulated accesses that fill the
	// simulated caches without being counted in their miss ratios.
	Warmup int64
	// Top is the number of most accessed blocks to report (0: 10,
	// negative: none).
	Top int
}

// Counter counts the accesses of one group and how many of them missed in
// the live cache.
type Counter struct {
	Accesses, Misses int64
}

// MissRatio returns Misses/Accesses, 0 for no accesses.
func (c Counter) MissRatio() float64 {
	if c.Accesses == 0 {
		return 0
	}
	return float64(c.Misses) / float64(c.Accesses)
}

// BlockCount is one block of the top-N list.
type BlockCount struct {
	Key        []byte
	Type       trace.BlockType
	Level      int32
	FileNumber uint64
	Size       uint64 // at its last access
	Accesses   int64
}

// Histogram counts values in log2 buckets: Buckets[0] counts 0,
// Buckets[i] counts [2^(i-1), 2^i).
type Histogram struct {
	Buckets []int64
}

func (h *Histogram) add(v int64) {
	b := 0
	if v > 0 {
		b = bits.Len64(uint64(v))
	}
	for len(h.Buckets) <= b {
		h.Buckets = append(h.Buckets, 0)
	}
	h.Buckets[b]++
}

// Bounds returns the bucket i's range [lo, hi).
func (h *Histogram) Bounds(i int) (lo, hi int64) {
	if i == 0 {
		return 0, 1
	}
	return 1 << (i - 1), 1 << i
}

// Total returns the number of values counted.
func (h *Histogram) Total() int64 {
	var n int64
	for _, c := range h.Buckets {
		n += c
	}
	return n
}

// Stats describe the accesses of a trace.
type Stats struct {
	Header trace.Header
	// Total counts the cache lookups (every record but the Pinned ones);
	// misses are the live cache's.
	Total Counter
	// Pinned counts, per block type, the Pinned records: blocks a table
	// reader read at open and holds itself, outside the cache. They are
	// in no other statistic and the simulated caches do not see them.
	Pinned map[trace.BlockType]*Counter
	// Per block type, caller and level (-1: unknown level).
	ByType   map[trace.BlockType]*Counter
	ByCaller map[trace.Caller]*Counter
	ByLevel  map[int32]*Counter
	// FirstTimestamp and LastTimestamp bound the records' access times.
	FirstTimestamp, LastTimestamp uint64
	// UniqueBlocks is the number of distinct block keys, UniqueBytes the
	// sum of their sizes (at their last access), AccessedOnce the number
	// accessed exactly once.
	UniqueBlocks, UniqueBytes, AccessedOnce int64
	// Top are the most accessed blocks, most accessed first.
	Top []BlockCount
	// Reuse distances of the accesses to blocks seen before (first
	// accesses are Cold): in distinct other blocks, and in bytes (the
	// charges of those blocks and of the block itself: the smallest
	// unsharded LRU cache that would hit).
	Cold                    int64
	ReuseBlocks, ReuseBytes Histogram
}

// Point is one point of a miss-ratio curve.
type Point struct {
	Policy   Policy
	Size     int64
	Accesses int64 // counted (after the warm-up)
	Misses   int64
}

// MissRatio returns Misses/Accesses, 0 for no accesses.
func (p Point) MissRatio() float64 {
	if p.Accesses == 0 {
		return 0
	}
	return float64(p.Misses) / float64(p.Accesses)
}

// Result is what Run computes.
type Result struct {
	Stats Stats
	// Curve has one point per policy and size, policies in the order
	// given and sizes ascending within a policy.
	Curve []Point
}

// blockInfo is what the analyzer keeps per distinct block.
type blockInfo struct {
	key      string
	typ      trace.BlockType
	level    int32
	file     uint64
	size     uint64
	accesses int64
}

// Analyzer consumes records one at a time. Use New, Add each record, then
// Result.
type Analyzer struct {
	opts   Options
	ids    map[string]int32
	blocks []blockInfo
	reuse  *reuseTracker
	types  [256]bool // simulated block types, when opts.Types is set
	sims   []simulator
	points []Point
	seen   int64 // simulated accesses so far
	stats  Stats
}

// New returns an analyzer for opts. It fails on a bad option: a negative
// size, an unknown policy.
func New(opts Options) (*Analyzer, error) {
	if len(opts.Policies) == 0 {
		opts.Policies = []Policy{LRU}
	}
	if opts.Top == 0 {
		opts.Top = 10
	}
	if opts.EntryOverhead < 0 || opts.Warmup < 0 {
		return nil, errors.New("analyze: negative entry overhead or warm-up")
	}
	sizes := slices.Clone(opts.Sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	a := &Analyzer{
		opts:  opts,
		ids:   make(map[string]int32),
		reuse: newReuseTracker(),
		stats: Stats{
			ByType:   map[trace.BlockType]*Counter{},
			ByCaller: map[trace.Caller]*Counter{},
			ByLevel:  map[int32]*Counter{},
		},
	}
	a.stats.Pinned = map[trace.BlockType]*Counter{}
	for _, t := range opts.Types {
		a.types[t] = true
	}
	for _, p := range opts.Policies {
		for _, s := range sizes {
			if s <= 0 {
				return nil, fmt.Errorf("analyze: cache size %d: must be positive", s)
			}
			sim, err := newSimulator(p, s)
			if err != nil {
				return nil, fmt.Errorf("analyze: %w", err)
			}
			a.sims = append(a.sims, sim)
			a.points = append(a.points, Point{Policy: p, Size: s})
		}
	}
	return a, nil
}

func count[K comparable](m map[K]*Counter, k K, miss bool) {
	c := m[k]
	if c == nil {
		c = &Counter{}
		m[k] = c
	}
	c.Accesses++
	if miss {
		c.Misses++
	}
}

// Add accounts one record.
func (a *Analyzer) Add(r *trace.Record) error {
	st := &a.stats
	miss := !r.CacheHit
	if r.Pinned {
		count(st.Pinned, r.Type, miss)
		return nil
	}
	st.Total.Accesses++
	if miss {
		st.Total.Misses++
	}
	count(st.ByType, r.Type, miss)
	count(st.ByCaller, r.Caller, miss)
	count(st.ByLevel, r.Level, miss)
	if st.Total.Accesses == 1 || r.AccessTimestamp < st.FirstTimestamp {
		st.FirstTimestamp = r.AccessTimestamp
	}
	st.LastTimestamp = max(st.LastTimestamp, r.AccessTimestamp)

	id, ok := a.ids[string(r.BlockKey)]
	if !ok {
		if len(a.blocks) >= 1<<31-2 {
			return errors.New("analyze: more than 2^31 distinct blocks")
		}
		id = int32(len(a.blocks))
		k := string(r.BlockKey)
		a.ids[k] = id
		a.blocks = append(a.blocks, blockInfo{key: k, typ: r.Type, level: r.Level, file: r.FileNumber})
	}
	b := &a.blocks[id]
	b.accesses++
	b.size = r.BlockSize
	charge := int64(r.BlockSize) + a.opts.EntryOverhead
	if r.BlockSize > 1<<62 {
		charge = 1 << 62
	}
	if blocks, bytes, seen := a.reuse.access(id, charge); seen {
		st.ReuseBlocks.add(blocks)
		st.ReuseBytes.add(bytes + charge)
	} else {
		st.Cold++
	}
	if len(a.sims) == 0 || (len(a.opts.Types) > 0 && !a.types[r.Type]) {
		return nil
	}
	a.seen++
	counted := a.seen > a.opts.Warmup
	for i, s := range a.sims {
		hit := s.access(id, charge, r.NoInsert)
		if counted {
			a.points[i].Accesses++
			if !hit {
				a.points[i].Misses++
			}
		}
	}
	return nil
}

// Result returns the statistics and curve of the records added so far.
func (a *Analyzer) Result() *Result {
	st := a.stats
	st.UniqueBlocks = int64(len(a.blocks))
	st.UniqueBytes, st.AccessedOnce = 0, 0
	for i := range a.blocks {
		st.UniqueBytes += int64(a.blocks[i].size)
		if a.blocks[i].accesses == 1 {
			st.AccessedOnce++
		}
	}
	top := make([]int32, len(a.blocks))
	for i := range top {
		top[i] = int32(i)
	}
	sort.SliceStable(top, func(i, j int) bool { return a.blocks[top[i]].accesses > a.blocks[top[j]].accesses })
	st.Top = nil
	for _, id := range top[:min(len(top), max(a.opts.Top, 0))] {
		b := a.blocks[id]
		st.Top = append(st.Top, BlockCount{Key: []byte(b.key), Type: b.typ, Level: b.level, FileNumber: b.file, Size: b.size, Accesses: b.accesses})
	}
	st.ByType = cloneCounters(st.ByType)
	st.Pinned = cloneCounters(st.Pinned)
	st.ByCaller = cloneCounters(st.ByCaller)
	st.ByLevel = cloneCounters(st.ByLevel)
	st.ReuseBlocks.Buckets = slices.Clone(st.ReuseBlocks.Buckets)
	st.ReuseBytes.Buckets = slices.Clone(st.ReuseBytes.Buckets)
	return &Result{Stats: st, Curve: slices.Clone(a.points)}
}

func cloneCounters[K comparable](m map[K]*Counter) map[K]*Counter {
	out := make(map[K]*Counter, len(m))
	for k, v := range m {
		c := *v
		out[k] = &c
	}
	return out
}

// Run reads every record of r and returns the result. A read error other
// than io.EOF (a corrupt or truncated trace) is returned, wrapped.
func Run(r trace.RecordReader, opts Options) (*Result, error) {
	a, err := New(opts)
	if err != nil {
		return nil, err
	}
	a.stats.Header = r.Header()
	for n := int64(0); ; n++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("analyze: reading record %d: %w", n+1, err)
		}
		if err := a.Add(&rec); err != nil {
			return nil, err
		}
	}
	return a.Result(), nil
}

// RunRecords is Run over records in memory.
func RunRecords(h trace.Header, recs []trace.Record, opts Options) (*Result, error) {
	return Run(&sliceReader{h: h, recs: recs}, opts)
}

// sliceReader is a trace.RecordReader over records in memory.
type sliceReader struct {
	h    trace.Header
	recs []trace.Record
}

func (s *sliceReader) Header() trace.Header { return s.h }

func (s *sliceReader) Next() (trace.Record, error) {
	if len(s.recs) == 0 {
		return trace.Record{}, io.EOF
	}
	r := s.recs[0]
	s.recs = s.recs[1:]
	return r, nil
}
