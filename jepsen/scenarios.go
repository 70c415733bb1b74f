package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// A scenario is a named run that reproduced a bug (jepsen/README.md, track
// record): `go run ./jepsen --scenario NAME` runs it again. Seeds fix the
// harness's choices (operations, fault kinds, targets, timing of the
// schedule), not the cluster's timing, so a scenario reproduces its bug
// often rather than always; each names what to look for.
type scenario struct {
	workload string
	nemeses  []string
	duration time.Duration
	seed     int64
	nodeArgs []string
	// expect says how the run shows the bug.
	expect string
}

var scenarios = map[string]scenario{
	// #0: the planted bug; must be INVALID.
	"unsafe-local-reads": {workload: "register", nemeses: []string{"partition", "pause"}, duration: 30 * time.Second, seed: 1001,
		expect: "INVALID (stale-read / not-linearizable); the nodes run with --unsafe-local-reads"},
	// #1: raft-wal v0.4.0 after a log suffix truncation.
	"raftwal-tail-truncation": {workload: "register", nemeses: []string{"pause", "kill"}, duration: 60 * time.Second, seed: 8,
		nodeArgs: []string{"--raft-log-store=wal"},
		expect:   `exit 5, NODE CRASHED; the node's log: "clearing log suffix", then "sealed segment has no index block" at every start`},
	// #2 and #3: removing the leader.
	"remove-leader": {workload: "register", nemeses: []string{"membership"}, duration: 60 * time.Second, seed: 7,
		expect: `exit 5, "n1 knows no leader" (its log: "removed ourself, shutting down"); throughput near zero after the removal (#3)`},
}

func scenarioNames() []string {
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// applyScenario sets cfg from the named scenario.
func applyScenario(cfg *config, name string) error {
	s, ok := scenarios[name]
	if !ok {
		return fmt.Errorf("--scenario %q: unknown (%s)", name, strings.Join(scenarioNames(), ", "))
	}
	cfg.workload, cfg.nemeses, cfg.duration, cfg.seed = s.workload, s.nemeses, s.duration, s.seed
	cfg.nodeArgs = append(cfg.nodeArgs, s.nodeArgs...)
	if name == "unsafe-local-reads" {
		cfg.unsafeReads = true
		cfg.gapMin, cfg.holdMin = time.Second, 3*time.Second
	}
	cfg.scenarioExpect = s.expect
	return nil
}
