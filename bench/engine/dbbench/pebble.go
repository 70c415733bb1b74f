package dbbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
)

func init() { register("pebble", openPebble) }

type pebbleEngine struct {
	db    *pebble.DB
	cache interface{ Unref() }
}

func openPebble(dir string, cfg Config) (Engine, []string, error) {
	cache := pebble.NewCache(cfg.CacheBytes)
	o := &pebble.Options{
		Cache:        cache,
		MemTableSize: uint64(cfg.MemTableBytes),
		Logger:       quietLogger{},
	}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(int(cfg.BloomBitsKey))
		o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
	}
	settings := []string{
		fmt.Sprintf("Cache=%d", cfg.CacheBytes),
		fmt.Sprintf("MemTableSize=%d", cfg.MemTableBytes),
		fmt.Sprintf("FilterPolicy=bloom(%d) written on every level; Get consults it on L0-L5, not L6 (Pebble skips L6 filters unless IterOptions.UseL6Filters, which Get cannot set); no memtable filter", int(cfg.BloomBitsKey)),
		"Compression=snappy on every level", "WAL=on", "sync=per write (pebble.Sync) in fillsync only",
		"Compact=Flush + DB.Compact(all keys, parallelize=true)",
	}
	if cfg.PebbleValueSepMin > 0 {
		o.FormatMajorVersion = pebble.FormatValueSeparation
		min := cfg.PebbleValueSepMin
		o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
			return pebble.ValueSeparationPolicy{
				Enabled:               true,
				MinimumSize:           min,
				MaxBlobReferenceDepth: 10,
				RewriteMinimumAge:     5 * time.Minute,
				TargetGarbageRatio:    0.20,
			}
		}
		settings = append(settings, fmt.Sprintf(
			"ValueSeparation=on (MinimumSize=%d, MaxBlobReferenceDepth=10, RewriteMinimumAge=5m, TargetGarbageRatio=0.2, FormatValueSeparation)", min))
	} else {
		settings = append(settings, "ValueSeparation=off")
	}
	db, err := pebble.Open(dir, o)
	if err != nil {
		cache.Unref()
		return nil, nil, err
	}
	return &pebbleEngine{db: db, cache: cache}, settings, nil
}

func (e *pebbleEngine) Put(key, value []byte, sync bool) error {
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	return e.db.Set(key, value, wo)
}

func (e *pebbleEngine) Get(key []byte) (int, bool, error) {
	v, closer, err := e.db.Get(key)
	if err == pebble.ErrNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n := len(v)
	touch(v)
	return n, true, closer.Close()
}

func (e *pebbleEngine) NewIter() (Iter, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	return &pebbleIter{it: it}, nil
}

// maxKey is above every key the workloads write (16 bytes).
var maxKey = bytes.Repeat([]byte{0xff}, 32)

func (e *pebbleEngine) Compact() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return e.db.Compact(context.Background(), nil, maxKey, true)
}

func (e *pebbleEngine) Close() error {
	err := e.db.Close()
	e.cache.Unref()
	return err
}

// quietLogger drops Pebble's informational messages (WAL replay and the
// like) and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

type pebbleIter struct{ it *pebble.Iterator }

func (i *pebbleIter) First() bool          { return i.it.First() }
func (i *pebbleIter) SeekGE(k []byte) bool { return i.it.SeekGE(k) }
func (i *pebbleIter) Next() bool           { return i.it.Next() }
func (i *pebbleIter) Key() []byte          { return i.it.Key() }

// ValueLen uses ValueAndErr, which fetches a separated value from its blob
// file (Value would too, but hides the error).
func (i *pebbleIter) ValueLen() (int, error) {
	v, err := i.it.ValueAndErr()
	return len(v), err
}
func (i *pebbleIter) Close() error { return i.it.Close() }
