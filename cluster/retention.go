package cluster

import (
	"errors"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Raft log retention in bytes.
//
// hashicorp/raft bounds the log in entries: a snapshot is taken once
// SnapshotThreshold entries were written since the last one (checked every
// SnapshotInterval), and the log compaction that follows keeps the last
// TrailingLogs entries. With 64 KiB values the defaults (8,192 and 10,240)
// kept up to 1.2 GiB of log on every node (a 2 GiB engine took 1.35× its
// size on disk right after a snapshot, 2× before raft's first check),
// whereas with 100-byte values they keep 2 MiB. Config.SnapshotThresholdBytes
// and Config.TrailingLogBytes bound the same two quantities in bytes; the
// entry settings stay in force as upper bounds, so a workload of small
// entries behaves exactly as before.
//
// How: logBytes wraps the log store (under raft's log cache) and keeps the
// cumulative size of the entries it stores, as marks (index, bytes
// through index) at the end of every StoreLogs batch; log compaction
// (DeleteRange) drops the marks it covers. The size of any range of the
// log is then a difference of two interpolated marks. The node's retention
// loop (retainLogLoop), every retentionInterval:
//
//   - asks raft for a snapshot (raft.Snapshot, as `cairn snapshot save`
//     does) once the entries applied since the latest snapshot hold
//     SnapshotThresholdBytes;
//   - sets raft's TrailingLogs (raft.ReloadConfig) to the number of the
//     log's most recent entries that hold TrailingLogBytes, plus, on the
//     leader, how far the slowest live follower is behind (below), never
//     more than Config.TrailingLogs and never fewer than
//     minTrailingLogs (or Config.TrailingLogs if lower). raft reads
//     TrailingLogs when it compacts the log after a snapshot, whoever
//     asked for the snapshot.
//
// So the log keeps about TrailingLogBytes after a snapshot and grows by
// SnapshotThresholdBytes (plus what is written while the snapshot runs)
// before the next: with the defaults, 64 + 128 MiB, and raft-wal adds up to
// two 16 MiB segments (compacted entries at the head, the preallocated
// end of the tail). With 64 KiB values and 2 GiB of data the raft
// directory peaked at ~230 MiB against 2 GiB before (TestRetentionDiskRatio;
// the figures are in bench/RESULTS.md).
//
// Why not set SnapshotThreshold with ReloadConfig too: raft checks it only
// every SnapshotInterval (2-4 minutes by default), and at 45 MB/s of writes
// that is 5-10 GiB of log; the loop's check is a few comparisons every
// 250ms. Why not only the snapshot trigger: raft compacts down to
// TrailingLogs entries whatever started the snapshot, and 10,240 entries
// of 64 KiB are 640 MiB. Why the floor of minTrailingLogs entries: an
// estimate (after a restart, below) may be off, and a log compacted to a
// handful of entries sends every follower that missed one append a
// snapshot, which copies the whole engine; with values of the default
// MaxValueSize (16 MiB) the floor keeps 256 MiB.
//
// The trade-off: a follower that falls behind by more than the trailing
// bytes at the moment of a snapshot gets a snapshot instead of log
// entries. With 64 KiB values 64 MiB is 1,024 entries, one AppendEntries
// batch, a couple of seconds of writes at full speed, against 10,240
// entries before. So on the leader a live follower (one that answered
// within followerLiveWindow) extends the trailing entries by its lag:
// compaction keeps what it still needs, up to Config.TrailingLogs (raft's
// old bound); a follower that is down or removed does not hold the log
// back, and needs a snapshot once the leader's log moved past it.
//
// A restarted node does not know the sizes of the entries already in its
// log: it reads up to retentionSampleEntries of the most recent ones and
// counts every entry in the log at their average size.

// minTrailingLogs is the fewest entries the byte bound leaves in the log
// after a snapshot (Config.TrailingLogs, if fewer, wins).
const minTrailingLogs = 16

// retentionSampleEntries is how many of the log's last entries a node
// reads at start to estimate the size of the entries already there.
const retentionSampleEntries = 32

// entryOverheadBytes is counted for every entry on top of its data and
// extensions: its index, term, type and time, and the store's framing.
const entryOverheadBytes = 32

// maxLogMarks bounds the marks logBytes keeps; past it every other mark
// is dropped, halving the resolution of the sizes it reports.
const maxLogMarks = 1024

// retentionInterval is how often the retention loop runs (tests change
// it). A loop round reads raft's stats and compares a few numbers.
var retentionInterval = 250 * time.Millisecond

// followerLiveWindow: a follower that answered the leader within this is
// live, and the leader keeps the entries it lacks (up to TrailingLogs).
const followerLiveWindow = 10 * time.Second

// logMark records that the entries up to index hold cum bytes (counted
// from an arbitrary origin).
type logMark struct {
	index, cum uint64
}

// logBytes is a raft.LogStore that counts the bytes of the entries it
// holds (see above). It keeps raft.MonotonicLogStore.
type logBytes struct {
	raft.LogStore
	mu struct {
		sync.Mutex
		// marks are in increasing index, non-decreasing cum order. Invariant:
		// len(marks) >= 1; marks[0].index is the index before the first
		// entry counted (FirstIndex-1), the last mark is at LastIndex; the
		// entries between two marks share the bytes between them evenly.
		marks []logMark
	}
}

// newLogBytes wraps s, estimating the size of the entries s already holds
// from its last retentionSampleEntries.
func newLogBytes(s raft.LogStore) (*logBytes, error) {
	b := &logBytes{LogStore: s}
	first, err := s.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := s.LastIndex()
	if err != nil {
		return nil, err
	}
	if last == 0 || first == 0 || first > last {
		b.mu.marks = []logMark{{index: last}}
		return b, nil
	}
	var sum, n uint64
	for i := last; i >= first && n < retentionSampleEntries; i-- {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			break // a gap: estimate from what was read
		}
		sum += entryBytes(&l)
		n++
	}
	var avg uint64 = entryOverheadBytes
	if n > 0 {
		avg = sum / n
	}
	b.mu.marks = []logMark{{index: first - 1}, {index: last, cum: avg * (last - first + 1)}}
	return b, nil
}

// entryBytes is what one entry counts for.
func entryBytes(l *raft.Log) uint64 {
	return uint64(len(l.Data)+len(l.Extensions)) + entryOverheadBytes
}

// IsMonotonic implements raft.MonotonicLogStore for the wrapped store.
func (b *logBytes) IsMonotonic() bool {
	m, ok := b.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// StoreLog implements raft.LogStore.
func (b *logBytes) StoreLog(l *raft.Log) error {
	return b.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore, counting the entries once stored.
func (b *logBytes) StoreLogs(logs []*raft.Log) error {
	if err := b.LogStore.StoreLogs(logs); err != nil || len(logs) == 0 {
		return err
	}
	var sum uint64
	for _, l := range logs {
		sum += entryBytes(l)
	}
	first, last := logs[0].Index, logs[len(logs)-1].Index
	b.mu.Lock()
	defer b.mu.Unlock()
	if first <= b.lastLocked().index {
		// raft deletes a conflicting suffix before it overwrites one; this
		// keeps the marks consistent if a store is used otherwise.
		b.cutAfterLocked(first - 1)
	}
	if end := b.lastLocked(); first > end.index+1 {
		if len(b.mu.marks) == 1 {
			// The log is empty (a snapshot install emptied it): it
			// starts here.
			b.mu.marks[0].index = first - 1
		} else {
			// A gap, which raft never leaves: count it empty.
			b.mu.marks = append(b.mu.marks, logMark{index: first - 1, cum: end.cum})
		}
	}
	b.mu.marks = append(b.mu.marks, logMark{index: last, cum: b.lastLocked().cum + sum})
	if len(b.mu.marks) > maxLogMarks {
		m := b.mu.marks
		j := 1
		for i := 2; i < len(m)-1; i += 2 {
			m[j] = m[i]
			j++
		}
		m[j] = m[len(m)-1]
		b.mu.marks = m[:j+1]
	}
	return nil
}

// DeleteRange implements raft.LogStore, dropping the marks of what it
// deleted: a prefix (log compaction) or a suffix (a conflict), which is
// all raft deletes.
func (b *logBytes) DeleteRange(min, max uint64) error {
	if err := b.LogStore.DeleteRange(min, max); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.mu.marks; max < m[len(m)-1].index {
		// A prefix (raft deletes nothing else short of the end).
		cum := b.cumLocked(max)
		i := sort.Search(len(m), func(i int) bool { return m[i].index > max })
		b.mu.marks = append([]logMark{{index: max, cum: cum}}, m[i:]...)
	} else {
		b.cutAfterLocked(min - 1)
	}
	return nil
}

// lastLocked returns the last mark. REQUIRES: b.mu held.
func (b *logBytes) lastLocked() logMark { return b.mu.marks[len(b.mu.marks)-1] }

// cutAfterLocked forgets the entries after index. REQUIRES: b.mu held.
func (b *logBytes) cutAfterLocked(index uint64) {
	m := b.mu.marks
	if index <= m[0].index {
		b.mu.marks = []logMark{{index: index, cum: m[0].cum}}
		return
	}
	cum := b.cumLocked(index)
	i := sort.Search(len(m), func(i int) bool { return m[i].index >= index })
	b.mu.marks = append(m[:i], logMark{index: index, cum: cum})
}

// cumLocked returns the bytes counted through index, interpolated between
// marks. REQUIRES: b.mu held.
func (b *logBytes) cumLocked(index uint64) uint64 {
	m := b.mu.marks
	if index <= m[0].index {
		return m[0].cum
	}
	j := sort.Search(len(m), func(i int) bool { return m[i].index >= index })
	if j == len(m) {
		return m[len(m)-1].cum
	}
	p := m[j-1]
	return p.cum + mulDiv(m[j].cum-p.cum, index-p.index, m[j].index-p.index)
}

// between returns the bytes of the entries in (from, to] that the log
// holds.
func (b *logBytes) between(from, to uint64) uint64 {
	if to <= from {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cumLocked(to) - b.cumLocked(from)
}

// size returns the bytes of the log's entries and its last index.
func (b *logBytes) size() (bytes, last uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.mu.marks
	return m[len(m)-1].cum - m[0].cum, m[len(m)-1].index
}

// entriesHolding returns how many of the log's last entries hold n bytes.
// If the whole log holds less, it extrapolates at the log's average entry
// size; with an empty log it returns math.MaxUint64 (no bound known).
func (b *logBytes) entriesHolding(n uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.mu.marks
	first, last := m[0], m[len(m)-1]
	if last.index == first.index || last.cum == first.cum {
		return math.MaxUint64
	}
	if n == 0 {
		return 0
	}
	if last.cum-first.cum <= n {
		return mulDiv(n, last.index-first.index, last.cum-first.cum)
	}
	target := last.cum - n
	// The first mark above target; the one before it is at or below.
	j := sort.Search(len(m), func(i int) bool { return m[i].cum > target })
	p := m[j-1]
	at := p.index + mulDiv(target-p.cum, m[j].index-p.index, m[j].cum-p.cum)
	return last.index - at
}

// mulDiv returns a*b/c computed in 128 bits, or math.MaxUint64 if that
// does not fit in 64.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// retentionInput is what one round of the retention loop decides on.
type retentionInput struct {
	// TrailingLogs, TrailingLogBytes, SnapshotThresholdBytes are the
	// node's Config (-1: no byte bound).
	TrailingLogs           uint64
	TrailingLogBytes       int64
	SnapshotThresholdBytes int64
	// SinceSnapshotBytes is the bytes of the entries applied since the
	// latest snapshot: what a snapshot now would let raft compact.
	SinceSnapshotBytes uint64
	// TailEntries is how many of the log's last entries hold
	// TrailingLogBytes (logBytes.entriesHolding).
	TailEntries uint64
	// FollowerLag is, on the leader, how many entries the slowest live
	// follower lacks; 0 otherwise.
	FollowerLag uint64
}

// retentionDecision is what the retention loop does.
type retentionDecision struct {
	// TrailingLogs is raft's setting to be in force.
	TrailingLogs uint64
	// Snapshot: take a snapshot now.
	Snapshot bool
}

// decideRetention is the retention policy (see above) as a pure function.
func decideRetention(in retentionInput) retentionDecision {
	d := retentionDecision{TrailingLogs: in.TrailingLogs}
	if in.TrailingLogBytes >= 0 {
		keep := in.TailEntries
		if keep+in.FollowerLag >= keep {
			keep += in.FollowerLag
		} else {
			keep = math.MaxUint64
		}
		keep = max(keep, min(minTrailingLogs, in.TrailingLogs))
		d.TrailingLogs = min(in.TrailingLogs, keep)
	}
	d.Snapshot = in.SnapshotThresholdBytes >= 0 && in.SinceSnapshotBytes > 0 &&
		in.SinceSnapshotBytes >= uint64(in.SnapshotThresholdBytes)
	return d
}

// retainLogLoop applies the byte bounds of the raft log (see above) until
// the node stops. It runs on every node: a follower compacts its own log
// after its own snapshots.
func (n *Node) retainLogLoop() {
	defer n.wg.Done()
	if n.retention == nil || (n.cfg.TrailingLogBytes < 0 && n.cfg.SnapshotThresholdBytes < 0) {
		return
	}
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	st := retentionState{trailing: n.cfg.TrailingLogs}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.retainLogRound(&st)
	}
}

// retentionSnapshotRetry is how long the retention loop waits after a
// snapshot failed before it asks for another.
const retentionSnapshotRetry = 10 * time.Second

// retentionState is what the retention loop remembers between rounds.
type retentionState struct {
	trailing     uint64    // raft's TrailingLogs in force
	snapshotWait time.Time // no snapshot before this (after a failure)
}

// retainLogRound runs one round of the retention loop.
func (n *Node) retainLogRound(st *retentionState) {
	r := n.retention
	stats := n.raft.Stats()
	snapIndex, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	applied := n.raft.AppliedIndex()
	in := retentionInput{
		TrailingLogs:           n.cfg.TrailingLogs,
		TrailingLogBytes:       n.cfg.TrailingLogBytes,
		SnapshotThresholdBytes: n.cfg.SnapshotThresholdBytes,
		SinceSnapshotBytes:     r.between(snapIndex, applied),
	}
	if in.TrailingLogBytes >= 0 {
		in.TailEntries = r.entriesHolding(uint64(in.TrailingLogBytes))
		if n.raft.State() == raft.Leader {
			in.FollowerLag = n.followerLag()
		}
	}
	d := decideRetention(in)
	if d.TrailingLogs != st.trailing {
		rc := n.raft.ReloadableConfig()
		rc.TrailingLogs = d.TrailingLogs
		if err := n.raft.ReloadConfig(rc); err != nil {
			n.log.Warn("cluster: setting raft's trailing logs", "trailing_logs", d.TrailingLogs, "err", err)
		} else {
			n.log.Debug("cluster: raft trailing logs", "trailing_logs", d.TrailingLogs,
				"trailing_bytes", n.cfg.TrailingLogBytes, "follower_lag", in.FollowerLag)
			st.trailing = d.TrailingLogs
		}
	}
	if d.Snapshot && !time.Now().Before(st.snapshotWait) {
		logSize, _ := r.size()
		n.log.Debug("cluster: snapshot for log bytes", "since_snapshot_bytes", in.SinceSnapshotBytes, "log_bytes", logSize)
		err := n.waitRaft(n.ctx, n.raft.Snapshot())
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && n.ctx.Err() == nil {
			n.log.Warn("cluster: snapshot for log bytes", "since_snapshot_bytes", in.SinceSnapshotBytes,
				"log_bytes", logSize, "retry_in", retentionSnapshotRetry, "err", err)
			st.snapshotWait = time.Now().Add(retentionSnapshotRetry)
		}
	}
}

// followerLag returns how many entries of this leader's log the slowest
// live follower lacks: one that acknowledged entries in this term and
// answered within followerLiveWindow.
func (n *Node) followerLag() uint64 {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	last := n.raft.LastIndex()
	term := n.raft.CurrentTerm()
	now := n.cfg.Now()
	var lag uint64
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			continue
		}
		p := n.repl.get(s.ID, term)
		if p.match == 0 || p.match >= last || now.Sub(p.contact) > followerLiveWindow {
			continue
		}
		lag = max(lag, last-p.match)
	}
	return lag
}
