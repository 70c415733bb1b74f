package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/trace"
)

// blobStore is the DB's side of key-value separation (lsm/blob): the blob
// cache, the cache of open blob file readers, and the read path that
// resolves blob indexes.
type blobStore struct {
	cache    *blob.Cache
	ownCache bool
	cacheID  uint64
	files    *blob.FileCache

	// metadataFirst is a test hook that restores the order Titan used
	// before its "blob cache first" change: look the file's metadata and
	// reader up (the reader cache's mutex) before asking the blob cache.
	// BenchmarkBlobGetCacheHit compares the two orders.
	metadataFirst bool
	// beforeGCCommit is a test hook run by blob GC between copying the
	// live records and committing their new indexes.
	beforeGCCommit func()
}

func (d *DB) initBlobStore() {
	b := &d.blobs
	b.cache = d.opts.BlobCache
	if b.cache == nil {
		b.cache = blob.NewCache(max(d.opts.BlobCacheSizeBytes, 0))
		b.ownCache = true
	}
	b.cacheID = b.cache.NewID()
	b.files = blob.NewFileCache(d.opts.MaxOpenBlobFiles, d.openBlobFile)
}

func (d *DB) openBlobFile(n base.FileNum) (*blob.Reader, error) {
	name := base.MakeFilepath(d.dirname, base.FileTypeBlob, n)
	f, err := d.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("lsm: opening blob file %s: %w", n, err)
	}
	st, err := f.Stat()
	if err == nil {
		var r *blob.Reader
		if r, err = blob.NewReader(f, n, st.Size()); err == nil {
			return r, nil
		}
	}
	f.Close()
	return nil, fmt.Errorf("lsm: opening blob file %s: %w", n, err)
}

// closeBlobStore closes the reader cache and, if the DB owns it, the blob
// cache; the latter fails if a handle leaked.
func (d *DB) closeBlobStore() error {
	err := d.blobs.files.Close()
	if d.blobs.ownCache {
		if cerr := d.blobs.cache.Close(); err == nil {
			err = cerr
		}
	} else {
		d.blobs.cache.EvictAll(d.blobs.cacheID)
	}
	return err
}

// evictBlobFile forgets deleted blob file n in both caches.
func (d *DB) evictBlobFile(n base.FileNum) {
	d.blobs.files.Evict(n)
	d.blobs.cache.EvictFile(d.blobs.cacheID, n)
}

// blobValue resolves the blob index idx of user key ukey, read through
// version v, to a handle on the verified value. The caller releases it.
//
// Cache first: a hit takes no mutex and touches neither v's blob-file
// metadata nor the reader cache (see lsm/blob's doc). Only a miss checks
// that v holds the file (an index into a file the version does not hold is
// corruption, never a read of whatever file has that number), takes its
// reader, reads and verifies the record into cache memory and inserts it.
// ra, if not nil, is an iterator's readahead state.
func (d *DB) blobValue(v *version.Version, ukey, idx []byte, ra *blobReadahead) (blob.Handle, error) {
	return d.blobValueTraced(v, ukey, idx, ra, nil)
}

// blobValueTraced is blobValue tracing the cache lookup as acc's (nil: not
// traced).
func (d *DB) blobValueTraced(v *version.Version, ukey, idx []byte, ra *blobReadahead, acc *trace.Access) (blob.Handle, error) {
	x, err := blob.DecodeIndex(idx)
	if err != nil {
		return blob.Handle{}, fmt.Errorf("lsm: key %q: %w", truncateKey(ukey), err)
	}
	b := &d.blobs
	if b.metadataFirst {
		if _, ok := v.BlobFile(x.FileNum); !ok {
			return blob.Handle{}, base.CorruptionErrorf("lsm: key %q: blob index into blob file %s, which the version does not hold", truncateKey(ukey), x.FileNum)
		}
		_, release, err := b.files.Get(x.FileNum)
		if err != nil {
			return blob.Handle{}, err
		}
		defer release()
	}
	h, ok := b.cache.Get(b.cacheID, x.FileNum, x.Offset)
	if acc != nil {
		d.traceBlob(acc, ukey, x, ok)
	}
	if ok {
		// The record was verified when it entered the cache; check that it
		// is the one the index means (a damaged index could name another
		// key's record).
		rec := h.Record()
		if blob.StoredLen(rec) != x.Len || !bytes.Equal(blob.RecordKey(rec), ukey) {
			h.Release()
			return blob.Handle{}, base.CorruptionErrorf("lsm: key %q: blob index %+v names another record", truncateKey(ukey), x)
		}
		return h, nil
	}
	if _, ok := v.BlobFile(x.FileNum); !ok {
		return blob.Handle{}, base.CorruptionErrorf("lsm: key %q: blob index into blob file %s, which the version does not hold", truncateKey(ukey), x.FileNum)
	}
	if ra != nil {
		// An iterator's miss: a verified view of its readahead buffer,
		// with no copy and no cache insert (a scan would otherwise push
		// the Gets' working set out of the cache, and pay an allocation,
		// a copy and a shard lock per value).
		h, err := ra.view(d, x, ukey)
		if err != nil {
			return blob.Handle{}, fmt.Errorf("lsm: key %q: %w", truncateKey(ukey), err)
		}
		return h, nil
	}
	buf, err := b.cache.Alloc(int(x.Len))
	if err != nil {
		return blob.Handle{}, err
	}
	vs, vl, err := d.readBlobRecord(buf.Bytes(), x, ukey)
	if err == nil && x.Compression != blob.CompressionNone {
		// The cache holds the decoded record, so that a hit decodes
		// nothing.
		var dec blob.Buffer
		if dec, vs, vl, err = d.decodeBlobRecord(x.Compression, buf.Bytes()); err == nil {
			b.cache.Free(buf)
			buf = dec
		}
	}
	if err != nil {
		b.cache.Free(buf)
		return blob.Handle{}, fmt.Errorf("lsm: key %q: %w", truncateKey(ukey), err)
	}
	return b.cache.Insert(b.cacheID, x.FileNum, x.Offset, buf, vs, vl), nil
}

// decodeBlobRecord returns a cache buffer holding the decoded form of
// rec, a verified record of compression c (see blob.DecodeRecord).
func (d *DB) decodeBlobRecord(c blob.Compression, rec []byte) (dec blob.Buffer, valStart, valLen int, err error) {
	n, err := blob.DecodedRecordLen(c, rec)
	if err != nil {
		return blob.Buffer{}, 0, 0, err
	}
	dec, err = d.blobs.cache.Alloc(n)
	if err != nil {
		return blob.Buffer{}, 0, 0, err
	}
	if valStart, valLen, err = blob.DecodeRecord(c, dec.Bytes(), rec); err != nil {
		d.blobs.cache.Free(dec)
		return blob.Buffer{}, 0, 0, err
	}
	return dec, valStart, valLen, nil
}

// readBlobRecord reads and verifies the record x into buf.
func (d *DB) readBlobRecord(buf []byte, x blob.Index, ukey []byte) (int, int, error) {
	r, release, err := d.blobs.files.Get(x.FileNum)
	if err != nil {
		return 0, 0, err
	}
	defer release()
	return r.ReadRecord(buf, x, ukey)
}

func truncateKey(k []byte) []byte {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}

// blobReadahead lets an iterator that walks blob indexes read ahead. A
// scan meets the records of each blob file in file order (a flush writes
// them sorted), interleaved with other files' records, so the state is
// kept per file, for the last blobReadaheadFiles files. A miss outside a
// file's buffer reads just the record, unless it follows the last read in
// the file: then it reads a window from the record on (16 KiB, doubling
// while the misses stay sequential, up to 256 KiB). The values that fall
// in the window are then handed out as views of it, verified one by one
// as they are used, with no read, copy or allocation each. A view stays
// valid until the file's buffer is refilled, which happens only in a
// later read, after the iterator has released the value it held.
type blobReadahead struct {
	files [blobReadaheadFiles]fileReadahead
	next  int // the slot to reuse next
	// scratch holds the last value decoded from a compressed file.
	scratch []byte
}

// blobReadaheadFiles is how many blob files an iterator reads ahead in at
// once. A scan of keys written in random order meets every live blob file
// of every flush in turn (200k 4 KiB values written through 64 MiB
// memtables, then overwritten: 25 or more), and when they outnumber the
// slots, reusing the slots in turn evicts each file before its next record
// comes (8 slots made that scan one read per value, 264k values/s; 32:
// 520-740k). With maxReadahead this bounds an iterator's buffers at 8 MiB,
// allocated only for files read sequentially.
const blobReadaheadFiles = 32

type fileReadahead struct {
	fileNum base.FileNum
	start   uint64 // file offset of buf[0]
	buf     []byte
	// nextOff is where the last window ended (start+len(buf) until the
	// buffer is dropped); window the size of the last read.
	nextOff uint64
	window  int
	// compression is the file's: a record's is the file's or, stored
	// raw, none; checked against every index served.
	compression blob.Compression
}

const (
	minReadahead = 16 << 10
	// maxReadahead: 256 KiB windows scanned as fast as 1 MiB ones here,
	// or faster (32 buffers of 1 MiB fault in more fresh heap than the
	// larger reads save).
	maxReadahead = 256 << 10
)

// view returns the verified record x as a view of a readahead buffer.
func (ra *blobReadahead) view(d *DB, x blob.Index, ukey []byte) (blob.Handle, error) {
	if x.Compression == blob.CompressionNone {
		rec, vs, vl, _, err := ra.verified(d, x, ukey)
		if err != nil {
			return blob.Handle{}, err
		}
		return blob.ViewHandle(rec, vs, vl), nil
	}
	f := ra.file(x.FileNum)
	rec, err := f.record(d, x)
	if err != nil {
		return blob.Handle{}, err
	}
	// Decoded into the iterator's scratch buffer, which the next value
	// reuses: the iterator releases a value before it asks for the next.
	v, c, err := blob.ReadValue(f.compression, rec, ukey, &ra.scratch)
	if err == nil && c != x.Compression {
		err = base.CorruptionErrorf("blob: record's value is stored %s, index says %s", c, x.Compression)
	}
	if err != nil {
		return blob.Handle{}, fmt.Errorf("blob: file %s: record at %d: %w", x.FileNum, x.Offset, err)
	}
	return blob.ViewHandle(v, 0, len(v)), nil
}

// stored returns the stored value of the verified record x of key ukey,
// a view of a readahead buffer (valid until the next call), and the
// compression of x's file (x.Compression says how the value is stored:
// the file's, or none).
func (ra *blobReadahead) stored(d *DB, x blob.Index, ukey []byte) ([]byte, blob.Compression, error) {
	rec, vs, vl, c, err := ra.verified(d, x, ukey)
	if err != nil {
		return nil, 0, err
	}
	return rec[vs : vs+vl], c, nil
}

// verified returns record x of key ukey from a readahead buffer, verified
// (checksum, key, compression as the index says), with where its stored
// value lies in it and the compression of x's file.
func (ra *blobReadahead) verified(d *DB, x blob.Index, ukey []byte) (rec []byte, vs, vl int, fileC blob.Compression, err error) {
	f := ra.file(x.FileNum)
	rec, err = f.record(d, x)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	vs, vl, err = blob.VerifyRecord(rec, ukey)
	if err == nil {
		err = blob.CheckRecordCompression(f.compression, x, rec)
	}
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("blob: file %s: record at %d: %w", x.FileNum, x.Offset, err)
	}
	return rec, vs, vl, f.compression, nil
}

// file returns the readahead state of file n, taking the next slot if
// it has none.
func (ra *blobReadahead) file(n base.FileNum) *fileReadahead {
	for i := range ra.files {
		if ra.files[i].fileNum == n && ra.files[i].buf != nil {
			return &ra.files[i]
		}
	}
	f := &ra.files[ra.next]
	ra.next = (ra.next + 1) % blobReadaheadFiles
	*f = fileReadahead{fileNum: n, buf: f.buf[:0]}
	return f
}

// record returns record x (unverified) from the buffer, reading a window
// of the file into it first if x is not there.
func (ra *fileReadahead) record(d *DB, x blob.Index) ([]byte, error) {
	end := x.Offset + x.Len
	if end < x.Offset {
		return nil, base.CorruptionErrorf("blob: file %s: record [%d, +%d) outside the data", x.FileNum, x.Offset, x.Len)
	}
	if x.Offset >= ra.start && end <= ra.start+uint64(len(ra.buf)) {
		// The caller checks the record's compression against x's.
		return ra.buf[x.Offset-ra.start : end-ra.start : end-ra.start], nil
	}
	// Sequential: x starts in the last window's tail (a record cut by the
	// window's end) or right after it.
	// A miss that is not sequential reads just its record: a seek
	// followed by a few steps meets each blob file once or twice (the
	// records of neighbouring keys are spread over the files of
	// different flushes), and a window would be read for nothing.
	if len(ra.buf) > 0 && x.Offset > ra.start && x.Offset <= ra.nextOff {
		ra.window = min(max(2*ra.window, minReadahead), maxReadahead)
	} else {
		ra.window = 0
	}
	r, release, err := d.blobs.files.Get(x.FileNum)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := r.CheckCompression(x); err != nil {
		return nil, err
	}
	ra.compression = r.Compression()
	dataEnd := r.DataEnd()
	if x.Offset < blob.HeaderLen || end > dataEnd {
		return nil, base.CorruptionErrorf("blob: file %s: record [%d, +%d) outside the data", x.FileNum, x.Offset, x.Len)
	}
	n := min(max(uint64(ra.window), x.Len), dataEnd-x.Offset)
	if uint64(cap(ra.buf)) < n {
		ra.buf = make([]byte, n, max(n, minReadahead))
	}
	ra.buf = ra.buf[:n]
	if _, err := r.ReadAt(ra.buf, int64(x.Offset)); err != nil {
		ra.buf = ra.buf[:0]
		if errors.Is(err, io.EOF) {
			err = base.MarkCorruption(err)
		}
		return nil, fmt.Errorf("blob: file %s: readahead at %d: %w", x.FileNum, x.Offset, err)
	}
	ra.start, ra.nextOff = x.Offset, x.Offset+n
	return ra.buf[:x.Len:x.Len], nil
}

// blobSeparator writes the values of a flush or compaction that reach
// MinBlobSize to blob files and the blob indexes in their place to the
// table. A nil separator (separation off) passes entries through.
type blobSeparator struct {
	d       *DB
	minSize int
	cur     *blob.Writer
	curFile vfs.File
	curNum  base.FileNum
	// done are the finished blob files, synced and closed.
	done   []*version.BlobFileMetadata
	keyBuf []byte
	valBuf []byte
	// bytesWritten counts the blob bytes written.
	bytesWritten int64
	// refs are the blob files the indexes written to the current table
	// point into (see takeRefs).
	refs     map[base.FileNum]struct{}
	refBytes uint64
}

func (d *DB) newBlobSeparator() *blobSeparator {
	if d.opts.MinBlobSize <= 0 {
		return nil
	}
	return &blobSeparator{d: d, minSize: d.opts.MinBlobSize}
}

// add adds (ikey, value) to w, separating the value if it is large enough.
func (s *blobSeparator) add(w *sst.Writer, ikey, value []byte) error {
	if s == nil || len(value) < s.minSize || base.DecodeTrailer(ikey).Kind() != base.KindSet {
		if s != nil && base.DecodeTrailer(ikey).Kind() == base.KindBlobIndex {
			s.noteIndexRef(value)
		}
		return w.Add(ikey, value)
	}
	x, err := s.addRecord(base.UserKey(ikey), value)
	if err != nil {
		return err
	}
	s.noteRef(x)
	s.keyBuf = append(s.keyBuf[:0], ikey...)
	// The trailer is little-endian seq<<8|kind: its first byte is the kind.
	s.keyBuf[len(s.keyBuf)-base.TrailerLen] = byte(base.KindBlobIndex)
	s.valBuf = x.AppendEncoded(s.valBuf[:0])
	return w.Add(s.keyBuf, s.valBuf)
}

// addRecord writes (key, value) to the current blob file, starting one if
// needed, and returns its location.
func (s *blobSeparator) addRecord(key, value []byte) (blob.Index, error) {
	if err := s.startFile(); err != nil {
		return blob.Index{}, err
	}
	x, err := s.cur.Add(key, value)
	return s.added(x, err)
}

// addStoredRecord is addRecord for a value already stored as c, written
// as stored (see blob.Writer.AddStored): c must be s.compression() or
// none.
func (s *blobSeparator) addStoredRecord(key, stored []byte, c blob.Compression) (blob.Index, error) {
	if err := s.startFile(); err != nil {
		return blob.Index{}, err
	}
	x, err := s.cur.AddStored(key, stored, c)
	return s.added(x, err)
}

// compression returns the compression of the blob files s writes.
func (s *blobSeparator) compression() blob.Compression {
	return s.d.opts.BlobCompression.blob(s.d.opts.Compression)
}

// startFile starts a blob file if none is open.
func (s *blobSeparator) startFile() error {
	if s.cur != nil {
		return nil
	}
	s.d.mu.Lock()
	s.curNum = s.d.mu.versions.NewFileNum()
	s.d.mu.Unlock()
	f, err := s.d.fs.Create(base.MakeFilepath(s.d.dirname, base.FileTypeBlob, s.curNum))
	if err != nil {
		return err
	}
	s.curFile, s.cur = f, blob.NewWriter(f, s.curNum, s.compression())
	return nil
}

// added finishes the current file once the record x just added (err: its
// error) fills it.
func (s *blobSeparator) added(x blob.Index, err error) (blob.Index, error) {
	if err != nil {
		return blob.Index{}, err
	}
	if s.cur.Size() >= uint64(s.d.opts.BlobTargetFileSizeBytes) {
		return x, s.finishCurrent()
	}
	return x, nil
}

func (s *blobSeparator) finishCurrent() error {
	st, err := s.cur.Finish()
	if err == nil {
		err = s.curFile.Sync()
	}
	if cerr := s.curFile.Close(); err == nil {
		err = cerr
	}
	s.cur = nil
	if err != nil {
		s.d.removeFile(base.FileTypeBlob, s.curNum)
		return err
	}
	s.bytesWritten += int64(st.Size)
	s.done = append(s.done, &version.BlobFileMetadata{FileNum: s.curNum, Size: st.Size, Count: st.Count, RecordBytes: st.RecordBytes})
	return nil
}

// finish completes the current blob file and syncs the directory, so that
// no manifest edit naming a blob file outlives it. It returns the files.
func (s *blobSeparator) finish() ([]*version.BlobFileMetadata, error) {
	if s == nil {
		return nil, nil
	}
	if s.cur != nil {
		if err := s.finishCurrent(); err != nil {
			return nil, err
		}
	}
	if len(s.done) > 0 {
		if err := s.d.syncDir(); err != nil {
			return nil, err
		}
	}
	return s.done, nil
}

// abandon removes every blob file the separator wrote, the ones finish
// returned included: the caller calls it on any failure before the files
// reach a manifest edit. A file it cannot remove is logged and left to the
// next Open's sweep (nothing references it).
func (s *blobSeparator) abandon() {
	if s == nil {
		return
	}
	if s.cur != nil {
		s.curFile.Close()
		s.d.removeFile(base.FileTypeBlob, s.curNum)
		s.cur = nil
	}
	for _, m := range s.done {
		s.d.removeFile(base.FileTypeBlob, m.FileNum)
	}
	s.done = nil
}

// blobGarbage accumulates the blob indexes a compaction drops.
type blobGarbage map[base.FileNum]*version.BlobGarbage

func (g blobGarbage) add(idx []byte) error {
	x, err := blob.DecodeIndex(idx)
	if err != nil {
		return err
	}
	e := g[x.FileNum]
	if e == nil {
		e = &version.BlobGarbage{FileNum: x.FileNum}
		g[x.FileNum] = e
	}
	e.Count++
	e.Bytes += x.Len
	return nil
}

func (g blobGarbage) list() []version.BlobGarbage {
	out := make([]version.BlobGarbage, 0, len(g))
	for _, e := range g {
		out = append(out, *e)
	}
	return out
}
