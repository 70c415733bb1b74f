// Command jepsen is cairn's fault-injection harness: it starts a cluster of
// real cairn-node processes, runs concurrent clients against it while
// nemeses kill, pause, partition, remove and restart nodes, records every
// operation, heals the cluster, and checks the history (package
// jepsen/check: linearizability with porcupine, lost writes, bank
// invariants). See README.md in this directory.
//
//	go run ./jepsen --nodes 5 --time 120s --workload register --nemesis partition,kill,pause --seed 1
//
// The parts, as in etcd's tests/robustness: the cluster and its network
// (cluster.go, local.go, netns.go, docker.go), the nemeses (nemesis.go),
// the traffic and workloads (traffic.go, workloads.go, record.go), the
// history types (jepsen/history) and the checkers and report
// (jepsen/check).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cairnkv/cairn/jepsen/check"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		os.Exit(2)
	}
	if cfg.recheck != "" {
		os.Exit(recheck(cfg))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	res, err := runTest(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		if ctx.Err() != nil {
			os.Exit(130)
		}
		os.Exit(3)
	}
	switch {
	case res.valid:
	case res.result.Status == check.Invalid:
		os.Exit(1)
	case res.result.Status == check.Unknown:
		os.Exit(4)
	default:
		os.Exit(5) // the history is valid, but a node crashed or the cluster did not recover
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("jepsen", flag.ContinueOnError)
	var cfg config
	var nemeses string
	fs.IntVar(&cfg.nodes, "nodes", 5, "number of cairn-node processes")
	fs.DurationVar(&cfg.duration, "time", 120*time.Second, "how long traffic and faults run (recovery and checks come after)")
	fs.StringVar(&cfg.workload, "workload", "register", "register, set or bank")
	fs.StringVar(&nemeses, "nemesis", "partition,kill,pause", "comma-separated nemeses: "+strings.Join(nemesisNames(), ", ")+", or all, or none")
	fs.Int64Var(&cfg.seed, "seed", 0, "random seed of traffic and nemeses (0: from the clock; printed)")
	fs.StringVar(&cfg.mode, "mode", "local", "local (processes in network namespaces) or docker (the compose cluster)")
	fs.StringVar(&cfg.out, "out", "jepsen/results", "results directory; each run writes a subdirectory <time>-<workload>-<seed>")
	fs.IntVar(&cfg.clients, "clients", 10, "concurrent client processes")
	fs.Float64Var(&cfg.rate, "rate", 0, "total operations per second (0: the workload's default; -1: unlimited)")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", 3*time.Second, "deadline of one operation, the client's retries included")
	fs.StringVar(&cfg.nodeBin, "node-bin", "", "cairn-node binary (default: built from ./cmd/node into a temp dir)")
	fs.DurationVar(&cfg.gapMin, "nemesis-gap", 3*time.Second, "least quiet time between faults (up to twice this)")
	fs.DurationVar(&cfg.holdMin, "nemesis-hold", 5*time.Second, "least time a fault lasts (up to twice this)")
	fs.BoolVar(&cfg.unsafeReads, "unsafe-local-reads", false, "DANGER: start the nodes with --unsafe-local-reads (linearizable reads served locally, no read-index); for the must-fail check: the run should FAIL")
	fs.DurationVar(&cfg.checkTimeout, "check-timeout", 5*time.Minute, "bound of porcupine's linearizability search (register); past it the verdict is unknown")
	fs.StringVar(&cfg.recheck, "recheck", "", "check the history of an earlier run's results directory again (no cluster), rewriting its report")
	var scenarioName string
	fs.StringVar(&scenarioName, "scenario", "", "run a named scenario that reproduced a bug (overrides workload, nemesis, time, seed): "+strings.Join(scenarioNames(), ", "))
	fs.BoolVar(&cfg.tls, "tls", false, "make a CA and node and client certificates in the work directory (as `cairn-node certs` does) and run with TLS between the nodes and mutual TLS for the clients (local mode)")
	var nodeArgs string
	fs.StringVar(&nodeArgs, "node-args", "", "more cairn-node flags for every node, space-separated (e.g. --raft-log-store=boltdb)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.nodeArgs = strings.Fields(nodeArgs)
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.nodes < 1 {
		return cfg, fmt.Errorf("--nodes %d: need at least 1", cfg.nodes)
	}
	switch cfg.mode {
	case "local", "docker":
	default:
		return cfg, fmt.Errorf("--mode %q: local or docker", cfg.mode)
	}
	if cfg.tls && cfg.mode != "local" {
		return cfg, fmt.Errorf("--tls is for --mode local (the compose cluster has its own TLS variant, docker-compose.tls.yml)")
	}
	switch nemeses {
	case "all":
		cfg.nemeses = nemesisNames()
	case "none", "":
	default:
		for _, n := range strings.Split(nemeses, ",") {
			n = strings.TrimSpace(n)
			if _, ok := allNemeses[n]; !ok {
				return cfg, fmt.Errorf("--nemesis: unknown nemesis %q (%s)", n, strings.Join(nemesisNames(), ", "))
			}
			cfg.nemeses = append(cfg.nemeses, n)
		}
	}
	if scenarioName != "" {
		if err := applyScenario(&cfg, scenarioName); err != nil {
			return cfg, err
		}
	}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano() % 1_000_000
	}
	return cfg, nil
}

func nemesisNames() []string {
	return []string{"kill", "pause", "partition", "membership", "restart"}
}

// recheck checks a results directory's history again and rewrites its
// report (after a checker change, or with a longer --check-timeout).
func recheck(cfg config) int {
	h, err := check.ReadHistory(cfg.recheck)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return 3
	}
	r := check.CheckWith(h, check.Options{Timeout: cfg.checkTimeout})
	if err := check.WriteReport(cfg.recheck, h, r); err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
	}
	for _, a := range r.Anomalies {
		fmt.Printf("ANOMALY: %s\n", a)
	}
	for _, n := range r.Notes {
		fmt.Printf("note: %s\n", n)
	}
	fmt.Printf("jepsen: %s: %s workload, %d ops; report in %s\n", strings.ToUpper(string(r.Status)), h.Workload, len(h.Ops), cfg.recheck)
	switch r.Status {
	case check.Valid:
		return 0
	case check.Invalid:
		return 1
	}
	return 4
}
