package monitor

import (
	"context"
	"strconv"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/lsm"
	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds what a scrape asks the node (the Members view reads
// raft's configuration).
const scrapeTimeout = 5 * time.Second

// Node is what the monitor reads from a cairn node (*cluster.Node).
type Node interface {
	ID() string
	Status() *cairnpb.StatusResponse
	EngineMetrics() (*lsm.Metrics, error)
	LeaderChanges() (total uint64, recent []cluster.LeaderChange)
	Members(ctx context.Context) (*cairnpb.MembersResponse, error)
	MemberStatuses(ctx context.Context) ([]cluster.MemberStatus, error)
	Readiness(ctx context.Context) cluster.Readiness
	ReconcileActions() map[string]uint64
	RequestCounts() cluster.RequestCounts
	SnapshotSize() (int64, error)
}

var _ Node = (*cluster.Node)(nil)

// metric describes one metric of a collector.
type metric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func newMetric(typ prometheus.ValueType, name, help string, labels ...string) metric {
	return metric{desc: prometheus.NewDesc(name, help, labels, nil), typ: typ}
}

func counter(name, help string, labels ...string) metric {
	return newMetric(prometheus.CounterValue, name, help, labels...)
}

func gauge(name, help string, labels ...string) metric {
	return newMetric(prometheus.GaugeValue, name, help, labels...)
}

// emit sends one sample of m.
func (m metric) emit(ch chan<- prometheus.Metric, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, labels...)
}

// engineCollector exposes lsm.Metrics, read at scrape time: the engine
// keeps the counters, the collector only renames them.
type engineCollector struct {
	node Node

	levelFiles, levelBytes, levelScore, levelTarget   metric
	levelRead, levelWritten, pending                  metric
	flushes, compactions, flushBytes                  metric
	compactRead, compactWritten, ingested, atOpen     metric
	writeAmp                                          metric
	walBytes, walSyncs, commitGroups, writes          metric
	stalls, stallSeconds                              metric
	memtables, memtableBytes                          metric
	cacheCapacity, cacheUsage, cacheHits, cacheMisses metric
	filterChecked, filterUseful                       metric
	blobFiles, blobBytes, blobWritten                 metric
	blobGCRead, blobGCWritten                         metric
	backgroundErr                                     metric
}

func newEngineCollector(n Node) *engineCollector {
	const p = "cairn_engine_"
	return &engineCollector{
		node:           n,
		levelFiles:     gauge(p+"level_files", "Tables in an LSM level (level 0: the L0 file count that throttles writes).", "level"),
		levelBytes:     gauge(p+"level_size_bytes", "Bytes of the tables in an LSM level.", "level"),
		levelScore:     gauge(p+"level_score", "Compaction urgency of a level: size over target (L0: files over the compaction threshold); above 1 it wants compaction.", "level"),
		levelTarget:    gauge(p+"level_target_bytes", "Dynamic target size of a level (0 above the base level).", "level"),
		levelRead:      counter(p+"level_read_bytes_total", "Bytes compactions read from a level.", "level"),
		levelWritten:   counter(p+"level_written_bytes_total", "Bytes flushes (L0) and compactions wrote into a level.", "level"),
		pending:        gauge(p+"compaction_pending_bytes", "Estimate of the bytes compactions must rewrite to bring every level within its target (RocksDB's estimated pending compaction bytes)."),
		flushes:        counter(p+"flushes_total", "Memtable flushes."),
		compactions:    counter(p+"compactions_total", "Compactions."),
		flushBytes:     counter(p+"flush_written_bytes_total", "Bytes of tables written by flushes."),
		compactRead:    counter(p+"compaction_read_bytes_total", "Bytes compactions read."),
		compactWritten: counter(p+"compaction_written_bytes_total", "Bytes compactions wrote."),
		ingested:       counter(p+"ingested_bytes_total", "Bytes of batches written to the engine since it opened."),
		atOpen:         gauge(p+"opened_table_bytes", "Bytes of the tables the engine opened with (those recovered from its WAL included)."),
		writeAmp:       gauge(p+"write_amplification_ratio", "Bytes written (WAL, flushes, compactions, blob files) per byte given to the engine since it opened."),
		walBytes:       counter(p+"wal_written_bytes_total", "Bytes appended to the write-ahead log."),
		walSyncs:       counter(p+"wal_syncs_total", "Write-ahead log syncs."),
		commitGroups:   counter(p+"commit_groups_total", "Group commits (each one WAL write for one or more batches)."),
		writes:         counter(p+"writes_total", "Batches committed."),
		stalls:         counter(p+"write_stalls_total", "Writes delayed: kind=slowdown (too many L0 files) or kind=stop (waiting for a flush or compaction).", "kind"),
		stallSeconds:   counter(p+"write_stall_seconds_total", "Time writes spent delayed, by kind (slowdown, stop).", "kind"),
		memtables:      gauge(p+"memtables", "Memtables, the mutable one and those waiting to flush."),
		memtableBytes:  gauge(p+"memtable_bytes", "Approximate bytes held by the memtables."),
		cacheCapacity:  gauge(p+"cache_capacity_bytes", "Byte budget of a cache (cache=block or blob).", "cache"),
		cacheUsage:     gauge(p+"cache_usage_bytes", "Bytes held by a cache (cache=block or blob).", "cache"),
		cacheHits:      counter(p+"cache_hits_total", "Cache lookups that found the entry (cache=block or blob).", "cache"),
		cacheMisses:    counter(p+"cache_misses_total", "Cache lookups that missed (cache=block or blob).", "cache"),
		filterChecked:  counter(p+"bloom_filter_checked_total", "Bloom filter probes (filter=memtable or table).", "filter"),
		filterUseful:   counter(p+"bloom_filter_useful_total", "Bloom filter probes that answered absent and saved a lookup (filter=memtable or table).", "filter"),
		blobFiles:      gauge(p+"blob_files", "Blob files of key-value separation in the live version."),
		blobBytes:      gauge(p+"blob_bytes", "Bytes of the blob files: kind=file (on disk), live (still referenced) or garbage (dropped by compactions, awaiting blob GC).", "kind"),
		blobWritten:    counter(p+"blob_written_bytes_total", "Bytes written to blob files by flushes, compactions and blob GC."),
		blobGCRead:     counter(p+"blob_gc_read_bytes_total", "Bytes blob GC read."),
		blobGCWritten:  counter(p+"blob_gc_written_bytes_total", "Bytes blob GC rewrote."),
		backgroundErr:  gauge(p+"background_error", "1 if a flush or compaction failed and the engine refuses writes."),
	}
}

func (c *engineCollector) metrics() []metric {
	return []metric{c.levelFiles, c.levelBytes, c.levelScore, c.levelTarget, c.levelRead, c.levelWritten,
		c.pending, c.flushes, c.compactions, c.flushBytes, c.compactRead, c.compactWritten, c.ingested, c.atOpen,
		c.writeAmp, c.walBytes, c.walSyncs, c.commitGroups, c.writes, c.stalls, c.stallSeconds,
		c.memtables, c.memtableBytes, c.cacheCapacity, c.cacheUsage, c.cacheHits, c.cacheMisses,
		c.filterChecked, c.filterUseful, c.blobFiles, c.blobBytes, c.blobWritten, c.blobGCRead,
		c.blobGCWritten, c.backgroundErr}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics() {
		ch <- m.desc
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	m, err := c.node.EngineMetrics()
	if err != nil {
		return // not started or closed: no engine samples
	}
	for l, lm := range m.Levels {
		level := strconv.Itoa(l)
		c.levelFiles.emit(ch, float64(lm.NumFiles), level)
		c.levelBytes.emit(ch, float64(lm.SizeBytes), level)
		c.levelScore.emit(ch, lm.Score, level)
		c.levelTarget.emit(ch, float64(lm.TargetBytes), level)
		c.levelRead.emit(ch, float64(lm.BytesRead), level)
		c.levelWritten.emit(ch, float64(lm.BytesWritten), level)
	}
	c.pending.emit(ch, float64(m.CompactionPendingBytes))
	c.flushes.emit(ch, float64(m.Flushes))
	c.compactions.emit(ch, float64(m.Compactions))
	c.flushBytes.emit(ch, float64(m.FlushBytes))
	c.compactRead.emit(ch, float64(m.CompactionBytesRead))
	c.compactWritten.emit(ch, float64(m.CompactionBytesWritten))
	c.ingested.emit(ch, float64(m.BytesIngested))
	c.atOpen.emit(ch, float64(m.BytesAtOpen))
	c.writeAmp.emit(ch, m.WriteAmplification)
	c.walBytes.emit(ch, float64(m.WALBytes))
	c.walSyncs.emit(ch, float64(m.WALSyncs))
	c.commitGroups.emit(ch, float64(m.CommitGroups))
	c.writes.emit(ch, float64(m.Writes))
	c.stalls.emit(ch, float64(m.Slowdowns), "slowdown")
	c.stalls.emit(ch, float64(m.Stops), "stop")
	c.stallSeconds.emit(ch, m.SlowdownTime.Seconds(), "slowdown")
	c.stallSeconds.emit(ch, m.StopDuration.Seconds(), "stop")
	c.memtables.emit(ch, float64(m.MemTables))
	c.memtableBytes.emit(ch, float64(m.MemTableBytes))
	c.cacheCapacity.emit(ch, float64(m.BlockCache.Capacity), "block")
	c.cacheUsage.emit(ch, float64(m.BlockCache.Size), "block")
	c.cacheHits.emit(ch, float64(m.BlockCache.Hits), "block")
	c.cacheMisses.emit(ch, float64(m.BlockCache.Misses), "block")
	c.cacheCapacity.emit(ch, float64(m.Blob.Cache.Capacity), "blob")
	c.cacheUsage.emit(ch, float64(m.Blob.Cache.Size), "blob")
	c.cacheHits.emit(ch, float64(m.Blob.Cache.Hits), "blob")
	c.cacheMisses.emit(ch, float64(m.Blob.Cache.Misses), "blob")
	c.filterChecked.emit(ch, float64(m.MemtableFilter.Checked), "memtable")
	c.filterUseful.emit(ch, float64(m.MemtableFilter.Useful), "memtable")
	c.filterChecked.emit(ch, float64(m.TableFilter.Checked), "table")
	c.filterUseful.emit(ch, float64(m.TableFilter.Useful), "table")
	c.blobFiles.emit(ch, float64(m.Blob.Files))
	c.blobBytes.emit(ch, float64(m.Blob.FileBytes), "file")
	c.blobBytes.emit(ch, float64(m.Blob.LiveBytes), "live")
	c.blobBytes.emit(ch, float64(m.Blob.GarbageBytes), "garbage")
	c.blobWritten.emit(ch, float64(m.Blob.BytesWritten))
	c.blobGCRead.emit(ch, float64(m.Blob.GCBytesRead))
	c.blobGCWritten.emit(ch, float64(m.Blob.GCBytesWritten))
	bg := 0.0
	if m.BackgroundErr != nil {
		bg = 1
	}
	c.backgroundErr.emit(ch, bg)
}

// raftCollector exposes the node's raft state (Status, read at scrape
// time), the leader changes it saw, its readiness and the membership as
// it sees it, and the requests it forwarded to the leader or its state
// machine answered as duplicates. Raft's own go-metrics (commit and apply latency, snapshot
// timings, batch sizes) are bridged separately (gometrics.go).
type raftCollector struct {
	node Node

	state, term, commit, applied, lastLog, lastSnap metric
	snapBytes                                       metric
	lastContact, leaderChanges, hasLeader, ready    metric
	members, servers, reconcile                     metric
	forwarded, duplicates                           metric
}

func newRaftCollector(n Node) *raftCollector {
	return &raftCollector{
		node:          n,
		state:         gauge("cairn_raft_state", "1 for the node's raft state (leader, follower, candidate, shutdown), 0 for the others. (cairn_raft_state_transitions_total counts entries into a state.)", "state"),
		term:          gauge("cairn_raft_term", "The node's raft term."),
		commit:        gauge("cairn_raft_commit_index", "Raft commit index (until a restarted follower hears from the leader: its applied index, a lower bound)."),
		applied:       gauge("cairn_raft_applied_index", "Index of the last log entry the state machine applied."),
		lastLog:       gauge("cairn_raft_last_log_index", "Index of the last entry in the node's raft log."),
		lastSnap:      gauge("cairn_raft_last_snapshot_index", "Index of the node's latest raft snapshot."),
		snapBytes:     gauge("cairn_raft_snapshot_bytes", "Size of the newest raft snapshot the node retains (0: none yet), as sent to a follower that needs it."),
		lastContact:   gauge("cairn_raft_last_leader_contact_seconds", "On a follower, time since it last heard from the leader (-1: not since it started); 0 on the leader."),
		leaderChanges: counter("cairn_raft_leader_changes_total", "Leaders this node saw elected since it started (a new leader, or a new term of the same one)."),
		hasLeader:     gauge("cairn_raft_has_leader", "1 if the node knows a leader."),
		ready:         gauge("cairn_node_ready", "1 if the node is ready (knows a leader and has applied to within the allowed lag of the leader's commit index; gRPC health SERVING)."),
		members:       gauge("cairn_members", "Members in this node's view by gossip status (alive, suspect, dead, left, unknown) and raft suffrage (voter, nonvoter, none).", "status", "suffrage"),
		servers:       gauge("cairn_raft_servers", "Servers in the raft configuration, by suffrage.", "suffrage"),
		forwarded:     counter("cairn_grpc_forwarded_total", "Requests this node forwarded to the leader (it was a follower), by gRPC method.", "method"),
		duplicates:    counter("cairn_fsm_duplicate_requests_total", "Writes the state machine recognized as retries of writes already applied (same client_id and seq) and answered with the first result instead of applying again."),
		reconcile:     counter("cairn_membership_reconcile_actions_total", "Configuration changes this node's reconcile loop decided on while it led, by action (add-nonvoter, promote-voter, demote-voter, remove-server, update-address).", "action"),
	}
}

func (c *raftCollector) metrics() []metric {
	return []metric{c.state, c.term, c.commit, c.applied, c.lastLog, c.lastSnap, c.snapBytes, c.lastContact,
		c.leaderChanges, c.hasLeader, c.ready, c.members, c.servers, c.reconcile, c.forwarded, c.duplicates}
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics() {
		ch <- m.desc
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.node.Status()
	if st == nil {
		return
	}
	for _, s := range []cairnpb.RaftState{cairnpb.RaftState_LEADER, cairnpb.RaftState_FOLLOWER, cairnpb.RaftState_CANDIDATE, cairnpb.RaftState_SHUTDOWN} {
		v := 0.0
		if st.GetState() == s {
			v = 1
		}
		c.state.emit(ch, v, stateName(s))
	}
	c.term.emit(ch, float64(st.GetTerm()))
	c.commit.emit(ch, float64(st.GetCommitIndex()))
	c.applied.emit(ch, float64(st.GetAppliedIndex()))
	c.lastLog.emit(ch, float64(st.GetLastLogIndex()))
	c.lastSnap.emit(ch, float64(st.GetLastSnapshotIndex()))
	if size, err := c.node.SnapshotSize(); err == nil {
		c.snapBytes.emit(ch, float64(size))
	}
	contact := float64(st.GetLastLeaderContactMs()) / 1000
	if st.GetLastLeaderContactMs() < 0 {
		contact = -1
	}
	c.lastContact.emit(ch, contact)
	total, _ := c.node.LeaderChanges()
	c.leaderChanges.emit(ch, float64(total))
	c.hasLeader.emit(ch, boolValue(st.GetLeaderId() != ""))
	for action, n := range c.node.ReconcileActions() {
		c.reconcile.emit(ch, float64(n), action)
	}
	rc := c.node.RequestCounts()
	for method, n := range rc.Forwarded {
		c.forwarded.emit(ch, float64(n), method)
	}
	c.duplicates.emit(ch, float64(rc.Duplicates))

	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	c.ready.emit(ch, boolValue(c.node.Readiness(ctx).Ready))
	mr, err := c.node.Members(ctx)
	if err != nil {
		return
	}
	type key struct{ status, suffrage string }
	counts := map[key]int{}
	servers := map[string]int{"voter": 0, "nonvoter": 0}
	for _, m := range mr.GetMembers() {
		suffrage := suffrageName(m)
		if suffrage != "none" {
			servers[suffrage]++
		}
		counts[key{memberStatusName(m.GetStatus()), suffrage}]++
	}
	for k, n := range counts {
		c.members.emit(ch, float64(n), k.status, k.suffrage)
	}
	for s, n := range servers {
		c.servers.emit(ch, float64(n), s)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
