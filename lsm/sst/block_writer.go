package sst

import (
	"encoding/binary"
)

// blockWriter builds one block: prefix-compressed entries, then the restart
// array and its length (see doc.go for the layout). Keys must be added in
// strictly increasing order; the caller checks that.
type blockWriter struct {
	// restartInterval is the number of entries between restart points.
	// Invariant: >= 1.
	restartInterval int
	buf             []byte
	restarts        []uint32
	// sinceRestart counts the entries added since the last restart point.
	sinceRestart int
	numEntries   int
	lastKey      []byte
}

func (w *blockWriter) add(key, value []byte) {
	shared := 0
	if w.sinceRestart == w.restartInterval || w.numEntries == 0 {
		w.restarts = append(w.restarts, uint32(len(w.buf)))
		w.sinceRestart = 0
	} else {
		n := min(len(key), len(w.lastKey))
		for shared < n && key[shared] == w.lastKey[shared] {
			shared++
		}
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(key)-shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(value)))
	w.buf = append(w.buf, key[shared:]...)
	w.buf = append(w.buf, value...)
	w.lastKey = append(w.lastKey[:0], key...)
	w.sinceRestart++
	w.numEntries++
}

// entrySize returns an upper bound of the bytes add(key, value) would add.
func entrySize(key, value []byte) int {
	return 3*binary.MaxVarintLen32 + len(key) + len(value) + 4
}

func (w *blockWriter) empty() bool { return w.numEntries == 0 }

// estimatedSize returns the size finish would return now.
func (w *blockWriter) estimatedSize() int { return len(w.buf) + 4*len(w.restarts) + 4 }

// finish appends the restart array and returns the block. The result is
// valid until the next reset.
func (w *blockWriter) finish() []byte {
	for _, r := range w.restarts {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, r)
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(w.restarts)))
	return w.buf
}

func (w *blockWriter) reset() {
	w.buf = w.buf[:0]
	w.restarts = w.restarts[:0]
	w.sinceRestart = 0
	w.numEntries = 0
	w.lastKey = w.lastKey[:0]
}
