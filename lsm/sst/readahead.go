package sst

// Readahead for scans.
//
// An iterator that walks a table in file order reads its data blocks one
// after the other; read one at a time, a scan of small blocks pays a
// pread per block (4 KiB). After readaheadAfter misses in a row that
// each start where the previous block ended, the iterator reads a larger
// span of the data section (readaheadMinBytes, doubling on each further
// sequential read up to readaheadMaxBytes) into its own buffer and serves
// the following blocks from it. Each block is still checked (checksum,
// decompression, entry order) as it is taken from the buffer, exactly as a
// block read alone: readahead changes how bytes reach memory, not what
// is trusted. A seek elsewhere (a read not at the expected offset) drops
// back to single-block reads, so a point lookup or a short seek-and-next
// never reads ahead.

const (
	readaheadAfter    = 2
	readaheadMinBytes = 64 << 10
	readaheadMaxBytes = 256 << 10
)

// readahead is one iterator's readahead state. Its zero value reads
// nothing ahead until the pattern is sequential.
type readahead struct {
	buf []byte // bytes of the file at [off, off+len(buf))
	off uint64
	// next is the offset just past the last block the iterator used: a
	// block starting there continues the scan.
	next uint64
	// seq counts the sequential misses in a row; size is the span of the
	// next read ahead.
	seq  int
	size int
}

// noteHit records a block found in the cache, so that a scan through
// cached and uncached blocks is still seen as sequential.
func (ra *readahead) noteHit(h blockHandle) {
	if h.offset == ra.next {
		ra.next = h.offset + h.length + blockTrailerLen
	}
}

// read returns the n stored bytes of the block at off from the readahead
// buffer, reading a span ahead into it if the scan is sequential, or nil
// if the block should be read alone (not sequential). A failed read ahead
// is returned as the block's error, not retried as a single-block read:
// an I/O error must reach the caller (the error-injection sweep of
// lsm/metamorphic checks that every injected failure does). The slice is
// valid until the next call.
func (ra *readahead) read(r *Reader, off uint64, n int) ([]byte, error) {
	end := off + uint64(n)
	if off >= ra.off && end <= ra.off+uint64(len(ra.buf)) {
		ra.next = end
		return ra.buf[off-ra.off : end-ra.off], nil
	}
	if off == ra.next {
		ra.seq++
	} else {
		ra.seq, ra.size = 0, 0
	}
	ra.next = end
	if ra.seq < readaheadAfter {
		return nil, nil
	}
	switch {
	case ra.size == 0:
		ra.size = readaheadMinBytes
	case ra.size < readaheadMaxBytes:
		ra.size *= 2
	}
	// Data blocks fill [0, DataSize): read no further than their end.
	spanEnd := min(off+uint64(max(ra.size, n)), r.props.DataSize)
	if spanEnd < end {
		return nil, nil
	}
	span := int(spanEnd - off)
	if cap(ra.buf) < span {
		ra.buf = make([]byte, span, max(span, readaheadMaxBytes))
	}
	ra.buf = ra.buf[:span]
	if err := r.readAt(ra.buf, off); err != nil {
		ra.buf, ra.off = ra.buf[:0], 0
		ra.seq, ra.size = 0, 0
		return nil, err
	}
	ra.off = off
	return ra.buf[:n], nil
}
