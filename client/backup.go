package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A backup file is a raft snapshot stream of the state machine, byte for
// byte what fsm.Checkpoint.WriteTo writes and fsm.FSM.Restore reads (see
// package fsm, "Snapshots"):
//
//	+------------------+----------------+---------------+----------+------------------+
//	| magic "CAIRNSNP" | version (4B LE)| manifest len  | manifest | crc32c(manifest) |
//	|        8B        |      = 1       |   (4B LE)     | (proto)  |     (4B LE)      |
//	+------------------+----------------+---------------+----------+------------------+
//	| file 0 bytes | file 1 bytes | ... | (end of stream)
//
// The manifest is an fsmpb.SnapshotManifest: the applied raft index and
// term, and per file (in stream order) its name, size and CRC-32C. The
// files form the engine directory of a state machine (lsm.Open accepts
// it). VerifyBackup checks a backup; see the package documentation for
// restoring one.
const (
	backupMagic        = "CAIRNSNP"
	backupVersion      = 1
	backupHeaderLen    = len(backupMagic) + 4 + 4
	maxBackupManifest  = 16 << 20
	maxBackupFileName  = 255
	backupWriteBufSize = 256 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BackupFile is one file of a backup.
type BackupFile struct {
	Name   string
	Size   uint64
	CRC32C uint32
}

// BackupInfo describes a backup.
type BackupInfo struct {
	// NodeID is the node that was copied (empty when read from a file).
	NodeID string
	// AppliedIndex and AppliedTerm are the raft position the backup
	// reflects: every write at or below AppliedIndex is in it, none after.
	AppliedIndex, AppliedTerm uint64
	Files                     []BackupFile
	// Bytes is the size of the backup stream (the file).
	Bytes int64
}

// DataBytes is the total size of the backup's files.
func (b *BackupInfo) DataBytes() uint64 {
	var n uint64
	for _, f := range b.Files {
		n += f.Size
	}
	return n
}

// BackupProgress is reported by Backup WithProgress.
type BackupProgress struct {
	// Bytes of file data received and written so far, of TotalBytes.
	Bytes, TotalBytes uint64
	// Files completed so far, of TotalFiles.
	Files, TotalFiles int
}

// permanent marks an error do must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// GRPCStatus lets toStatus see the wrapped status.
func (p permanent) GRPCStatus() *status.Status { return toStatus(p.err) }

// Backup streams a consistent copy of a node's data to w (the leader's
// when it is known, else any node's, or the one named WithEndpoint), in the
// backup format (a raft snapshot stream; see the package documentation).
// Options: WithEndpoint, WithProgress.
//
// It verifies every file's size and checksum as it arrives; a backup that
// returned no error is complete. The stream is retried if it fails before
// anything was written to w, never after: on error, discard what w holds.
func (c *Client) Backup(ctx context.Context, w io.Writer, opts ...Option) (*BackupInfo, error) {
	const op = "backup"
	o, err := applyOptions(op, kindBackup, opts)
	if err != nil {
		return nil, err
	}
	var info *BackupInfo
	err = c.do(ctx, op, toLeaderNode, o.endpoint, func(ctx context.Context, nc *nodeConn) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := nc.cluster.Backup(ctx, &cairnpb.BackupRequest{})
		if err != nil {
			return err
		}
		bw := &backupWriter{w: bufio.NewWriterSize(w, backupWriteBufSize), progress: o.progress}
		info, err = bw.copy(stream.Recv)
		if err != nil && bw.written > 0 {
			return permanent{err}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// backupWriter turns a Backup stream into a backup file.
type backupWriter struct {
	w        *bufio.Writer
	written  int64 // bytes written to w
	progress func(BackupProgress)
}

func (b *backupWriter) write(p []byte) error {
	n, err := b.w.Write(p)
	b.written += int64(n)
	return err
}

func corrupt(format string, args ...any) error {
	return status.Errorf(codes.DataLoss, "backup stream: "+format, args...)
}

// copy reads the stream with recv until io.EOF and writes the backup.
func (b *backupWriter) copy(recv func() (*cairnpb.BackupResponse, error)) (*BackupInfo, error) {
	msg, err := recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, corrupt("empty")
		}
		return nil, err
	}
	hdr := msg.GetHeader()
	if hdr == nil {
		return nil, corrupt("no header")
	}
	info := &BackupInfo{NodeID: hdr.GetNodeId(), AppliedIndex: hdr.GetAppliedIndex(), AppliedTerm: hdr.GetAppliedTerm()}
	m := &fsmpb.SnapshotManifest{AppliedIndex: hdr.GetAppliedIndex(), AppliedTerm: hdr.GetAppliedTerm()}
	var total uint64
	for _, f := range hdr.GetFiles() {
		if !validFileName(f.GetName()) {
			return nil, corrupt("bad file name %q", f.GetName())
		}
		info.Files = append(info.Files, BackupFile{Name: f.GetName(), Size: f.GetSize(), CRC32C: f.GetCrc32C()})
		m.Files = append(m.Files, &fsmpb.SnapshotFile{Name: f.GetName(), Size: f.GetSize(), Crc32C: f.GetCrc32C()})
		total += f.GetSize()
	}
	manifest, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	head := make([]byte, 0, backupHeaderLen+len(manifest)+4)
	head = append(head, backupMagic...)
	head = binary.LittleEndian.AppendUint32(head, backupVersion)
	head = binary.LittleEndian.AppendUint32(head, uint32(len(manifest)))
	head = append(head, manifest...)
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(manifest, castagnoli))
	if err := b.write(head); err != nil {
		return nil, err
	}

	// Files arrive in order, each file's chunks in order; files of size 0
	// have no chunks.
	cur := 0
	var off uint64
	h := crc32.New(castagnoli)
	var done uint64
	finish := func() error { // completes info.Files[cur]
		f := info.Files[cur]
		if off != f.Size {
			return corrupt("file %s truncated at %d of %d bytes", f.Name, off, f.Size)
		}
		if sum := h.Sum32(); sum != f.CRC32C {
			return corrupt("file %s: checksum %08x, header says %08x", f.Name, sum, f.CRC32C)
		}
		cur++
		off = 0
		h.Reset()
		return nil
	}
	report := func() {
		if b.progress != nil {
			b.progress(BackupProgress{Bytes: done, TotalBytes: total, Files: cur, TotalFiles: len(info.Files)})
		}
	}
	report()
	for {
		msg, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ch := msg.GetChunk()
		if ch == nil {
			return nil, corrupt("a second header")
		}
		fi := int(ch.GetFile())
		for cur < fi && cur < len(info.Files) && off == info.Files[cur].Size {
			if err := finish(); err != nil {
				return nil, err
			}
		}
		if fi != cur || cur >= len(info.Files) {
			return nil, corrupt("chunk of file %d at offset %d, expected file %d", fi, ch.GetOffset(), cur)
		}
		data := ch.GetData()
		if ch.GetOffset() != off || off+uint64(len(data)) > info.Files[cur].Size {
			return nil, corrupt("file %s: chunk of %d bytes at offset %d, expected offset %d of %d bytes",
				info.Files[cur].Name, len(data), ch.GetOffset(), off, info.Files[cur].Size)
		}
		if err := b.write(data); err != nil {
			return nil, err
		}
		h.Write(data)
		off += uint64(len(data))
		done += uint64(len(data))
		report()
	}
	for cur < len(info.Files) {
		if err := finish(); err != nil {
			return nil, err
		}
	}
	if err := b.w.Flush(); err != nil {
		return nil, err
	}
	report()
	info.Bytes = b.written
	return info, nil
}

func validFileName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= maxBackupFileName &&
		filepath.Base(name) == name && !strings.ContainsAny(name, "/\\\x00")
}

// VerifyBackup reads a backup file to its end, checking its header, every
// file's size and checksum, and that nothing follows the last file, and
// describes it. A damaged backup gives an error with code DataLoss.
func VerifyBackup(r io.Reader) (*BackupInfo, error) {
	cr := &countReader{r: bufio.NewReaderSize(r, backupWriteBufSize)}
	head := make([]byte, backupHeaderLen)
	if _, err := io.ReadFull(cr, head); err != nil {
		return nil, truncated("header", err)
	}
	if string(head[:len(backupMagic)]) != backupMagic {
		return nil, corruptFile("not a cairn backup (bad magic %q)", head[:len(backupMagic)])
	}
	if v := binary.LittleEndian.Uint32(head[8:]); v != backupVersion {
		return nil, corruptFile("unknown version %d", v)
	}
	n := binary.LittleEndian.Uint32(head[12:])
	if n > maxBackupManifest {
		return nil, corruptFile("manifest of %d bytes", n)
	}
	buf := make([]byte, n+4)
	if _, err := io.ReadFull(cr, buf); err != nil {
		return nil, truncated("manifest", err)
	}
	if want, got := binary.LittleEndian.Uint32(buf[n:]), crc32.Checksum(buf[:n], castagnoli); want != got {
		return nil, corruptFile("manifest checksum %08x, computed %08x", want, got)
	}
	m := &fsmpb.SnapshotManifest{}
	if err := proto.Unmarshal(buf[:n], m); err != nil {
		return nil, corruptFile("manifest: %v", err)
	}
	info := &BackupInfo{AppliedIndex: m.GetAppliedIndex(), AppliedTerm: m.GetAppliedTerm()}
	var h hash.Hash32 = crc32.New(castagnoli)
	for _, f := range m.GetFiles() {
		if !validFileName(f.GetName()) {
			return nil, corruptFile("bad file name %q", f.GetName())
		}
		h.Reset()
		k, err := io.Copy(h, io.LimitReader(cr, int64(f.GetSize())))
		if err != nil {
			return nil, err
		}
		if uint64(k) != f.GetSize() {
			return nil, corruptFile("truncated in file %s (%d of %d bytes)", f.GetName(), k, f.GetSize())
		}
		if h.Sum32() != f.GetCrc32C() {
			return nil, corruptFile("file %s: checksum %08x, manifest says %08x", f.GetName(), h.Sum32(), f.GetCrc32C())
		}
		info.Files = append(info.Files, BackupFile{Name: f.GetName(), Size: f.GetSize(), CRC32C: f.GetCrc32C()})
	}
	var one [1]byte
	if k, _ := cr.Read(one[:]); k > 0 {
		return nil, corruptFile("bytes after the last file")
	}
	info.Bytes = cr.n
	return info, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func corruptFile(format string, args ...any) error {
	return &Error{Op: "verify backup", Status: status.Newf(codes.DataLoss, format, args...)}
}

func truncated(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptFile("truncated in its %s", what)
	}
	return fmt.Errorf("cairn: verify backup: reading %s: %w", what, err)
}
