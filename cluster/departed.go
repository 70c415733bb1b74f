package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Names inside Config.DataDir owned by this file (see doc.go, "Data
// directory").
const (
	incarnationFileName = "incarnation"
	departedFileName    = "departed"
)

// maxDeparted bounds the departure records a node keeps: past it, the record
// with the smallest incarnation (the oldest run) is dropped. Every replica
// applies the same records in the same order, so they drop the same one.
const maxDeparted = 1024

// departureMagic starts the Extensions of a departure record entry (see
// doc.go, "Departed servers"). Its Data is empty.
var departureMagic = []byte("cairn.departed\x00")

// encodeDeparture returns the Extensions of a departure record:
//
//	+------------------+-----------------+----------+---------------------+
//	| "cairn.departed" | uvarint len(ID) | ID bytes | uvarint incarnation |
//	| 0x00 (15 bytes)  |                 |          |                     |
//	+------------------+-----------------+----------+---------------------+
func encodeDeparture(id string, incarnation uint64) []byte {
	b := slices.Clip(departureMagic)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	return binary.AppendUvarint(b, incarnation)
}

// decodeDeparture parses the Extensions of an entry; ok is false if they are
// not a departure record.
func decodeDeparture(ext []byte) (id string, incarnation uint64, ok bool) {
	rest, found := bytes.CutPrefix(ext, departureMagic)
	if !found {
		return "", 0, false
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return "", 0, false
	}
	rest = rest[k:]
	id, rest = string(rest[:n]), rest[n:]
	incarnation, k = binary.Uvarint(rest)
	if k <= 0 || id == "" {
		return "", 0, false
	}
	return id, incarnation, true
}

// departedSet is this node's copy of the replicated departure records:
// server ID -> the incarnation it left with. The FSM wrapper fills it as
// record entries apply; it is also kept in DataDir/departed, because the
// engine's snapshots do not carry it (see doc.go).
type departedSet struct {
	path string // "" keeps no file (a node started without one)

	mu struct {
		sync.Mutex
		m map[string]uint64
	}
}

// loadDeparted reads the records kept in dir.
func loadDeparted(dir string) (*departedSet, error) {
	d := &departedSet{path: filepath.Join(dir, departedFileName)}
	d.mu.m = map[string]uint64{}
	b, err := os.ReadFile(d.path)
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: departure records: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		id, v, ok := strings.Cut(line, " ")
		inc, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil || !idPattern.MatchString(id) {
			return nil, fmt.Errorf("cluster: departure records %s: bad line %q", d.path, line)
		}
		d.mu.m[id] = inc
	}
	return d, nil
}

// record notes that id left with incarnation, keeping the larger of two
// records, and rewrites the file if that changed anything. A failure to
// write is returned (and logged by the caller); the record stays in memory.
func (d *departedSet) record(id string, incarnation uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.mu.m[id]; ok && cur >= incarnation {
		return nil
	}
	d.mu.m[id] = incarnation
	for len(d.mu.m) > maxDeparted {
		oldest := ""
		for k, v := range d.mu.m {
			if oldest == "" || v < d.mu.m[oldest] || (v == d.mu.m[oldest] && k < oldest) {
				oldest = k
			}
		}
		delete(d.mu.m, oldest)
	}
	if d.path == "" {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(d.mu.m)) {
		fmt.Fprintf(&b, "%s %d\n", k, d.mu.m[k])
	}
	tmp := d.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("cluster: departure records: %w", err)
	}
	if err := os.Rename(tmp, d.path); err != nil {
		return fmt.Errorf("cluster: departure records: %w", err)
	}
	return nil
}

// get returns the incarnation id left with.
func (d *departedSet) get(id string) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inc, ok := d.mu.m[id]
	return inc, ok
}

// snapshot returns a copy of the records, keyed for membership.Input.
func (d *departedSet) snapshot() map[raft.ServerID]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[raft.ServerID]uint64, len(d.mu.m))
	for k, v := range d.mu.m {
		out[raft.ServerID(k)] = v
	}
	return out
}

// nextIncarnation returns this run's incarnation: the wall clock in
// milliseconds, or one more than the last run's if the clock is behind it,
// and records it in dir.
func nextIncarnation(dir string, now time.Time) (uint64, error) {
	name := filepath.Join(dir, incarnationFileName)
	inc := uint64(max(now.UnixMilli(), 1))
	if b, err := os.ReadFile(name); err == nil {
		if prev, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && prev >= inc {
			inc = prev + 1
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cluster: incarnation: %w", err)
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(inc, 10)+"\n"), 0o644); err != nil {
		return 0, fmt.Errorf("cluster: incarnation: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return 0, fmt.Errorf("cluster: incarnation: %w", err)
	}
	return inc, nil
}

// recordDeparture replicates the departure record of id (leader only) and
// waits until it is committed and applied here.
// A zero incarnation (a node of an older version) holds nothing back and is
// not recorded.
func (n *Node) recordDeparture(ctx context.Context, id string, incarnation uint64) error {
	if cur, ok := n.fsm.departed.get(id); incarnation == 0 || (ok && cur >= incarnation) {
		return nil
	}
	f := n.raft.ApplyLog(raft.Log{Extensions: encodeDeparture(id, incarnation)}, n.cfg.ApplyTimeout)
	if err := n.waitRaft(ctx, f); err != nil {
		return fmt.Errorf("cluster: recording the departure of %s: %w", id, err)
	}
	n.log.Info("cluster: recorded departure", "server", id, "incarnation", incarnation)
	return nil
}
