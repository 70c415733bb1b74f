package dbbench

import (
	"fmt"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

func init() { register("goleveldb", openGoleveldb) }

type goleveldbEngine struct{ db *leveldb.DB }

func openGoleveldb(dir string, cfg Config) (Engine, []string, error) {
	o := &opt.Options{
		BlockCacheCapacity: int(cfg.CacheBytes),
		WriteBuffer:        int(cfg.MemTableBytes),
		Filter:             filter.NewBloomFilter(int(cfg.BloomBitsKey)),
		Compression:        opt.SnappyCompression,
	}
	settings := []string{
		fmt.Sprintf("BlockCacheCapacity=%d", o.BlockCacheCapacity),
		fmt.Sprintf("WriteBuffer=%d", o.WriteBuffer),
		fmt.Sprintf("Filter=bloom(%d) (Get consults every table's filter, every level)", int(cfg.BloomBitsKey)),
		"Compression=snappy", "WAL=on (journal)", "sync=per write (opt.WriteOptions{Sync}) in fillsync only",
		"Compact=DB.CompactRange(util.Range{}) (memdb and every level)",
	}
	db, err := leveldb.OpenFile(dir, o)
	if err != nil {
		return nil, nil, err
	}
	return &goleveldbEngine{db: db}, settings, nil
}

var levelSync = &opt.WriteOptions{Sync: true}

func (e *goleveldbEngine) Put(key, value []byte, sync bool) error {
	var wo *opt.WriteOptions
	if sync {
		wo = levelSync
	}
	return e.db.Put(key, value, wo)
}

func (e *goleveldbEngine) Get(key []byte) (int, bool, error) {
	v, err := e.db.Get(key, nil)
	if err == leveldb.ErrNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return len(v), true, nil
}

func (e *goleveldbEngine) NewIter() (Iter, error) {
	return &goleveldbIter{it: e.db.NewIterator(nil, nil)}, nil
}

func (e *goleveldbEngine) Compact() error { return e.db.CompactRange(util.Range{}) }
func (e *goleveldbEngine) Close() error   { return e.db.Close() }

type goleveldbIter struct{ it iterator.Iterator }

func (i *goleveldbIter) First() bool            { return i.it.First() }
func (i *goleveldbIter) SeekGE(k []byte) bool   { return i.it.Seek(k) }
func (i *goleveldbIter) Next() bool             { return i.it.Next() }
func (i *goleveldbIter) Key() []byte            { return i.it.Key() }
func (i *goleveldbIter) ValueLen() (int, error) { return len(i.it.Value()), i.it.Error() }
func (i *goleveldbIter) Close() error           { i.it.Release(); return i.it.Error() }
