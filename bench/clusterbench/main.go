// Command clusterbench measures a 3-member cairn cluster side by side with a
// 3-member etcd cluster on loopback (make bench-cluster).
//
//	go run . [--rounds 3] [--duration 20s] [--workloads put1,...] [--out ../RESULTS-cluster.md]
//
// Each cluster is three server processes: cairn-node, built from the root
// module with default flags (so a new data directory, raft-wal), or this
// binary's `etcd` subcommand, an etcd server from go.etcd.io/etcd/server/v3
// embed with its defaults (fsync on, --snapshot-count 10000). Every run is a
// separate load-generator process (this binary's `load` subcommand) driving
// one workload through the system's own Go client: cairn's client package
// (writes and linearizable reads to the leader it finds, serializable reads
// round-robin) or etcd's clientv3 (round-robin over the three members). The
// load generator opens one client (its connections to all members) per 16
// concurrent clients, at least one.
//
// Per round both clusters are started fresh, each is loaded with the
// 100,000 keys (untimed), and then every workload runs once on each system,
// alternating A B (the order flips every round) so that the machine's drift
// hits both. Per run: throughput, p50/p99/p99.9 latency, server CPU seconds
// per 1,000 operations (utime+stime of the three server processes from
// /proc/PID/stat) and bytes written to disk per operation
// (/proc/PID/io write_bytes), both between the load generator's start and
// end marks (a warm-up second is excluded). The report gives medians over
// rounds with min–max, and the cairn/etcd ratios.
//
// --profile saves, per run, CPU, mutex and block profiles of the three
// cairn nodes (<workload>-n<i>.<kind>.pb.gz) and a CPU profile of the load
// generator of either system (<workload>-load-<target>.profile.pb.gz) in
// the work directory: the load generator shares the cores with the
// servers, so its CPU per operation is part of what a run measures.
package main

import (
	"fmt"
	"os"
)

func main() {
	var err error
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "load":
			err = runLoad(os.Args[2:])
		case "etcd":
			err = runEtcd(os.Args[2:])
		default:
			err = runBench(os.Args[1:])
		}
	} else {
		err = runBench(nil)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterbench: %v\n", err)
		os.Exit(1)
	}
}
