package trace

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Options configure a trace.
type Options struct {
	// SamplingFrequency traces 1 in SamplingFrequency blocks, chosen by a
	// hash of the block key: a sampled block has every access traced, the
	// others none. 0 or 1 traces every access.
	SamplingFrequency uint64
	// MaxTraceFileSizeBytes stops the trace, cleanly (after a whole
	// record), before it would exceed this many bytes, header included.
	// 0: no limit.
	MaxTraceFileSizeBytes int64
}

// Errors of StartTrace and EndTrace.
var (
	ErrTraceRunning = errors.New("trace: a trace is already running")
	ErrNotTracing   = errors.New("trace: no trace is running")
)

// Tracer writes the block-cache accesses the engine reports to a trace
// between StartTrace and EndTrace. The zero Tracer is ready and idle; it
// is safe for concurrent use.
//
// The engine asks Active (one atomic load) before building a record, so
// an idle tracer costs the read path that load and nothing else. Writes are
// atomic with respect to StartTrace and EndTrace: a record reported before
// StartTrace or after EndTrace returned is not in the trace, and one
// reported in between is in it whole or (past the size limit, or after a
// write error) not at all.
type Tracer struct {
	// cur is the running session, nil when idle. Invariant: a session is
	// published only after its header is written.
	cur atomic.Pointer[session]
	// startMu serializes StartTrace and EndTrace.
	startMu sync.Mutex
}

type session struct {
	opts      Options
	nextGetID atomic.Uint64
	// nowMicros is the session's clock for record timestamps, advanced by
	// a ticker every clockTick: reading the system clock per record cost
	// more than the rest of a record together on a VM's kvm-clock (2.3 µs
	// per time.Now), so timestamps have clockTick resolution.
	nowMicros atomic.Uint64
	stopClock chan struct{}
	clockDone chan struct{}
	// stopped is closed when the session stops writing: EndTrace, the
	// size limit or a write error.
	stopped chan struct{}

	mu struct {
		sync.Mutex
		w *Writer
		// done: no more records are written.
		done bool
		err  error
	}
}

// StartTrace starts a trace written to w: the header (engine version
// MajorVersion.MinorVersion, start time), then one record per reported
// access, buffered. It fails with ErrTraceRunning if a trace runs. w is not
// closed by the tracer.
func (t *Tracer) StartTrace(opts Options, w io.Writer) error {
	t.startMu.Lock()
	defer t.startMu.Unlock()
	if t.cur.Load() != nil {
		return ErrTraceRunning
	}
	s := &session{opts: opts, stopped: make(chan struct{}), stopClock: make(chan struct{}), clockDone: make(chan struct{})}
	tw := NewWriter(w)
	h := Header{StartTimestamp: nowMicros(), MajorVersion: MajorVersion, MinorVersion: MinorVersion}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// The header goes out at once, so that a reader of a running trace
	// (a stream) sees what it is reading.
	if err := tw.Flush(); err != nil {
		return err
	}
	s.mu.w = tw
	s.nowMicros.Store(h.StartTimestamp)
	go s.runClock()
	t.cur.Store(s)
	return nil
}

// clockTick is the resolution of record timestamps.
const clockTick = time.Millisecond

func (s *session) runClock() {
	defer close(s.clockDone)
	tick := time.NewTicker(clockTick)
	defer tick.Stop()
	for {
		select {
		case <-s.stopClock:
			return
		case <-tick.C:
			if now := nowMicros(); now > s.nowMicros.Load() {
				s.nowMicros.Store(now)
			}
		}
	}
}

// EndTrace stops the running trace and flushes it. It returns the first
// error writing the trace, ErrNotTracing if none runs. When it returns, no
// record is written any more.
func (t *Tracer) EndTrace() error {
	t.startMu.Lock()
	defer t.startMu.Unlock()
	s := t.cur.Swap(nil)
	if s == nil {
		return ErrNotTracing
	}
	close(s.stopClock)
	<-s.clockDone
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if err := s.mu.w.Flush(); err != nil && s.mu.err == nil {
		s.mu.err = err
	}
	return s.mu.err
}

// stopLocked marks the session done. REQUIRES: s.mu held.
func (s *session) stopLocked() {
	if !s.mu.done {
		s.mu.done = true
		close(s.stopped)
	}
}

// Active reports whether a trace runs: the one check the engine makes on
// its read path while idle.
func (t *Tracer) Active() bool { return t.cur.Load() != nil }

// Stopped returns a channel closed when the running trace stops writing
// records, before EndTrace when it reached MaxTraceFileSizeBytes or failed
// to write. With no trace running it returns a closed channel.
func (t *Tracer) Stopped() <-chan struct{} {
	if s := t.cur.Load(); s != nil {
		return s.stopped
	}
	c := make(chan struct{})
	close(c)
	return c
}

// NextGetID returns the id of a new user Get for its records: 1, 2, ...
// after StartTrace, ReservedGetID (0) when no trace runs.
func (t *Tracer) NextGetID() uint64 {
	if s := t.cur.Load(); s != nil {
		return s.nextGetID.Add(1)
	}
	return ReservedGetID
}

// ShouldTrace reports whether accesses to the block with key blockKey are
// sampled by the running trace (false when none runs).
func (t *Tracer) ShouldTrace(blockKey []byte) bool {
	s := t.cur.Load()
	return s != nil && s.sampled(blockKey)
}

func (s *session) sampled(blockKey []byte) bool {
	n := s.opts.SamplingFrequency
	return n <= 1 || xxhash.Sum64(blockKey)%n == 0
}

// WriteBlockAccess writes r to the running trace if its block is sampled.
// With no trace running it does nothing and returns nil; so it does once
// the trace reached its size limit. r.AccessTimestamp 0 is set to now
// (to the millisecond: see session.nowMicros). It
// returns an error only when writing the trace failed (the trace then
// stops; EndTrace returns the error too).
func (t *Tracer) WriteBlockAccess(r *Record) error {
	s := t.cur.Load()
	if s == nil || !s.sampled(r.BlockKey) {
		return nil
	}
	if r.AccessTimestamp == 0 {
		r.AccessTimestamp = s.nowMicros.Load()
	}
	// Encode outside the lock, which then guards only a copy and its
	// checksum: concurrent lookups queue on it for a few nanoseconds, not
	// for a whole encoding.
	var stack [recordStackLen]byte
	rec := appendUnsealed(stack[:0], r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.done {
		return nil
	}
	ok, err := s.mu.w.writeUnsealedWithin(rec, s.opts.MaxTraceFileSizeBytes)
	if err != nil {
		s.mu.err = err
		s.stopLocked()
		return err
	}
	if !ok {
		s.stopLocked() // The size limit: stop cleanly.
	}
	return nil
}

// recordStackLen is the room WriteBlockAccess encodes a record in
// without allocating: a record with a block key and a user key of up to
// 128 bytes fits.
const recordStackLen = 256

func nowMicros() uint64 { return uint64(time.Now().UnixMicro()) }

// Access is what the engine knows, at a lookup site, about the operation
// that looks blocks up; the engine builds one per operation while a trace
// runs and passes nil otherwise.
type Access struct {
	Caller Caller
	// Level is the LSM level of the file being read, -1 if unknown. The
	// engine updates it as the operation moves between files.
	Level int32
	// GetID and FromUserSnapshot: for Get and MultiGet (see Record).
	GetID            uint64
	FromUserSnapshot bool
}

// NewAccess returns the Access of an operation by caller, or nil when no
// trace runs (one atomic load). For Get and MultiGet it takes a get id.
func (t *Tracer) NewAccess(caller Caller, level int32, fromUserSnapshot bool) *Access {
	s := t.cur.Load()
	if s == nil {
		return nil
	}
	a := &Access{Caller: caller, Level: level}
	if caller.IsGet() {
		a.GetID = s.nextGetID.Add(1)
		a.FromUserSnapshot = fromUserSnapshot
	}
	return a
}

// Fill sets the operation fields of r from a.
func (a *Access) Fill(r *Record) {
	r.Caller, r.Level = a.Caller, a.Level
	if a.Caller.IsGet() {
		r.GetID, r.FromUserSnapshot = a.GetID, a.FromUserSnapshot
	}
}

// DefaultCFName is the column family name of cairn's records: the engine
// has one keyspace, recorded as RocksDB's default column family (id 0).
const DefaultCFName = "default"

// AtLevel returns a copy of a for another level; nil stays nil. An
// operation that reads several levels at once (an iterator) gives each its
// own Access.
func (a *Access) AtLevel(level int) *Access {
	if a == nil {
		return nil
	}
	c := *a
	c.Level = int32(level)
	return &c
}
