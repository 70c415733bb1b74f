// Package version keeps track of which SST files make up the LSM: file
// metadata, version edits, versions, the manifest that logs the edits, and the
// file-location hash of each version.
//
// # Versions
//
// A Version is an immutable set of files per level (NumLevels = 7). L0 files
// may overlap and are ordered oldest first, newest last, by (LargestSeq,
// SmallestSeq, FileNum). L1+ files are ordered by smallest key and do not
// overlap in user-key space. Versions are reference counted: the VersionSet
// holds one reference on the current version, and every reader (Get,
// iterator, compaction) pins the version it reads. Each version in turn holds
// one reference on each of its files; when a version's last reference goes
// (Version.Unref, which needs no DB mutex), its files drop a reference, and a
// file whose count reaches zero is obsolete: VersionSet.ObsoleteFiles hands it
// to the DB for deletion.
//
// # The file-location hash
//
// Each version maps every file number to its (level, position), so that
// "is file n in this version, and where" costs O(1) instead of a scan of every
// level: LogAndApply uses it to validate deletions and moves, and compaction
// and ingestion can use it through Version.FileLocation and Version.File.
//
// Building that map is O(files). Following RocksDB (commit 0cc0543893,
// "Build the file location hash outside the DB mutex"), it is not built while
// the new version's levels are assembled, which happens under the DB mutex,
// but afterwards, by Version.PrepareForInstall, with the mutex released —
// LogAndApply does it while it is writing the manifest anyway — and into a map
// created with make(map, files), so that it never grows or rehashes. Only then
// is the version installed under the mutex. With 10,000 files this cuts the
// DB mutex hold time of a version change by about 10x (0.76 ms to 0.08 ms,
// median of 5 runs on a 2-core machine): see BenchmarkInstallVersion10kFiles
// and Options.BuildHashUnderLock. What remains under the mutex is copying the
// changed levels' pointer slices.
//
// # LogAndApply
//
//	mu held:   wait for the manifest writer flag; set the edit's counters;
//	           build the new version's levels (copies of pointer slices,
//	           untouched levels shared); validate.
//	mu free:   take the new version's file references; append the edit to the
//	           manifest (or write a new manifest and switch CURRENT); sync;
//	           build the file-location hash.
//	mu held:   install the version as current; release the writer flag.
//	mu free:   drop the previous version's reference.
//
// Lock order: DB mutex, then the manifest writer flag (a condition variable
// on the DB mutex), then the version list's leaf mutex.
//
// A failed manifest write or sync poisons the VersionSet: the version is not
// installed, and every later LogAndApply returns the error, because the edit
// may or may not have reached the disk. The DB must be reopened.
//
// # Files
//
// CURRENT holds the name of the live manifest and a newline, for example
// "MANIFEST-000007\n". It is replaced atomically: the name is written to
// NNNNNN.dbtmp, synced, renamed over CURRENT, and the directory synced.
//
// A manifest (MANIFEST-NNNNNN) is a sequence of records in the format of
// package record (the WAL's format), one encoded VersionEdit per record. Its
// first record is a snapshot: an edit that adds every file of the version and
// sets every counter, so a manifest never depends on an older one. Create
// writes MANIFEST-000001; Load replays the manifest CURRENT names and then
// starts a new one with a snapshot of what it recovered; LogAndApply rolls to a
// new manifest once the current one exceeds Options.MaxManifestFileSize. A
// torn record at the end of a manifest (a crash during an append that was
// never acknowledged) ends the replay; any other damage fails Load with a
// corruption error. Old manifests are reported by ObsoleteManifests; a DB
// should also delete, when it opens, any manifest other than
// ManifestFileNum() (left behind by a failed roll).
//
// # Version edit encoding
//
// An edit is a sequence of fields, each a uvarint tag followed by a payload.
// Integers are uvarints; byte strings are a uvarint length then the bytes;
// keys are encoded internal keys (user key + 8-byte trailer).
//
//	edit           := field*
//	field          := tag(uvarint) payload
//
//	tag  name             payload
//	---  ---------------  ------------------------------------------------
//	  1  comparer name    len | name bytes                       (at most once)
//	  2  log number       uvarint                                (at most once)
//	  3  next file num    uvarint                                (at most once)
//	  4  last seq         uvarint                                (at most once)
//	  5  compact pointer  level | len | internal key
//	  6  deleted file     level | file num
//	  7  new file         see below
//	0x2001  WAL synced    len | WAL num | synced size [| later fields]
//	                                                (at most once per WAL)
//	0x2002  blob settled  len | file num | settled (1 byte: 0 or 1) [| later fields]
//	                                                (at most once per file)
//	bit 13 set            len | bytes: safe to ignore (forward compatibility)
//	any other tag         corruption
//
// A new file's payload:
//
//	+-------+----------+------+-------------------+------------------+
//	| level | file num | size | len | smallest key | len | largest key |
//	+-------+----------+------+-------------------+------------------+
//	+--------------+-------------+-------------+---------------+---------------------+
//	| smallest seq | largest seq | num entries | num deletions | num range deletions |
//	+--------------+-------------+-------------+---------------+---------------------+
//
// A WAL synced field (0x2001, encoded as the uvarint bytes 0x81 0x40) says
// that WAL "WAL num" was durable up to "synced size" bytes when the edit was
// written. Its payload is length-prefixed; this version reads the two
// uvarints and skips any bytes after them, which a later version may use.
// For example WAL 5 synced at 300 bytes is
//
//	81 40 | 03 | 05 | ac 02
//	 tag    len  num  size
//
// Fields appear in the order ComparerName, LogNumber, NextFileNum, LastSeq,
// compact pointers, deleted files (by level, then file number), new files,
// WAL synced sizes; readers accept any order. Zero (or an empty name) means absent and is not
// written. A level must be below NumLevels, a file number non-zero, a key a
// valid internal key, and a file's smallest key and sequence number no larger
// than its largest; the same deleted file may not appear twice.
//
// Blob files (key-value separation, lsm/blob) have three fields, each a
// sequence of uvarints:
//
//	new blob file (8):     | file num | size | record count | record bytes |
//	deleted blob file (9): | file num |
//	blob garbage (10):     | file num | garbage count | garbage bytes |
//
// Garbage adds to what was recorded before; a file whose garbage count
// reaches its record count leaves the version (no table references it any
// more), and garbage for, or the deletion of, a file no longer in the
// version is ignored. These
// tags are deliberately outside the safe-to-ignore range: a version that
// does not know them must refuse the manifest, since skipping them would
// open tables whose values live in files it does not track.
//
// A blob settled field (0x2002, the uvarint bytes 0x82 0x40) sets (0) or
// clears (1) a blob file's Unsettled mark, after the edit's new blob files
// and before its garbage: blob GC adds its output files unsettled and
// settles them once it knows which of their records an index took (see
// BlobFileMetadata.Unsettled). It is safe to ignore: a reader that skips
// it treats every record of an unsettled file as live, which loses space,
// never values. File 12 marked unsettled is
//
//	82 40 | 02 | 0c | 00
//	 tag    len  num  settled
//
// Tags with bit 13 set (tag&0x2000 != 0) are always followed by a length and
// are skipped by readers that do not know them: a future version adds
// optional information (which older readers may safely lose) under such
// tags. Information an older reader must not ignore gets an ordinary new tag,
// which older readers reject as corruption rather than misread.
//
// # Tracked WALs
//
// Following RocksDB's track_and_verify_wals_in_manifest, the manifest
// records how far each live WAL is known to be durable (WALSynced: the DB
// records a WAL's size when it closes it and at some of its syncs), so
// that recovery can tell a torn tail (damage past the recorded size, which a
// crash can leave) from corruption (damage below it, or the WAL missing or
// shorter, which nothing legitimate produces). A later record for a WAL
// supersedes an earlier one and may not record a smaller size. WAL deletion
// is recorded by the log number, which plays RocksDB's WalDeletion role:
// WALs numbered below it are obsolete (their contents are all in tables),
// may be deleted, and what was recorded of them is forgotten
// (VersionSet.WALsSynced lists only WALs at or above it). Every new
// manifest's snapshot edit repeats the recorded sizes of the WALs that are
// not obsolete.
//
// Compatibility: the field is in the safe-to-ignore range. A manifest
// written before it existed has no such field and loads as before (its WALs
// are simply untracked); a version that does not know it skips it and
// loses only the check, and the next manifest it writes drops the sizes,
// after which the DB's WALs are untracked again until they are next closed
// or synced.
package version
