package dbbench

import (
	"errors"
	"fmt"

	"github.com/cairnkv/cairn/lsm"
)

func init() { register("cairn", openCairn) }

type cairnEngine struct{ db *lsm.DB }

func openCairn(dir string, cfg Config) (Engine, []string, error) {
	o := &lsm.Options{
		CacheSizeBytes:    cfg.CacheBytes,
		MemTableSizeBytes: cfg.MemTableBytes,
		FilterBitsPerKey:  cfg.BloomBitsKey,
		Compression:       lsm.SnappyCompression,
		DisableWALMmap:    cfg.CairnDisableWALMmap,

		MaxConcurrentCompactions: cfg.CairnMaxConcurrentCompactions,
		WALBufferedWrites:        cfg.CairnWALBuffered,
	}
	settings := []string{
		fmt.Sprintf("CacheSizeBytes=%d", o.CacheSizeBytes),
		fmt.Sprintf("MemTableSizeBytes=%d", o.MemTableSizeBytes),
		fmt.Sprintf("FilterBitsPerKey=%g (Get consults every table's filter, every level, and the memtables' DynamicBloom)", o.FilterBitsPerKey),
		"Compression=snappy", "WAL=on", "sync=per write (WriteOptions.Sync) in fillsync only",
		fmt.Sprintf("DisableWALMmap=%v", o.DisableWALMmap),
		fmt.Sprintf("MaxConcurrentCompactions=%d (0: default)", o.MaxConcurrentCompactions),
		fmt.Sprintf("WALBufferedWrites=%v", o.WALBufferedWrites),
		"Compact=DB.Compact(nil, nil) (flush, then every level down to the bottom)",
		"Get=DB.GetFunc (a view of the value, touched, not copied)",
	}
	blob, err := setCairnMinBlobSize(o, cfg.CairnMinBlobSize)
	if err != nil {
		return nil, nil, err
	}
	settings = append(settings, blob)
	db, err := lsm.Open(dir, o)
	if err != nil {
		return nil, nil, err
	}
	return &cairnEngine{db: db}, settings, nil
}

// setCairnMinBlobSize sets lsm.Options.MinBlobSize (0: the engine's
// default, separation of values from 4 KiB; negative: no key-value
// separation) and describes the setting.
func setCairnMinBlobSize(o *lsm.Options, size int64) (string, error) {
	o.MinBlobSize = int(size)
	switch {
	case size == 0:
		return fmt.Sprintf("MinBlobSize=0 (the engine default, %d)", lsm.DefaultMinBlobSize), nil
	case size < 0:
		return fmt.Sprintf("MinBlobSize=%d (no separation)", size), nil
	}
	return fmt.Sprintf("MinBlobSize=%d", size), nil
}

func (e *cairnEngine) Put(key, value []byte, sync bool) error {
	wo := lsm.NoSync
	if sync {
		wo = lsm.Sync
	}
	return e.db.Put(key, value, wo)
}

// Get reads the value in place (DB.GetFunc, like Badger's Item.Value and
// Pebble's Get with its closer): no copy.
func (e *cairnEngine) Get(key []byte) (n int, found bool, err error) {
	err = e.db.GetFunc(key, func(v []byte) error {
		n = len(v)
		touch(v)
		return nil
	})
	if errors.Is(err, lsm.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}

func (e *cairnEngine) NewIter() (Iter, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	return &cairnIter{it: it}, nil
}

func (e *cairnEngine) Compact() error { return e.db.Compact(nil, nil) }
func (e *cairnEngine) Close() error   { return e.db.Close() }

type cairnIter struct{ it *lsm.Iterator }

func (i *cairnIter) First() bool          { return i.it.First() }
func (i *cairnIter) SeekGE(k []byte) bool { return i.it.SeekGE(k) }
func (i *cairnIter) Next() bool           { return i.it.Next() }
func (i *cairnIter) Key() []byte          { return i.it.Key() }
func (i *cairnIter) ValueLen() (int, error) {
	v := i.it.Value()
	touch(v)
	return len(v), i.it.Error()
}
func (i *cairnIter) Close() error { return i.it.Close() }
