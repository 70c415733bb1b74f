package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster/membership"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
// waitListening waits until the node run writes to stdout prints a line
// that line matches, and returns the submatches; it fails the test if the
// run exits first or deadline passes.
func waitListening(t *testing.T, line *regexp.Regexp, stdout, stderr *syncBuffer, done <-chan int, deadline time.Time) []string {
	t.Helper()
	for {
		if m := line.FindStringSubmatch(stdout.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line; stdout %q, stderr %q", stdout.String(), stderr.String())
		}
		select {
		case code := <-done:
			t.Fatalf("exited with %d: %s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestServeHealthAndShutdown(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{
			"--id", "t1", "--data-dir", filepath.Join(dir, "data"), "--log-format", "json",
			"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
			"--metrics-addr", "127.0.0.1:0",
		}, &stdout, &stderr)
	}()
	line := regexp.MustCompile(`^cairn-node t1: serving gRPC on (127\.0\.0\.1:\d+) \(raft 127\.0\.0\.1:\d+, gossip 127\.0\.0\.1:\d+, data .*, metrics (http://127\.0\.0\.1:\d+/)\)\n$`)
	deadline := time.Now().Add(10 * time.Second)
	m := waitListening(t, line, &stdout, &stderr, done, deadline)
	// Healthy once the node elected itself and applied its log.
	var hout, herr bytes.Buffer
	for code := -1; code != 0; {
		hout.Reset()
		herr.Reset()
		if code = run(context.Background(), []string{"health", "--grpc-addr", m[1]}, &hout, &herr); code != 0 && time.Now().After(deadline) {
			t.Fatalf("health exit %d: %s", code, herr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The metrics address serves readiness and metrics.
	for _, c := range []struct{ path, want string }{
		{"readyz", "ready: "},
		{"metrics", "cairn_raft_state{state=\"leader\"} 1"},
	} {
		resp, err := http.Get(m[2] + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), c.want) {
			t.Errorf("GET /%s: %d, want %q in:\n%.500s", c.path, resp.StatusCode, c.want, b)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("shutdown exit %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no shutdown")
	}
	// The node is gone: health fails.
	hout.Reset()
	herr.Reset()
	if code := run(context.Background(), []string{"health", "--grpc-addr", m[1], "--timeout", "300ms"}, &hout, &herr); code != 1 {
		t.Fatalf("health of a stopped node: exit %d", code)
	}
	// --log-format json: one JSON object per line, raft's included, each
	// with the node ID; raft's arguments are attributes.
	raftLines := 0
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(l, "cairn-node: ") {
			continue // the process's own messages to the operator
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if rec["node"] != "t1" {
			t.Errorf("log line without node=t1: %q", l)
		}
		if rec["component"] == "raft" {
			raftLines++
			if rec["msg"] == "election won" && rec["term"] == nil {
				t.Errorf("raft's arguments are not attributes: %q", l)
			}
		}
	}
	if raftLines == 0 {
		t.Errorf("no raft lines in the log:\n%s", stderr.String())
	}
}

func TestErrorsAreOneLine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.json")
	os.WriteFile(badConfig, []byte(`{"no-such-flag": 1}`), 0o644)
	policy := filepath.Join(dir, "auth.json")
	os.WriteFile(policy, []byte(`{"certs": {"admin": "admin"}}`), 0o644)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"bad size", []string{"--cache-size", "1XB"}, 2, `unknown unit "XB"`},
		{"bad config key", []string{"--config", badConfig}, 2, `unknown key "no-such-flag"`},
		{"missing config", []string{"--config", filepath.Join(dir, "nope.json")}, 2, "config file"},
		{"bad log level", []string{"--log-level", "loud"}, 2, "log level"},
		{"bad log format", []string{"--log-format", "xml"}, 2, `log format "xml": use text or json`},
		{"pprof without metrics", []string{"--pprof", "--metrics-addr", ""}, 2, "--pprof needs a --metrics-addr"},
		{"metrics port in use", []string{"--id", "t", "--data-dir", filepath.Join(dir, "d4"), "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--metrics-addr", l.Addr().String()}, 1, "metrics address " + l.Addr().String()},
		{"bad gossip key", []string{"--gossip-key", "c2hvcnQ="}, 2, "--gossip-key"},
		{"bad store", []string{"--raft-log-store", "x", "--data-dir", filepath.Join(dir, "d0")}, 2, "raft log store"},
		{"port in use", []string{"--id", "t", "--data-dir", filepath.Join(dir, "d1"), "--grpc-addr", l.Addr().String(), "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--metrics-addr", ""}, 1, "address already in use"},
		{"argument", []string{"extra"}, 2, "unexpected argument"},
		{"health flag", []string{"health", "--nope"}, 2, "flag provided but not defined"},
		{"voter cap below floor", []string{"--max-voters", "2", "--data-dir", filepath.Join(dir, "d2")}, 2, "maximum voters 2 (1 once rounded down to odd) is below the minimum voters 3"},
		// A bad configuration is refused before the metrics port is bound.
		{"bad config, metrics port in use", []string{"--max-voters", "2", "--data-dir", filepath.Join(dir, "d5"), "--metrics-addr", l.Addr().String()}, 2, "maximum voters 2"},
		{"negative grace", []string{"--dead-server-grace", "-1s", "--data-dir", filepath.Join(dir, "d3")}, 2, "dead-server grace period -1s < 0"},
		// An authorization file without TLS leaves the raft port open:
		// refused unless the operator says that they know.
		{"auth without TLS", []string{"--auth-file", policy, "--data-dir", filepath.Join(dir, "d6")}, 2, "the raft port accepts log entries from anyone who can reach it. Turn TLS on, or say that you know with --insecure-auth-without-tls"},
		{"bad connection cap", []string{"--max-conns-per-ip", "-2", "--data-dir", filepath.Join(dir, "d7")}, 2, "max connections per IP -2"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		out := stderr.String()
		if code != c.code || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "cairn-node: ") {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line with %q", c.name, code, out, c.code, c.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "node.json")
	os.WriteFile(name, []byte(`{
		"id": "from-file", "data-dir": "/data", "join": ["a:1", "b:2"],
		"bootstrap-expect": 3, "max-value-size": "1MiB", "non-voter": true, "raft-log-store": "wal"
	}`), 0o644)
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"--config", name, "--id", "from-flag"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "from-flag" || cfg.DataDir != "/data" || strings.Join(cfg.Join, ",") != "a:1,b:2" ||
		cfg.BootstrapExpect != 3 || cfg.MaxValueSize != 1<<20 || !cfg.NonVoter || cfg.RaftLogStore != "wal" {
		t.Fatalf("config = %+v", cfg)
	}
	// --join without --bootstrap-expect joins an existing cluster.
	o, _ = parseFlags([]string{"--join", "a:1"}, &stderr)
	if cfg, _ := o.clusterConfig(&stderr); cfg.BootstrapExpect != 0 {
		t.Fatalf("bootstrap-expect with --join = %d", cfg.BootstrapExpect)
	}
	o, _ = parseFlags(nil, &stderr)
	if cfg, _ := o.clusterConfig(&stderr); cfg.BootstrapExpect != 1 || cfg.DataDir != "./cairn-data" || cfg.GRPCAddr != "127.0.0.1:7379" {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "17": 17, "4KiB": 4 << 10, "16MiB": 16 << 20, "2GiB": 2 << 30, "3mb": 3 << 20, "5 GiB": 5 << 30, "1k": 1 << 10,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1TiB", "99999999999999999999", "8GiBx"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// The membership policy flags (and the config file's keys of the same
// names) reach the cluster configuration's reconcile policy; the defaults
// are membership.DefaultPolicy and leaving on stop.
func TestMembershipPolicyFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != membership.DefaultPolicy() || cfg.SkipLeaveOnShutdown {
		t.Fatalf("defaults: policy %+v, skip leave %v", cfg.Policy, cfg.SkipLeaveOnShutdown)
	}
	name := filepath.Join(t.TempDir(), "node.json")
	os.WriteFile(name, []byte(`{"stabilization-time": "3s", "max-voters": 7, "leave-on-stop": false}`), 0o644)
	o, err = parseFlags([]string{"--config", name, "--dead-server-grace", "90s", "--min-voters", "2", "--max-voters", "9", "--max-pending-nonvoters", "5"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = o.clusterConfig(&stderr); err != nil {
		t.Fatal(err)
	}
	want := membership.DefaultPolicy()
	want.FailedGracePeriod, want.MinQuorum, want.MaxVoters, want.StabilizationTime = 90*time.Second, 2, 9, 3*time.Second
	want.MaxPendingNonVoters = 5
	if cfg.Policy != want || !cfg.SkipLeaveOnShutdown {
		t.Fatalf("policy %+v, skip leave %v; want %+v, true", cfg.Policy, cfg.SkipLeaveOnShutdown, want)
	}
	// -1: no cap on pending non-voters.
	o, _ = parseFlags([]string{"--max-pending-nonvoters", "-1"}, &stderr)
	if cfg, err = o.clusterConfig(&stderr); err != nil || cfg.Policy.MaxPendingNonVoters != -1 || cfg.Validate() != nil {
		t.Fatalf("--max-pending-nonvoters -1: %d, %v, %v", cfg.Policy.MaxPendingNonVoters, err, cfg.Validate())
	}
	// The help text documents every one of them.
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); err == nil {
		t.Fatal("-h: no ErrHelp")
	}
	for _, f := range []string{"-dead-server-grace", "-min-voters", "-max-voters", "-stabilization-time", "-max-pending-nonvoters", "-leave-on-stop"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help lacks %s", f)
		}
	}
}
