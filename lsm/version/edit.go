package version

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Tags of the fields of an encoded VersionEdit (see doc.go). Their values are
// part of the manifest format; never renumber them. Numbers 1-7 follow
// LevelDB's, but the payloads of tagNewFile differ.
const (
	tagComparerName   = 1
	tagLogNumber      = 2
	tagNextFileNum    = 3
	tagLastSeq        = 4
	tagCompactPointer = 5
	tagDeletedFile    = 6
	tagNewFile        = 7

	// Blob-file fields (key-value separation). They are deliberately NOT
	// in the safe-to-ignore range: a reader that skipped them would open a
	// DB whose tables point into blob files it does not know, and lose
	// values. An older version refuses such a manifest as corrupt instead.
	tagNewBlobFile     = 8
	tagDeletedBlobFile = 9
	tagBlobGarbage     = 10

	// tagSafeIgnoreMask marks tags that a reader may skip when it does not
	// know them: such a tag is always followed by a uvarint length and that
	// many bytes. A future version adds optional fields with tags in this
	// range (tag&tagSafeIgnoreMask != 0) so that older readers keep working;
	// any other unknown tag makes the edit corrupt.
	tagSafeIgnoreMask = 1 << 13

	// tagWALSynced records that a WAL was synced (or closed) at a size
	// (RocksDB's WalAddition). It is in the safe-to-ignore range: a reader
	// that does not know it loses only the extra check at recovery, never
	// data, so manifests that carry it still open with older versions.
	tagWALSynced = tagSafeIgnoreMask | 1

	// tagBlobSettled marks a blob file unsettled or settled (see
	// BlobFileMetadata.Unsettled). Safe to ignore: a reader that skips it
	// only fails to reclaim an unsettled file's unreferenced records.
	tagBlobSettled = tagSafeIgnoreMask | 2
)

// maxEncodedLen bounds the length prefix of any byte-string field. A manifest
// record never legitimately carries a key or name this long; refusing it
// early keeps a corrupt length from being taken at face value.
const maxEncodedLen = 1 << 28

// DeletedFile names a file that an edit removes from a level.
type DeletedFile struct {
	Level   int
	FileNum base.FileNum
}

// NewFile is a file that an edit adds to a level.
//
// A file moved between levels by one edit (deleted from one level and added
// to another) must be added with the same *FileMetadata that the current
// version holds: reference counts live in the FileMetadata.
type NewFile struct {
	Level int
	Meta  *FileMetadata
}

// CompactPointer records where the next compaction of a level should start
// (LevelDB's round-robin compaction). Key is an encoded internal key.
type CompactPointer struct {
	Level int
	Key   []byte
}

// WALSynced records that WAL Num was durable up to SyncedSize bytes: every
// byte below that offset was synced, so recovery must find the WAL and find
// those bytes intact; damage there is corruption, not a torn tail. A later
// record for the same WAL supersedes an earlier one and never gives a
// smaller size. A WAL numbered below the set's log number is obsolete, and
// what was recorded of it is forgotten (the log number is this format's
// record of WAL deletion, RocksDB's WalDeletion).
type WALSynced struct {
	Num        base.FileNum
	SyncedSize uint64
}

// VersionEdit is the difference between two versions plus the bookkeeping of
// the version set at the time it was written. Edits are the records of the
// manifest; replaying them in order from an empty version yields the current
// version.
//
// Zero means "absent" for LogNumber, NextFileNum and LastSeq, and an empty
// ComparerName means none was recorded: file numbers start at 1, and a
// LastSeq of zero can only ever describe an empty DB.
type VersionEdit struct {
	// ComparerName names the user-key order of the DB. Recorded in the
	// first edit of every manifest; Load refuses a DB whose name differs.
	ComparerName string
	// LogNumber is the number of the oldest WAL whose contents are not yet
	// all in SSTs: WALs numbered below it are obsolete.
	LogNumber base.FileNum
	// NextFileNum is the next file number to allocate.
	NextFileNum base.FileNum
	// LastSeq is the last sequence number used.
	LastSeq base.SeqNum
	// CompactPointers are optional (LevelDB-style round-robin compaction).
	CompactPointers []CompactPointer
	// DeletedFiles are removed before NewFiles are added.
	DeletedFiles map[DeletedFile]struct{}
	NewFiles     []NewFile
	// WALsSynced are synced sizes of WALs, at most one per WAL.
	WALsSynced []WALSynced
	// Blob files: deletions apply first, then additions, then garbage.
	// A file whose garbage count reaches its record count leaves the
	// version without an explicit deletion.
	DeletedBlobFiles []base.FileNum
	NewBlobFiles     []*BlobFileMetadata
	BlobGarbage      []BlobGarbage
	// UnsettledBlobFiles and SettledBlobFiles set and clear the files'
	// Unsettled mark; they apply after NewBlobFiles, before BlobGarbage.
	UnsettledBlobFiles, SettledBlobFiles []base.FileNum
}

// addBlobSnapshot records blobs as new files plus their garbage: the blob
// part of a manifest's first edit.
func (e *VersionEdit) addBlobSnapshot(blobs map[base.FileNum]*BlobFileMetadata) {
	nums := make([]base.FileNum, 0, len(blobs))
	for n := range blobs {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for _, n := range nums {
		m := *blobs[n]
		g := BlobGarbage{FileNum: n, Count: m.GarbageCount, Bytes: m.GarbageBytes}
		m.GarbageCount, m.GarbageBytes, m.refs = 0, 0, nil
		if m.Unsettled {
			m.Unsettled = false
			e.UnsettledBlobFiles = append(e.UnsettledBlobFiles, n)
		}
		e.NewBlobFiles = append(e.NewBlobFiles, &m)
		if g.Count != 0 || g.Bytes != 0 {
			e.BlobGarbage = append(e.BlobGarbage, g)
		}
	}
}

// AddBlobSnapshot records every blob file of v, with its garbage, as an
// edit that recreates them from nothing (a checkpoint's manifest).
func (e *VersionEdit) AddBlobSnapshot(v *Version) { e.addBlobSnapshot(v.BlobFiles) }

// DeleteFile records the removal of file n from level.
func (e *VersionEdit) DeleteFile(level int, n base.FileNum) {
	if e.DeletedFiles == nil {
		e.DeletedFiles = make(map[DeletedFile]struct{})
	}
	e.DeletedFiles[DeletedFile{Level: level, FileNum: n}] = struct{}{}
}

// AddFile records the addition of meta to level.
func (e *VersionEdit) AddFile(level int, meta *FileMetadata) {
	e.NewFiles = append(e.NewFiles, NewFile{Level: level, Meta: meta})
}

// sortedDeletedFiles returns the deleted files by level, then file number.
func (e *VersionEdit) sortedDeletedFiles() []DeletedFile {
	out := make([]DeletedFile, 0, len(e.DeletedFiles))
	for d := range e.DeletedFiles {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b DeletedFile) int {
		if c := cmp.Compare(a.Level, b.Level); c != 0 {
			return c
		}
		return cmp.Compare(a.FileNum, b.FileNum)
	})
	return out
}

// Encode returns the edit's encoding (see doc.go). The encoding is
// deterministic: deleted files are written in (level, file number) order.
func (e *VersionEdit) Encode() []byte {
	return e.AppendEncoded(nil)
}

// AppendEncoded appends the edit's encoding to dst.
func (e *VersionEdit) AppendEncoded(dst []byte) []byte {
	if e.ComparerName != "" {
		dst = binary.AppendUvarint(dst, tagComparerName)
		dst = appendBytes(dst, []byte(e.ComparerName))
	}
	if e.LogNumber != 0 {
		dst = binary.AppendUvarint(dst, tagLogNumber)
		dst = binary.AppendUvarint(dst, uint64(e.LogNumber))
	}
	if e.NextFileNum != 0 {
		dst = binary.AppendUvarint(dst, tagNextFileNum)
		dst = binary.AppendUvarint(dst, uint64(e.NextFileNum))
	}
	if e.LastSeq != 0 {
		dst = binary.AppendUvarint(dst, tagLastSeq)
		dst = binary.AppendUvarint(dst, uint64(e.LastSeq))
	}
	for _, cp := range e.CompactPointers {
		dst = binary.AppendUvarint(dst, tagCompactPointer)
		dst = binary.AppendUvarint(dst, uint64(cp.Level))
		dst = appendBytes(dst, cp.Key)
	}
	for _, d := range e.sortedDeletedFiles() {
		dst = binary.AppendUvarint(dst, tagDeletedFile)
		dst = binary.AppendUvarint(dst, uint64(d.Level))
		dst = binary.AppendUvarint(dst, uint64(d.FileNum))
	}
	for _, nf := range e.NewFiles {
		m := nf.Meta
		dst = binary.AppendUvarint(dst, tagNewFile)
		dst = binary.AppendUvarint(dst, uint64(nf.Level))
		dst = binary.AppendUvarint(dst, uint64(m.FileNum))
		dst = binary.AppendUvarint(dst, m.Size)
		dst = appendBytes(dst, m.Smallest)
		dst = appendBytes(dst, m.Largest)
		dst = binary.AppendUvarint(dst, uint64(m.SmallestSeq))
		dst = binary.AppendUvarint(dst, uint64(m.LargestSeq))
		dst = binary.AppendUvarint(dst, m.NumEntries)
		dst = binary.AppendUvarint(dst, m.NumDeletions)
		dst = binary.AppendUvarint(dst, m.NumRangeDeletions)
	}
	for _, n := range e.DeletedBlobFiles {
		dst = binary.AppendUvarint(dst, tagDeletedBlobFile)
		dst = binary.AppendUvarint(dst, uint64(n))
	}
	for _, m := range e.NewBlobFiles {
		dst = binary.AppendUvarint(dst, tagNewBlobFile)
		dst = binary.AppendUvarint(dst, uint64(m.FileNum))
		dst = binary.AppendUvarint(dst, m.Size)
		dst = binary.AppendUvarint(dst, m.Count)
		dst = binary.AppendUvarint(dst, m.RecordBytes)
	}
	for _, g := range e.BlobGarbage {
		dst = binary.AppendUvarint(dst, tagBlobGarbage)
		dst = binary.AppendUvarint(dst, uint64(g.FileNum))
		dst = binary.AppendUvarint(dst, g.Count)
		dst = binary.AppendUvarint(dst, g.Bytes)
	}
	for _, n := range e.UnsettledBlobFiles {
		dst = appendBlobSettled(dst, n, false)
	}
	for _, n := range e.SettledBlobFiles {
		dst = appendBlobSettled(dst, n, true)
	}
	for _, w := range e.WALsSynced {
		var payload [2 * binary.MaxVarintLen64]byte
		p := binary.AppendUvarint(payload[:0], uint64(w.Num))
		p = binary.AppendUvarint(p, w.SyncedSize)
		dst = binary.AppendUvarint(dst, tagWALSynced)
		dst = appendBytes(dst, p)
	}
	return dst
}

// appendBlobSettled appends a tagBlobSettled field: its payload is the
// file number and one byte, 1 for settled, 0 for unsettled.
func appendBlobSettled(dst []byte, n base.FileNum, settled bool) []byte {
	var payload [binary.MaxVarintLen64 + 1]byte
	p := binary.AppendUvarint(payload[:0], uint64(n))
	if settled {
		p = append(p, 1)
	} else {
		p = append(p, 0)
	}
	dst = binary.AppendUvarint(dst, tagBlobSettled)
	return appendBytes(dst, p)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Decode replaces e's contents with the edit encoded in b. It never panics
// and never keeps a reference to b. Malformed input — truncated fields,
// unknown tags outside the safe-to-ignore range, a scalar field given twice,
// a level out of range, a zero file number, invalid keys — returns an error
// for which base.IsCorruption is true.
func (e *VersionEdit) Decode(b []byte) error {
	*e = VersionEdit{}
	if err := e.decode(b); err != nil {
		*e = VersionEdit{}
		return err
	}
	return nil
}

func (e *VersionEdit) decode(b []byte) error {
	d := decoder{b: b}
	var seen uint64 // bit per scalar tag, to refuse duplicates
	scalar := func(tag uint64) error {
		if seen&(1<<tag) != 0 {
			return base.CorruptionErrorf("version: edit: duplicate tag %d", tag)
		}
		seen |= 1 << tag
		return nil
	}
	for len(d.b) > 0 {
		tag := d.uvarint("tag")
		if d.err != nil {
			break
		}
		switch tag {
		case tagComparerName:
			if err := scalar(tag); err != nil {
				return err
			}
			name := d.bytes("comparer name")
			if d.err == nil && len(name) == 0 {
				d.fail("empty comparer name")
			}
			e.ComparerName = string(name)

		case tagLogNumber:
			if err := scalar(tag); err != nil {
				return err
			}
			e.LogNumber = d.fileNum("log number")

		case tagNextFileNum:
			if err := scalar(tag); err != nil {
				return err
			}
			e.NextFileNum = d.fileNum("next file number")

		case tagLastSeq:
			if err := scalar(tag); err != nil {
				return err
			}
			e.LastSeq = d.seqNum("last sequence number")

		case tagCompactPointer:
			level := d.level()
			key := d.bytes("compact pointer")
			if d.err == nil && !base.ValidInternalKey(key) {
				d.fail(fmt.Sprintf("invalid compact pointer key %q", truncateForMessage(key)))
			}
			if d.err == nil {
				e.CompactPointers = append(e.CompactPointers, CompactPointer{Level: level, Key: slices.Clone(key)})
			}

		case tagDeletedFile:
			df := DeletedFile{Level: d.level(), FileNum: d.fileNum("deleted file number")}
			if d.err != nil {
				break
			}
			if _, dup := e.DeletedFiles[df]; dup {
				d.fail(fmt.Sprintf("file %s deleted twice from L%d", df.FileNum, df.Level))
				break
			}
			e.DeleteFile(df.Level, df.FileNum)

		case tagNewFile:
			level := d.level()
			m := &FileMetadata{}
			m.FileNum = d.fileNum("new file number")
			m.Size = d.uvarint("file size")
			m.Smallest = slices.Clone(d.bytes("smallest key"))
			m.Largest = slices.Clone(d.bytes("largest key"))
			m.SmallestSeq = d.seqNum("smallest sequence number")
			m.LargestSeq = d.seqNum("largest sequence number")
			m.NumEntries = d.uvarint("entry count")
			m.NumDeletions = d.uvarint("deletion count")
			m.NumRangeDeletions = d.uvarint("range deletion count")
			if d.err != nil {
				break
			}
			if err := m.validate(); err != nil {
				return base.MarkCorruption(err)
			}
			e.AddFile(level, m)

		case tagDeletedBlobFile:
			n := d.fileNum("deleted blob file number")
			if d.err == nil && slices.Contains(e.DeletedBlobFiles, n) {
				d.fail(fmt.Sprintf("blob file %s deleted twice", n))
			}
			if d.err == nil {
				e.DeletedBlobFiles = append(e.DeletedBlobFiles, n)
			}

		case tagNewBlobFile:
			m := &BlobFileMetadata{}
			m.FileNum = d.fileNum("new blob file number")
			m.Size = d.uvarint("blob file size")
			m.Count = d.uvarint("blob record count")
			m.RecordBytes = d.uvarint("blob record bytes")
			if d.err != nil {
				break
			}
			if err := m.validate(); err != nil {
				return base.MarkCorruption(err)
			}
			e.NewBlobFiles = append(e.NewBlobFiles, m)

		case tagBlobGarbage:
			g := BlobGarbage{FileNum: d.fileNum("blob garbage file number"), Count: d.uvarint("blob garbage count"), Bytes: d.uvarint("blob garbage bytes")}
			if d.err == nil {
				e.BlobGarbage = append(e.BlobGarbage, g)
			}

		case tagBlobSettled:
			// Length-prefixed like every safe-to-ignore field; bytes after
			// the two this version knows are skipped.
			p := decoder{b: d.bytes("blob settled mark")}
			if d.err != nil {
				break
			}
			n := p.fileNum("blob settled file number")
			if p.err != nil {
				return p.err
			}
			if len(p.b) == 0 || p.b[0] > 1 {
				return base.CorruptionErrorf("version: edit: bad settled mark for blob file %s", n)
			}
			if slices.Contains(e.UnsettledBlobFiles, n) || slices.Contains(e.SettledBlobFiles, n) {
				return base.CorruptionErrorf("version: edit: blob file %s marked twice", n)
			}
			if p.b[0] == 1 {
				e.SettledBlobFiles = append(e.SettledBlobFiles, n)
			} else {
				e.UnsettledBlobFiles = append(e.UnsettledBlobFiles, n)
			}

		case tagWALSynced:
			// The payload is length-prefixed like every safe-to-ignore
			// field; bytes after the fields this version knows are room
			// for later ones and are skipped.
			p := decoder{b: d.bytes("WAL synced size")}
			if d.err != nil {
				break
			}
			w := WALSynced{Num: p.fileNum("WAL number"), SyncedSize: p.uvarint("WAL synced size")}
			if p.err != nil {
				return p.err
			}
			for _, x := range e.WALsSynced {
				if x.Num == w.Num {
					return base.CorruptionErrorf("version: edit: WAL %s synced size recorded twice", w.Num)
				}
			}
			e.WALsSynced = append(e.WALsSynced, w)

		default:
			if tag&tagSafeIgnoreMask == 0 {
				return base.CorruptionErrorf("version: edit: unknown tag %d", tag)
			}
			d.bytes("ignorable field")
		}
		if d.err != nil {
			break
		}
	}
	return d.err
}

// decoder reads the fields of an encoded edit. The first failure sticks in
// err; later reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = base.CorruptionErrorf("version: edit: %s", what)
	}
	d.b = nil
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > maxEncodedLen || n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%s length %d exceeds the %d remaining bytes", what, n, len(d.b)))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) level() int {
	v := d.uvarint("level")
	if d.err == nil && v >= NumLevels {
		d.fail(fmt.Sprintf("level %d out of range", v))
		return 0
	}
	return int(v)
}

func (d *decoder) fileNum(what string) base.FileNum {
	v := d.uvarint(what)
	if d.err == nil && v == 0 {
		d.fail("zero " + what)
	}
	return base.FileNum(v)
}

func (d *decoder) seqNum(what string) base.SeqNum {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(base.SeqNumMax) {
		d.fail(fmt.Sprintf("%s %d out of range", what, v))
		return 0
	}
	return base.SeqNum(v)
}

// String renders the edit for tests and debugging, one field per line.
func (e *VersionEdit) String() string {
	var sb strings.Builder
	if e.ComparerName != "" {
		fmt.Fprintf(&sb, "comparer: %s\n", e.ComparerName)
	}
	if e.LogNumber != 0 {
		fmt.Fprintf(&sb, "log-num: %d\n", e.LogNumber)
	}
	if e.NextFileNum != 0 {
		fmt.Fprintf(&sb, "next-file-num: %d\n", e.NextFileNum)
	}
	if e.LastSeq != 0 {
		fmt.Fprintf(&sb, "last-seq: %d\n", e.LastSeq)
	}
	for _, cp := range e.CompactPointers {
		fmt.Fprintf(&sb, "compact-pointer: L%d %s\n", cp.Level, formatKey(cp.Key))
	}
	for _, d := range e.sortedDeletedFiles() {
		fmt.Fprintf(&sb, "del-file: L%d %s\n", d.Level, d.FileNum)
	}
	for _, nf := range e.NewFiles {
		fmt.Fprintf(&sb, "add-file: L%d %s seqs=[%d-%d] size=%d\n",
			nf.Level, nf.Meta, nf.Meta.SmallestSeq, nf.Meta.LargestSeq, nf.Meta.Size)
	}
	for _, n := range e.DeletedBlobFiles {
		fmt.Fprintf(&sb, "del-blob: %s\n", n)
	}
	for _, m := range e.NewBlobFiles {
		fmt.Fprintf(&sb, "add-blob: %s\n", m)
	}
	for _, g := range e.BlobGarbage {
		fmt.Fprintf(&sb, "blob-garbage: %s count=%d bytes=%d\n", g.FileNum, g.Count, g.Bytes)
	}
	for _, n := range e.UnsettledBlobFiles {
		fmt.Fprintf(&sb, "blob-unsettled: %s\n", n)
	}
	for _, n := range e.SettledBlobFiles {
		fmt.Fprintf(&sb, "blob-settled: %s\n", n)
	}
	for _, w := range e.WALsSynced {
		fmt.Fprintf(&sb, "wal-synced: %s size=%d\n", w.Num, w.SyncedSize)
	}
	return sb.String()
}
