package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// compactionReadaheadBytes is the size of the reads a compaction makes of
// its input tables: it reads them front to back, so one pread of 256 KiB
// serves about 60 data blocks of 4 KiB that would each be a pread.
const compactionReadaheadBytes = 256 << 10

// readaheadFile serves ReadAt from one buffer filled by large reads at the
// offset asked for. It suits one sequential reader (a compaction's own
// table reader) and is not safe for concurrent use.
type readaheadFile struct {
	vfs.File
	buf []byte
	// off is the file offset of buf[0]; n the valid bytes in buf.
	off int64
	n   int
}

func (f *readaheadFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.off && off+int64(len(p)) <= f.off+int64(f.n) {
		return copy(p, f.buf[off-f.off:f.n]), nil
	}
	if len(p) >= len(f.buf) {
		return f.File.ReadAt(p, off)
	}
	n, err := f.File.ReadAt(f.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		f.n = 0
		return 0, err
	}
	f.off, f.n = off, n
	c := copy(p, f.buf[:n])
	if c < len(p) {
		return c, io.EOF
	}
	return c, nil
}

// compactionIter is a table iterator over a reader private to one
// compaction: it reads ahead, does not fill the block cache with blocks
// no reader asked for, and closes its reader with itself.
type compactionIter struct {
	base.InternalIterator
	r *sst.Reader
}

func (it *compactionIter) Close() error {
	return errors.Join(it.InternalIterator.Close(), it.r.Close())
}

// newCompactionIter opens table f for a compaction to read front to back.
// Every block is checksummed as on any read.
func (d *DB) newCompactionIter(f *version.FileMetadata) (base.InternalIterator, error) {
	name := base.MakeFilepath(d.dirname, base.FileTypeTable, f.FileNum)
	file, err := d.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("lsm: opening table %s: %w", f.FileNum, err)
	}
	ra := &readaheadFile{File: file, buf: make([]byte, compactionReadaheadBytes), off: -1}
	r, err := sst.NewReader(ra, sst.ReaderOptions{FileNum: f.FileNum})
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("lsm: opening table %s: %w", f.FileNum, err)
	}
	return &compactionIter{InternalIterator: r.NewIter(), r: r}, nil
}

// subcompactionBounds returns the user keys at which c's output is cut into
// parts written in parallel (subcompactions), or nil for one part. The
// parts are of about equal input size, estimated from the data block sizes
// in the inputs' indexes; each gets at least TargetFileSizeBytes of input,
// and there are at most MaxSubcompactions. A part covers whole user keys
// (every version of a key goes to one part), so the parts' outputs are
// disjoint and sorted: part i's tables all lie below part i+1's.
func (d *DB) subcompactionBounds(c *compaction) ([][]byte, error) {
	total := sizeOf(c.inputs[0]) + sizeOf(c.inputs[1])
	k := min(int64(d.opts.MaxSubcompactions), total/max(d.opts.TargetFileSizeBytes, 1))
	if c.trivialMove || k <= 1 {
		return nil, nil
	}
	type point struct {
		ukey []byte
		size uint64
	}
	var points []point
	var sum uint64
	for _, in := range c.inputs {
		for _, f := range in {
			r, err := d.tables.get(f)
			if err != nil {
				return nil, err
			}
			if err := r.DataBlockBounds(func(ukey []byte, size uint64) {
				points = append(points, point{ukey: bytes.Clone(ukey), size: size})
				sum += size
			}); err != nil {
				return nil, fmt.Errorf("lsm: table %s: %w", f.FileNum, err)
			}
		}
	}
	slices.SortFunc(points, func(a, b point) int { return bytes.Compare(a.ukey, b.ukey) })
	var bounds [][]byte
	var acc uint64
	for _, p := range points {
		acc += p.size
		if int64(len(bounds)) >= k-1 {
			break
		}
		if acc < sum/uint64(k)*uint64(len(bounds)+1) {
			continue
		}
		// A bound must leave keys on both sides and grow strictly.
		if bytes.Compare(p.ukey, c.smallest) <= 0 || bytes.Compare(p.ukey, c.largest) > 0 {
			continue
		}
		if len(bounds) > 0 && bytes.Compare(p.ukey, bounds[len(bounds)-1]) <= 0 {
			continue
		}
		bounds = append(bounds, p.ukey)
	}
	return bounds, nil
}
