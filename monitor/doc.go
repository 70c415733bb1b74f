// Package monitor serves a cairn node's operational HTTP endpoints on its
// metrics address (cairn-node --metrics-addr): Prometheus metrics at
// /metrics, liveness at /healthz, readiness at /readyz, a status page at /
// and, behind a flag, net/http/pprof.
//
// Metrics come from where they are kept, read at scrape time: the engine's
// lsm.Metrics (cairn_engine_*), the node's raft Status, snapshot store,
// leader changes and membership view (cairn_raft_*, cairn_members), its
// request counts (cairn_grpc_forwarded_total,
// cairn_fsm_duplicate_requests_total), the gRPC server's interceptors
// (cairn_grpc_server_*), and hashicorp/raft's and memberlist's
// go-metrics, bridged through go-metrics' Prometheus sink (gometrics.go:
// raft's counts of entries into a state become
// cairn_raft_state_transitions_total{to}, so that nothing but the
// cairn_raft_state{state} gauge reads as the state, and a summary idle for
// its window exports no quantiles instead of NaN; nothing exported is NaN).
// Only the engine's flush and compaction durations are observed as they
// happen, by the listener Monitor.EventListener puts on the engine.
// Names follow Prometheus conventions: a cairn_ prefix, base units
// (seconds, bytes) and _total for counters; the bridged go-metrics keep
// their own names and milliseconds. README.md, "Operating", lists the key
// ones and what they mean.
//
// The status page renders what the serving node can see: every member's
// Cluster.Status (raft state, indexes, engine shape, cache hit ratio), the
// leader, and the leader changes the node saw. It is html/template, no
// JavaScript, and reloads itself every few seconds. Each member's indexes
// are its own, sampled when it answered, so every row says when
// ("sampled"); the serving node reads its own last; a commit index above
// the leader's is marked and explained; and the leader's page adds its own
// record of each follower's acknowledged index ("match",
// cluster.MemberStatus.Replication).
package monitor
