package lsm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/trace"
)

// tableCache keeps one open sst.Reader per live table. A lookup of an open
// table is a sync.Map load: no lock on the read path. A table is opened on
// first use and closed when it becomes obsolete (no version references
// it), so a reader is never closed under an iterator.
//
// Every live table stays open; a bound on open files (an LRU of readers,
// as in Pebble) is not implemented yet.
type tableCache struct {
	fs      vfs.FS
	dirname string
	cache   *cache.Cache
	cacheID uint64
	// ownCache is set when the DB made the cache (Options.Cache nil):
	// close then closes it. A cache given in Options is its creator's to
	// close; close only evicts this DB's blocks from it.
	ownCache bool
	tables   sync.Map // base.FileNum → *tableEntry
	// tracer, if set, is told of the blocks a table pins at open.
	tracer *trace.Tracer
}

type tableEntry struct {
	once   sync.Once
	reader *sst.Reader
	err    error
}

func newTableCache(fs vfs.FS, dirname string, c *cache.Cache, cacheID uint64) *tableCache {
	return &tableCache{fs: fs, dirname: dirname, cache: c, cacheID: cacheID}
}

// get returns the open reader of f, opening it on first use.
func (tc *tableCache) get(f *version.FileMetadata) (*sst.Reader, error) {
	v, ok := tc.tables.Load(f.FileNum)
	if !ok {
		v, _ = tc.tables.LoadOrStore(f.FileNum, &tableEntry{})
	}
	e := v.(*tableEntry)
	e.once.Do(func() {
		e.reader, e.err = tc.open(f.FileNum)
	})
	if e.err != nil {
		// Forget the failure so that a later read retries the open (the
		// error may have been transient).
		tc.tables.CompareAndDelete(f.FileNum, e)
	}
	return e.reader, e.err
}

func (tc *tableCache) open(n base.FileNum) (*sst.Reader, error) {
	name := base.MakeFilepath(tc.dirname, base.FileTypeTable, n)
	file, err := tc.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("lsm: opening table %s: %w", n, err)
	}
	r, err := sst.NewReader(file, sst.ReaderOptions{Cache: tc.cache, CacheID: tc.cacheID, FileNum: n, Tracer: tc.tracer})
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("lsm: opening table %s: %w", n, err)
	}
	return r, nil
}

// evict closes and forgets table n and drops its blocks from the cache.
// REQUIRES: no version references n.
func (tc *tableCache) evict(n base.FileNum) error {
	v, ok := tc.tables.LoadAndDelete(n)
	tc.cache.EvictFile(tc.cacheID, n)
	if !ok {
		return nil
	}
	e := v.(*tableEntry)
	var err error
	e.once.Do(func() {}) // never opened: nothing to close
	if e.reader != nil {
		err = e.reader.Close()
	}
	return err
}

// close closes every open table, then the block cache if the DB owns it
// (which fails, a *cache.LeakError, if a block handle is still out: an
// iterator left open, a leak) or else drops the DB's blocks from the
// shared cache.
func (tc *tableCache) close() error {
	var errs []error
	tc.tables.Range(func(k, _ any) bool {
		errs = append(errs, tc.evict(k.(base.FileNum)))
		return true
	})
	if tc.ownCache {
		errs = append(errs, tc.cache.Close())
	} else {
		tc.cache.EvictAll(tc.cacheID)
	}
	return errors.Join(errs...)
}
