package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// TestToken: --token and $CAIRN_TOKEN against a node with an
// authorization policy.
func TestToken(t *testing.T) {
	dir := t.TempDir()
	hash := func(tok string) string {
		h := sha256.Sum256([]byte(tok))
		return "sha256:" + hex.EncodeToString(h[:])
	}
	policy := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(policy, []byte(`{"tokens": {"`+hash("ro-secret")+`": "read-only", "`+hash("rw-secret")+`": "read-write", "`+
		hash("peer-secret")+`": "peer"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(dir, "auth1")
	cfg.BootstrapExpect = 1
	cfg.AuthFile, cfg.AuthPeerToken = policy, "peer-secret"
	n, err := cluster.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNodes([]*cluster.Node{n}, 20*time.Second) })
	if err := waitLeader([]*cluster.Node{n}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ep := "--endpoints=" + n.GRPCAddr()
	t.Setenv(envToken, "")

	r := cairn(t, "", ep, "put", "k", "v")
	if r.code != 1 || !strings.Contains(r.stderr, "unauthenticated") {
		t.Fatalf("put without a token: %+v", r)
	}
	ok(t, "", ep, "--token", "rw-secret", "put", "k", "v")
	t.Setenv(envToken, "ro-secret")
	if out := ok(t, "", ep, "get", "k"); strings.TrimSpace(out) != "v" {
		t.Fatalf("get with $%s: %q", envToken, out)
	}
	r = cairn(t, "", ep, "put", "k", "w")
	if r.code != 1 || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "read-write") ||
		strings.Contains(r.stderr, "ro-secret") {
		t.Fatalf("put with a read-only $%s: %+v", envToken, r)
	}
	// The flag wins over the environment.
	ok(t, "", ep, "--token", "rw-secret", "put", "k", "w")
	if out := ok(t, "", ep, "get", "k"); strings.TrimSpace(out) != "w" {
		t.Fatalf("get: %q", out)
	}
}
