package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/cluster/auth"
)

// TestAuthFlags: --auth-file and --auth-peer-token-file reach the cluster
// configuration; the token file is read and trimmed, warned about if
// others can read it, and never echoed; a bad policy stops the node from
// starting, with one line naming the problem.
func TestAuthFlags(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "auth.json")
	os.WriteFile(policy, []byte(`{"tokens": {"`+auth.HashToken("s3cret-peer")+`": "peer"}}`), 0o644)
	tokFile := filepath.Join(dir, "peer.token")
	os.WriteFile(tokFile, []byte("s3cret-peer\n"), 0o600)

	var logs bytes.Buffer
	o, err := parseFlags([]string{"--auth-file", policy, "--auth-peer-token-file", tokFile}, &logs)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&logs)
	if err != nil || cfg.AuthFile != policy || cfg.AuthPeerToken != "s3cret-peer" || cfg.InsecureAuthWithoutTLS {
		t.Fatalf("config: file %q token %q insecure %v, %v", cfg.AuthFile, cfg.AuthPeerToken, cfg.InsecureAuthWithoutTLS, err)
	}
	if o, err := parseFlags([]string{"--auth-file", policy, "--insecure-auth-without-tls"}, &logs); err != nil {
		t.Fatal(err)
	} else if cfg, err := o.clusterConfig(&logs); err != nil || !cfg.InsecureAuthWithoutTLS {
		t.Fatalf("--insecure-auth-without-tls: %v, %v", cfg.InsecureAuthWithoutTLS, err)
	}
	if strings.Contains(logs.String(), "accessible to other users") {
		t.Fatalf("warning about a 0600 token file: %s", logs.String())
	}
	os.Chmod(tokFile, 0o644)
	if _, err := o.clusterConfig(&logs); err != nil || !strings.Contains(logs.String(), "accessible to other users") {
		t.Fatalf("no warning about a 0644 token file: %v %s", err, logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("the token shows in the logs: %s", logs.String())
	}

	// The help says what --insecure-auth-without-tls gives up.
	var help bytes.Buffer
	parseFlags([]string{"-h"}, &help)
	if h := strings.Join(strings.Fields(help.String()), " "); !strings.Contains(h, "-insecure-auth-without-tls") ||
		!strings.Contains(h, "the raft port accepts log entries") || !strings.Contains(h, "protect only the gRPC port") {
		t.Errorf("--help does not explain --insecure-auth-without-tls:\n%s", help.String())
	}

	os.Chmod(tokFile, 0o600)
	badPolicy := filepath.Join(dir, "bad.json")
	os.WriteFile(badPolicy, []byte(`{"certs": {"ops": "root"}}`), 0o644)
	empty := filepath.Join(dir, "empty.token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"token without policy", []string{"--auth-peer-token-file", tokFile}, "--auth-peer-token-file needs --auth-file"},
		{"empty token", []string{"--auth-file", policy, "--auth-peer-token-file", empty}, "want one token"},
		{"missing token file", []string{"--auth-file", policy, "--auth-peer-token-file", tokFile + "x"}, "no such file"},
		{"bad policy", []string{"--metrics-addr", "", "--data-dir", filepath.Join(dir, "d1"), "--auth-file", badPolicy, "--auth-peer-token-file", tokFile, "--insecure-auth-without-tls"}, `unknown role "root"`},
		{"no way to recognise peers", []string{"--metrics-addr", "", "--data-dir", filepath.Join(dir, "d2"), "--auth-file", policy, "--insecure-auth-without-tls"}, "nodes must recognise each other"},
		// Without TLS, the raft port is open to anyone: the operator must
		// say so.
		{"auth without TLS", []string{"--metrics-addr", "", "--data-dir", filepath.Join(dir, "d3"), "--auth-file", policy, "--auth-peer-token-file", tokFile}, "--insecure-auth-without-tls"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		out := stderr.String()
		if code == 0 || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 || strings.Contains(out, "s3cret") {
			t.Errorf("%s: exit %d, stderr %q; want a failure and one line with %q", c.name, code, out, c.want)
		}
	}
}
