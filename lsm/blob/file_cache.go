package blob

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// OpenFunc opens blob file n and returns its reader.
type OpenFunc func(n base.FileNum) (*Reader, error)

// FileCache is a bounded cache of open blob file readers, least recently
// used out. A reader is reference counted: evicting it from the cache
// closes it only once the last user releases it, so a read never sees its
// file closed underneath. It takes a mutex on every lookup; the engine
// asks it only on a blob cache miss.
type FileCache struct {
	open     OpenFunc
	capacity int

	mu sync.Mutex
	// The fields below are guarded by mu.
	files  map[base.FileNum]*list.Element // of *fileEntry
	lru    list.List                      // front: most recently used
	closed bool

	// lookups counts calls of Get, to prove the hit path makes none.
	lookups atomic.Int64
}

type fileEntry struct {
	num    base.FileNum
	r      *Reader
	refs   int // the cache's one while cached, plus users; guarded by mu
	cached bool
}

// NewFileCache returns a cache of at most capacity open readers (at least
// one) that opens files with open.
func NewFileCache(capacity int, open OpenFunc) *FileCache {
	return &FileCache{open: open, capacity: max(capacity, 1), files: make(map[base.FileNum]*list.Element)}
}

// Get returns the open reader of file n and a function to release it.
func (fc *FileCache) Get(n base.FileNum) (*Reader, func(), error) {
	fc.lookups.Add(1)
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return nil, nil, fmt.Errorf("blob: file cache closed")
	}
	if el, ok := fc.files[n]; ok {
		fc.lru.MoveToFront(el)
		e := el.Value.(*fileEntry)
		e.refs++
		fc.mu.Unlock()
		return e.r, fc.releaser(e), nil
	}
	fc.mu.Unlock()
	// Open without the mutex; a concurrent open of the same file may win.
	r, err := fc.open(n)
	if err != nil {
		return nil, nil, err
	}
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		r.Close()
		return nil, nil, fmt.Errorf("blob: file cache closed")
	}
	if el, ok := fc.files[n]; ok {
		e := el.Value.(*fileEntry)
		e.refs++
		fc.mu.Unlock()
		r.Close()
		return e.r, fc.releaser(e), nil
	}
	e := &fileEntry{num: n, r: r, refs: 2, cached: true}
	fc.files[n] = fc.lru.PushFront(e)
	var closeList []*Reader
	for fc.lru.Len() > fc.capacity {
		el := fc.lru.Back()
		closeList = fc.dropLocked(el, closeList)
	}
	fc.mu.Unlock()
	for _, r := range closeList {
		r.Close()
	}
	return r, fc.releaser(e), nil
}

// dropLocked removes el from the cache and appends its reader to closeList
// if no user holds it.
// REQUIRES: fc.mu held.
func (fc *FileCache) dropLocked(el *list.Element, closeList []*Reader) []*Reader {
	e := el.Value.(*fileEntry)
	fc.lru.Remove(el)
	delete(fc.files, e.num)
	e.cached = false
	e.refs--
	if e.refs == 0 {
		closeList = append(closeList, e.r)
	}
	return closeList
}

func (fc *FileCache) releaser(e *fileEntry) func() {
	return func() {
		fc.mu.Lock()
		e.refs--
		last := e.refs == 0
		fc.mu.Unlock()
		if last {
			e.r.Close()
		}
	}
}

// Evict drops file n (being deleted) from the cache.
func (fc *FileCache) Evict(n base.FileNum) {
	fc.mu.Lock()
	var closeList []*Reader
	if el, ok := fc.files[n]; ok {
		closeList = fc.dropLocked(el, nil)
	}
	fc.mu.Unlock()
	for _, r := range closeList {
		r.Close()
	}
}

// Lookups returns the number of Get calls so far.
func (fc *FileCache) Lookups() int64 { return fc.lookups.Load() }

// Len returns the number of cached readers.
func (fc *FileCache) Len() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.lru.Len()
}

// Close closes every cached reader not in use; readers in use close at
// their release.
func (fc *FileCache) Close() error {
	fc.mu.Lock()
	fc.closed = true
	var closeList []*Reader
	for fc.lru.Len() > 0 {
		closeList = fc.dropLocked(fc.lru.Back(), closeList)
	}
	fc.mu.Unlock()
	var errs []error
	for _, r := range closeList {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
