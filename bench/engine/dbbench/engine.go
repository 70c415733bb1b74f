package dbbench

import (
	"fmt"
	"sort"
)

// Engine is the little that a db_bench workload needs from a storage
// engine. Implementations are not required to be safe for concurrent
// writers, but Get and iterators must be safe to use from several
// goroutines alongside one writer (readrandom2, readwhilewriting).
type Engine interface {
	// Put writes key=value; with sync the write is durable (fsynced)
	// before Put returns, else it only has to reach the WAL.
	Put(key, value []byte, sync bool) error
	// Get returns the length of key's value and whether key exists. The
	// value's bytes must have been read (copied or touched), so that an
	// engine cannot win by not reading them.
	Get(key []byte) (valueLen int, found bool, err error)
	// NewIter returns an iterator over the whole key space.
	NewIter() (Iter, error)
	// Compact compacts the whole key space as far as the engine can
	// (what that means for each engine is in its Settings).
	Compact() error
	// Close closes the engine; Open on the same directory must see every
	// write made before.
	Close() error
}

// Iter is a forward iterator. Key and Value are valid until the next call.
type Iter interface {
	First() bool
	SeekGE(key []byte) bool
	Next() bool
	Key() []byte
	// ValueLen reads the current value and returns its length.
	ValueLen() (int, error)
	Close() error
}

// Config is the settings every engine gets, chosen to be equal across
// engines (see DefaultConfig).
type Config struct {
	CacheBytes    int64   // block cache
	MemTableBytes int64   // memtable (write buffer) size
	BloomBitsKey  float64 // Bloom filter bits per key
	// SyncWrites opens the engine for synced writes (only Badger needs it
	// at open time; the others sync per write).
	SyncWrites bool

	// Engine-specific knobs, recorded in Settings.

	// BadgerValueThreshold: values of at least this many bytes go to
	// Badger's value log. 0 means Badger's default.
	BadgerValueThreshold int64
	// PebbleValueSepMin > 0 turns Pebble's value separation on for values
	// of at least this size (format major version FormatValueSeparation).
	PebbleValueSepMin int
	// CairnMinBlobSize is cairn's lsm.Options.MinBlobSize: 0 the engine's
	// default (separation of values from 4 KiB), negative no separation
	// (see cairn.go).
	CairnMinBlobSize int64
	// CairnDisableWALMmap sets cairn's lsm.Options.DisableWALMmap (WAL
	// appends by write(2) instead of through a mapping of the file).
	CairnDisableWALMmap bool
	// CairnMaxConcurrentCompactions sets cairn's
	// lsm.Options.MaxConcurrentCompactions (0: the engine's default).
	CairnMaxConcurrentCompactions int
	// CairnWALBuffered sets cairn's lsm.Options.WALBufferedWrites (the
	// WAL buffered in memory and written by a goroutine: the weaker
	// guarantee Pebble's WAL gives an unsynced write).
	CairnWALBuffered bool
}

// DefaultConfig is the equal footing of the comparison: 64 MiB block
// cache, 64 MiB memtable, 10 bits/key Bloom filters; every engine uses
// Snappy block compression and its WAL, with no fsync except where a
// workload asks for one.
func DefaultConfig() Config {
	return Config{CacheBytes: 64 << 20, MemTableBytes: 64 << 20, BloomBitsKey: 10}
}

// Opener opens (creating if needed) an engine in dir and returns it with
// the settings it actually applied, as "name=value" strings.
type Opener func(dir string, cfg Config) (Engine, []string, error)

var openers = map[string]Opener{}

func register(name string, o Opener) { openers[name] = o }

// Engines returns the names of the registered engines, sorted.
func Engines() []string {
	var names []string
	for n := range openers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens the engine called name.
func Open(name, dir string, cfg Config) (Engine, []string, error) {
	o, ok := openers[name]
	if !ok {
		return nil, nil, fmt.Errorf("dbbench: unknown engine %q (have %v)", name, Engines())
	}
	return o(dir, cfg)
}
