package dbbench

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

func init() { register("badger", openBadger) }

type badgerEngine struct{ db *badger.DB }

func openBadger(dir string, cfg Config) (Engine, []string, error) {
	// 10 bits/key is a false-positive rate of about 1% (0.82% in theory);
	// Badger takes the rate.
	const fp = 0.01
	o := badger.DefaultOptions(dir).
		WithLogger(nil).
		WithBlockCacheSize(cfg.CacheBytes).
		WithMemTableSize(cfg.MemTableBytes).
		WithBloomFalsePositive(fp).
		WithCompression(options.Snappy).
		WithSyncWrites(cfg.SyncWrites).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false)
	if cfg.BadgerValueThreshold > 0 {
		o = o.WithValueThreshold(cfg.BadgerValueThreshold)
	}
	settings := []string{
		fmt.Sprintf("BlockCacheSize=%d", o.BlockCacheSize),
		fmt.Sprintf("IndexCacheSize=%d (0: indexes and filters kept in memory)", o.IndexCacheSize),
		fmt.Sprintf("MemTableSize=%d", o.MemTableSize),
		fmt.Sprintf("BloomFalsePositive=%g (~%g bits/key; Get consults every table's filter, every level)", fp, cfg.BloomBitsKey),
		"Compression=snappy",
		fmt.Sprintf("ValueThreshold=%d", o.ValueThreshold),
		fmt.Sprintf("SyncWrites=%v (fillsync opens with true; other writes: memtable WAL (mmap) + value log, no fsync)", o.SyncWrites),
		fmt.Sprintf("NumCompactors=%d", o.NumCompactors),
		"DetectConflicts=false", "one db.Update per Put",
		"Compact=DB.Flatten(2) (memtable not flushed: Badger v4 has no Flush)",
		"iterators: PrefetchValues=false, Item.Value read per key",
	}
	db, err := badger.Open(o)
	if err != nil {
		return nil, nil, err
	}
	return &badgerEngine{db: db}, settings, nil
}

func (e *badgerEngine) Put(key, value []byte, sync bool) error {
	// Badger syncs per DB (SyncWrites), not per write: fillsync opens the DB
	// with SyncWrites, so sync needs nothing more here.
	return e.db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) })
}

func (e *badgerEngine) Get(key []byte) (n int, found bool, err error) {
	err = e.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			n = len(v)
			touch(v)
			return nil
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	return n, err == nil, err
}

func (e *badgerEngine) NewIter() (Iter, error) {
	txn := e.db.NewTransaction(false)
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	return &badgerIter{txn: txn, it: txn.NewIterator(opts)}, nil
}

func (e *badgerEngine) Compact() error { return e.db.Flatten(2) }
func (e *badgerEngine) Close() error   { return e.db.Close() }

type badgerIter struct {
	txn *badger.Txn
	it  *badger.Iterator
}

func (i *badgerIter) First() bool          { i.it.Rewind(); return i.it.Valid() }
func (i *badgerIter) SeekGE(k []byte) bool { i.it.Seek(k); return i.it.Valid() }
func (i *badgerIter) Next() bool           { i.it.Next(); return i.it.Valid() }
func (i *badgerIter) Key() []byte          { return i.it.Item().Key() }
func (i *badgerIter) ValueLen() (n int, err error) {
	err = i.it.Item().Value(func(v []byte) error { n = len(v); touch(v); return nil })
	return n, err
}
func (i *badgerIter) Close() error { i.it.Close(); i.txn.Discard(); return nil }
