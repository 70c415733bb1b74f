package boltlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// Bucket names, as raft-boltdb/v2 names them.
var (
	logsBucket = []byte("logs")
	confBucket = []byte("conf")
)

// ErrKeyNotFound is StableStore.Get's error for a key never set. Its text
// is raft-boltdb's: raft recognizes a missing term or vote by the error's
// text "not found".
var ErrKeyNotFound = errors.New("not found")

// Default trim budgets (see doc.go).
const (
	// defaultTrimEntries and defaultTrimBytes bound the constant part of
	// the trim work an append's transaction does, and the whole of a
	// background trim transaction.
	// The work is CPU (the file is in the page cache): on the loaded
	// 2-core VM, a slice of ~70 64 KiB entries (4 MiB) took up to 108 ms
	// inside an append when three nodes shared the CPUs, so the constant
	// part is small; the part proportional to the append keeps the
	// pending range draining faster than the log grows.
	defaultTrimEntries = 64
	defaultTrimBytes   = 1 << 20
	// defaultTrimIdle is how long no append must have run before the
	// background trimmer takes the write lock. A node under write load
	// drains its trims inside the appends; a background trim transaction
	// is a commit (two fsyncs) that an append arriving meanwhile waits
	// for, and pauses of 100 ms between appends are common under load (a
	// bench/logtrim run saw an append wait 97 ms for one with 100 ms
	// here), so only a node with no append for seconds counts as idle.
	defaultTrimIdle = 2 * time.Second
)

// fileMode is raft-boltdb's mode for a new file.
const fileMode = 0o600

// Options configure Open.
type Options struct {
	// Bolt is passed to bbolt.Open.
	Bolt *bbolt.Options
}

// Store is a raft.LogStore and raft.StableStore in a bbolt file of
// raft-boltdb/v2's format, whose log compaction runs inside the appends'
// transactions (see doc.go).
type Store struct {
	db *bbolt.DB

	// Trim budgets and the trimmer's idle delay; set at Open (tests
	// change them before the first call).
	trimEntries int
	trimBytesN  int64
	trimIdle    time.Duration

	// write serializes the write transactions: bbolt admits one writer
	// anyway, and holding it here lets the background trimmer and the
	// observer know who holds it.
	write struct {
		sync.Mutex
		// pendingHi is the highest index whose deletion raft asked for
		// and that may still be on disk (0: none). Every index in
		// [FirstIndex, pendingHi] is to be deleted, from the low end.
		pendingHi uint64
	}

	appending  atomic.Int32 // StoreLogs calls in progress
	lastAppend atomic.Int64 // when the last StoreLogs ended, UnixNano

	wake    chan struct{} // a trim is pending; capacity 1
	closing chan struct{}
	trimmer sync.WaitGroup

	observer atomic.Pointer[func(Write)]

	// testTrimCommit, if set, runs in every transaction that trims
	// without appending, before it commits, with the write lock held.
	testTrimCommit func()
}

// WriteKind says what a write transaction was for.
type WriteKind int

const (
	// Append is a StoreLogs transaction (it may also trim).
	Append WriteKind = iota
	// Trim is a background trim transaction (nothing appended).
	Trim
	// Delete is a DeleteRange done at once (a suffix or the whole log).
	Delete
)

// Write describes one write transaction, for an observer (SetObserver).
type Write struct {
	Kind WriteKind
	// Start is when the call asked for the write lock, Locked when it
	// got it, End when it released it after the commit.
	Start, Locked, End time.Time
	// Trimmed entries of a pending trim were deleted in the transaction,
	// which took TrimTime (the commit aside).
	Trimmed  int
	TrimTime time.Duration
	// Err is the transaction's error, if any.
	Err error
}

// Open opens (or creates) the bbolt file at path and its buckets, and
// starts the background trimmer. Close stops it and closes the file.
func Open(path string, opts Options) (*Store, error) {
	db, err := bbolt.Open(path, fileMode, opts.Bolt)
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{logsBucket, confBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("boltlog: creating buckets in %s: %w", path, err)
	}
	s := &Store{
		db:          db,
		trimEntries: defaultTrimEntries,
		trimBytesN:  defaultTrimBytes,
		trimIdle:    defaultTrimIdle,
		wake:        make(chan struct{}, 1),
		closing:     make(chan struct{}),
	}
	s.trimmer.Add(1)
	go s.trimLoop()
	return s, nil
}

// SetObserver makes fn see every write transaction (benchmarks meter
// the time appends wait for trims with it). Call it before the store is
// used; fn runs on the writer's goroutine, with the write lock released.
func (s *Store) SetObserver(fn func(Write)) { s.observer.Store(&fn) }

func (s *Store) observe(w Write) {
	if fn := s.observer.Load(); fn != nil {
		(*fn)(w)
	}
}

// Close stops the background trimmer and closes the file. A pending trim
// is forgotten (raft's next compaction covers it again).
func (s *Store) Close() error {
	close(s.closing)
	s.trimmer.Wait()
	return s.db.Close()
}

// FirstIndex returns the lowest index on disk, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) {
	var first uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		if k, _ := tx.Bucket(logsBucket).Cursor().First(); k != nil {
			first = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return first, err
}

// LastIndex returns the highest index on disk, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) {
	var last uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		if k, _ := tx.Bucket(logsBucket).Cursor().Last(); k != nil {
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return last, err
}

// GetLog reads entry index, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	defer metrics.MeasureSince([]string{"raft", "boltdb", "getLog"}, time.Now())
	return s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(logsBucket).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		if err := decodeLog(v, l); err != nil {
			return fmt.Errorf("boltlog: decoding entry %d: %w", index, err)
		}
		return nil
	})
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries and, in the same transaction, deletes a
// bounded slice of the pending trim from the low end of the log.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.appending.Add(1)
	defer func() {
		s.lastAppend.Store(time.Now().UnixNano())
		s.appending.Add(-1)
	}()
	vals := make([][]byte, len(logs))
	lowest, size := logs[0].Index, int64(0)
	for i, l := range logs {
		v, err := encodeLog(l)
		if err != nil {
			return fmt.Errorf("boltlog: encoding entry %d: %w", l.Index, err)
		}
		vals[i] = v
		lowest = min(lowest, l.Index)
		size += int64(len(v))
		metrics.AddSample([]string{"raft", "boltdb", "logSize"}, float32(len(v)))
	}
	// raft-boltdb's metrics, under its names, for existing dashboards.
	metrics.AddSample([]string{"raft", "boltdb", "logsPerBatch"}, float32(len(logs)))
	metrics.AddSample([]string{"raft", "boltdb", "logBatchSize"}, float32(size))
	w := Write{Kind: Append, Start: time.Now()}
	s.write.Lock()
	w.Locked = time.Now()
	// An entry written inside the pending range stays: only what lies
	// below it may still be trimmed (raft never writes index 0; if it
	// came, it would cancel the trim rather than wrap around).
	s.write.pendingHi = min(s.write.pendingHi, max(lowest, 1)-1)
	var trimmedTo uint64
	w.Err = s.update(func(b *bbolt.Bucket) error {
		for i, l := range logs {
			if err := b.Put(indexKey(l.Index), vals[i]); err != nil {
				return fmt.Errorf("boltlog: storing entry %d: %w", l.Index, err)
			}
		}
		var err error
		t0 := time.Now()
		w.Trimmed, trimmedTo, err = s.trimLocked(b, s.trimEntries+2*len(logs), s.trimBytesN+2*size)
		w.TrimTime = time.Since(t0)
		return err
	})
	if w.Err == nil {
		s.trimmedLocked(trimmedTo)
	}
	s.write.Unlock()
	w.End = time.Now()
	if w.Err == nil {
		d := w.End.Sub(w.Start)
		metrics.AddSample([]string{"raft", "boltdb", "writeCapacity"}, float32(len(logs))/float32(d.Seconds()))
		metrics.MeasureSince([]string{"raft", "boltdb", "storeLogs"}, w.Start)
	}
	s.observe(w)
	return w.Err
}

// update runs fn in a write transaction on the logs bucket and commits.
// REQUIRES: s.write held.
func (s *Store) update(fn func(*bbolt.Bucket) error) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		return fmt.Errorf("boltlog: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx.Bucket(logsBucket)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("boltlog: committing: %w", err)
	}
	return nil
}

// trimLocked deletes entries at or below the pending bound from the low
// end of the log, at most maxEntries of them and, past the first, at most
// maxBytes of values. It returns how many it deleted and, if that drained
// the pending range, the pending bound (else 0).
// REQUIRES: s.write held, b in a write transaction.
func (s *Store) trimLocked(b *bbolt.Bucket, maxEntries int, maxBytes int64) (int, uint64, error) {
	hi := s.write.pendingHi
	if hi == 0 {
		return 0, 0, nil
	}
	c := b.Cursor()
	n, size := 0, int64(0)
	// Cursor.First after each Delete rather than Next: it never skips a
	// key whatever the delete did to the cursor's position.
	for k, v := c.First(); ; k, v = c.First() {
		if k == nil || binary.BigEndian.Uint64(k) > hi {
			return n, hi, nil
		}
		if n == maxEntries || (n > 0 && size+int64(len(v)) > maxBytes) {
			return n, 0, nil
		}
		size += int64(len(v))
		if err := c.Delete(); err != nil {
			return n, 0, fmt.Errorf("boltlog: trimming entry %d: %w", binary.BigEndian.Uint64(k), err)
		}
		n++
	}
}

// trimmedLocked records a committed trim: drainedTo is trimLocked's
// result.
// REQUIRES: s.write held.
func (s *Store) trimmedLocked(drainedTo uint64) {
	if drainedTo != 0 && s.write.pendingHi == drainedTo {
		s.write.pendingHi = 0
	}
}

// DeleteRange deletes the entries [lo, hi]. A prefix of the log (lo at
// or below the first index that stays after the pending trim, hi below
// the last index) is recorded as pending and deleted by later
// transactions; anything else is deleted at once, in one transaction.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	w := Write{Kind: Delete, Start: time.Now()}
	s.write.Lock()
	w.Locked = time.Now()
	first, last, err := s.bounds()
	switch {
	case err != nil:
		s.write.Unlock()
		return err
	case last == 0 || hi < first || lo > last:
		s.write.Unlock()
		return nil
	}
	// The first entry that stays once the pending trim is done.
	keptFirst := max(first, s.write.pendingHi+1)
	if lo <= keptFirst && hi < last {
		s.write.pendingHi = max(s.write.pendingHi, hi)
		s.write.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return nil
	}
	w.Err = s.update(func(b *bbolt.Bucket) error {
		c := b.Cursor()
		for k, _ := c.Seek(indexKey(lo)); k != nil && binary.BigEndian.Uint64(k) <= hi; k, _ = c.Seek(indexKey(lo)) {
			if err := c.Delete(); err != nil {
				return fmt.Errorf("boltlog: deleting entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
		}
		return nil
	})
	s.write.Unlock()
	w.End = time.Now()
	s.observe(w)
	if w.Err != nil {
		return fmt.Errorf("boltlog: deleting [%d, %d]: %w", lo, hi, w.Err)
	}
	return nil
}

// bounds returns FirstIndex and LastIndex in one read transaction.
func (s *Store) bounds() (first, last uint64, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(logsBucket).Cursor()
		if k, _ := c.First(); k != nil {
			first = binary.BigEndian.Uint64(k)
		}
		if k, _ := c.Last(); k != nil {
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return first, last, err
}

// trimLoop drains the pending trim while no append runs: it waits for a
// DeleteRange to record one, then for trimIdle without appends, and
// deletes one budget per transaction.
func (s *Store) trimLoop() {
	defer s.trimmer.Done()
	var idle *time.Timer
	for {
		select {
		case <-s.closing:
			return
		case <-s.wake:
		}
		for {
			// Wait until no append has run for trimIdle.
			for {
				wait := s.trimIdle - time.Since(time.Unix(0, s.lastAppend.Load()))
				if s.appending.Load() > 0 {
					wait = s.trimIdle
				}
				if wait <= 0 {
					break
				}
				if idle == nil {
					idle = time.NewTimer(wait)
				} else {
					idle.Reset(wait)
				}
				select {
				case <-s.closing:
					return
				case <-idle.C:
				}
			}
			pending, err := s.trimOnce()
			if err != nil || !pending {
				// An error leaves the range pending; the next append or
				// DeleteRange retries it.
				break
			}
		}
	}
}

// trimOnce runs one background trim transaction and reports whether a
// trim is still pending after it.
func (s *Store) trimOnce() (bool, error) {
	w := Write{Kind: Trim, Start: time.Now()}
	s.write.Lock()
	if s.write.pendingHi == 0 {
		s.write.Unlock()
		return false, nil
	}
	w.Locked = time.Now()
	var drainedTo uint64
	w.Err = s.update(func(b *bbolt.Bucket) error {
		var err error
		t0 := time.Now()
		w.Trimmed, drainedTo, err = s.trimLocked(b, s.trimEntries, s.trimBytesN)
		w.TrimTime = time.Since(t0)
		if err == nil && s.testTrimCommit != nil {
			s.testTrimCommit()
		}
		return err
	})
	if w.Err == nil {
		s.trimmedLocked(drainedTo)
	}
	pending := s.write.pendingHi != 0
	s.write.Unlock()
	w.End = time.Now()
	s.observe(w)
	return pending, w.Err
}

// Set stores a StableStore key.
func (s *Store) Set(k, v []byte) error {
	s.write.Lock()
	defer s.write.Unlock()
	tx, err := s.db.Begin(true)
	if err != nil {
		return fmt.Errorf("boltlog: %w", err)
	}
	defer tx.Rollback()
	if err := tx.Bucket(confBucket).Put(k, v); err != nil {
		return fmt.Errorf("boltlog: setting %q: %w", k, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("boltlog: committing %q: %w", k, err)
	}
	return nil
}

// Get returns a StableStore key's value, or ErrKeyNotFound.
func (s *Store) Get(k []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(tx *bbolt.Tx) error {
		if got := tx.Bucket(confBucket).Get(k); got != nil {
			v = bytes.Clone(got)
			return nil
		}
		return ErrKeyNotFound
	})
	return v, err
}

// SetUint64 stores a StableStore key with an 8-byte big-endian value.
func (s *Store) SetUint64(k []byte, v uint64) error { return s.Set(k, indexKey(v)) }

// GetUint64 returns a value stored by SetUint64, or ErrKeyNotFound.
func (s *Store) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("boltlog: key %q holds %d bytes, not a uint64", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// indexKey is a log index (or a uint64 value) as raft-boltdb stores it.
func indexKey(i uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), i) }

// encodeHandle encodes as raft-boltdb/v2 does by default: time.Time not
// as the msgpack timestamp extension (MsgpackUseNewTimeFormat false).
// Handles are safe for concurrent use once set up.
var encodeHandle = &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}}

// decodeHandle decodes either time format, as raft-boltdb's does.
var decodeHandle = &codec.MsgpackHandle{}

func encodeLog(l *raft.Log) ([]byte, error) {
	var buf bytes.Buffer
	err := codec.NewEncoder(&buf, encodeHandle).Encode(l)
	return buf.Bytes(), err
}

// decodeLog decodes b through a reader, so that l's byte slices are
// copies: b is bbolt's memory map, valid only during the transaction.
func decodeLog(b []byte, l *raft.Log) error {
	return codec.NewDecoder(bytes.NewReader(b), decodeHandle).Decode(l)
}
