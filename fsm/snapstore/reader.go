package snapstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// reader streams a stored snapshot: its head, then each file in manifest
// order, opening a file only when the stream reaches it (a local Restore
// reads the head alone). The receiver checks sizes and checksums; the
// reader checks that no file is shorter or longer than its manifest says.
type reader struct {
	fs      vfs.FS
	dir     string
	head    *bytes.Reader
	files   []*fsmpb.SnapshotFile
	next    int      // index of the next file to open
	cur     vfs.File // the file being read
	curLeft int64    // bytes of cur still to read
	release func()
	closed  bool
}

func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("snapstore: read from a closed snapshot")
	}
	if r.head.Len() > 0 {
		return r.head.Read(p)
	}
	for {
		if r.cur == nil {
			if r.next == len(r.files) {
				return 0, io.EOF
			}
			fi := r.files[r.next]
			f, err := r.fs.Open(filepath.Join(r.dir, fi.Name))
			if err != nil {
				return 0, fmt.Errorf("snapstore: %w", err)
			}
			r.cur, r.curLeft = f, int64(fi.Size)
			r.next++
		}
		if r.curLeft == 0 {
			var one [1]byte
			n, err := r.cur.Read(one[:])
			name := r.files[r.next-1].Name
			r.cur.Close()
			r.cur = nil
			if n > 0 {
				return 0, fmt.Errorf("snapstore: snapshot file %s is longer than its manifest says", name)
			}
			if err != nil && err != io.EOF {
				return 0, fmt.Errorf("snapstore: %w", err)
			}
			continue
		}
		if int64(len(p)) > r.curLeft {
			p = p[:r.curLeft]
		}
		n, err := r.cur.Read(p)
		r.curLeft -= int64(n)
		if err == io.EOF && r.curLeft > 0 {
			return n, fmt.Errorf("snapstore: snapshot file %s is shorter than its manifest says", r.files[r.next-1].Name)
		}
		if err != nil && err != io.EOF {
			return n, fmt.Errorf("snapstore: %w", err)
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (r *reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
	}
	r.release()
	return nil
}
