package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMetricsEndpoint scrapes --metrics-addr of a running single-node
// cluster, the way Prometheus would: once it leads, its state is the
// cairn_raft_state gauge; raft's counts of entries into a state are
// cairn_raft_state_transitions_total{to}, never cairn_raft_state_leader
// and its siblings (which read 1 on a leader beside the gauge); and no
// sample is NaN (raft's timing summaries drop their quantiles when idle).
func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{
			"--id", "m1", "--data-dir", filepath.Join(dir, "data"),
			"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
			"--metrics-addr", "127.0.0.1:0",
		}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("no shutdown")
		}
	}()
	line := regexp.MustCompile(`metrics (http://127\.0\.0\.1:\d+/)\)\n`)
	deadline := time.Now().Add(15 * time.Second)
	m := waitListening(t, line, &stdout, &stderr, done, deadline)
	var body string
	for !strings.Contains(body, `cairn_raft_state{state="leader"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("not the leader after 15s:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get(m[1] + "metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
		}
		body = string(b)
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if strings.HasSuffix(l, " NaN") {
			t.Errorf("NaN sample: %s", l)
		}
		if name, _, _ := strings.Cut(strings.Fields(l)[0], "{"); regexp.MustCompile(`^cairn_raft_state_(leader|follower|candidate)$`).MatchString(name) {
			t.Errorf("a transition counter that reads as the state: %s", l)
		}
	}
	if !regexp.MustCompile(`(?m)^cairn_raft_state_transitions_total\{to="leader"\} [1-9]`).MatchString(body) {
		t.Errorf("no transition to leader counted:\n%s", regexp.MustCompile(`(?m)^cairn_raft_state.*$`).FindAllString(body, -1))
	}
}
