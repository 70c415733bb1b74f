package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// authNode starts a one-node cluster with an authorization policy whose
// tokens are ro-secret (read-only), rw-secret (read-write) and peer-secret
// (peer), and returns it once it leads.
func authNode(t *testing.T) *cluster.Node {
	t.Helper()
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
	cfg.AuthFile, cfg.AuthPeerToken, cfg.InsecureAuthWithoutTLS = policy, "peer-secret", true
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
	return n
}

// TestToken: --token and $CAIRN_TOKEN against a node with an
// authorization policy.
func TestToken(t *testing.T) {
	n := authNode(t)
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

// TestCLIRefused: a node that refuses the credentials is up: status shows
// it as refused with the node's reason, not as unreachable, and fails
// (exit 1) as when no node answers; with one node answering it succeeds,
// as with an unreachable one. The other admin commands report the
// refusal at once, with the role needed.
func TestCLIRefused(t *testing.T) {
	n := authNode(t)
	addr := n.GRPCAddr()
	t.Setenv(envToken, "")
	row := func(state string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\? +` + regexp.QuoteMeta(addr) + ` +` + state + ` +- +- +-`)
	}
	reason := func(why string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\? \(` + regexp.QuoteMeta(addr) + `\) refused: .*` + why)
	}
	for _, c := range []struct {
		name, why string
		args      []string
	}{
		{"unknown token", "unauthenticated: auth: unknown bearer token", []string{"--token", "bad-secret"}},
		{"no token", "unauthenticated: .*needs role read-only", nil},
	} {
		for _, eps := range []string{addr, addr + ",127.0.0.1:1"} {
			args := append(append([]string{"--timeout", "3s", "--endpoints", eps}, c.args...), "status")
			r := cairn(t, "", args...)
			if r.code != 1 || !row("refused").MatchString(r.stdout) || !reason(c.why).MatchString(r.stdout) ||
				row("unreachable").MatchString(r.stdout) || strings.Contains(r.stdout, addr+") unreachable") {
				t.Errorf("status, %s, endpoints %s: exit %d\n%s%s", c.name, eps, r.code, r.stdout, r.stderr)
				continue
			}
			want := "status: refused by every node (cairn: status: unauthenticated"
			if eps != addr {
				want = "status: no node answered: 1 unreachable, 1 refused (cairn: status: unauthenticated"
			}
			if !strings.Contains(r.stderr, want) {
				t.Errorf("status, %s, endpoints %s: stderr %q, want %q", c.name, eps, r.stderr, want)
			}
		}
	}
	// JSON says so too.
	r := cairn(t, "", "--endpoints", addr, "--token", "bad-secret", "status", "-o", "json")
	if r.code != 1 || !strings.Contains(r.stdout, `"failure": "refused"`) {
		t.Errorf("status -o json with a bad token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A token the node takes, and an unreachable endpoint: exit 0, as
	// before.
	r = cairn(t, "", "--endpoints", addr+",127.0.0.1:1", "--token", "ro-secret", "status", "--only-endpoints")
	if r.code != 0 || !regexp.MustCompile(`(?m)^auth1 +`+regexp.QuoteMeta(addr)+` +leader `).MatchString(r.stdout) {
		t.Errorf("status with a read-only token and an unreachable endpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// The other admin commands: the refusal, at once, naming what is
	// missing; never "unreachable" or a timeout.
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"members, unknown token", []string{"--token", "bad-secret", "members"}, "unauthenticated: auth: unknown bearer token"},
		{"snapshot take, read-only", []string{"--token", "ro-secret", "snapshot", "take"}, "permission denied: .*needs role admin"},
		{"snapshot save, read-only", []string{"--token", "ro-secret", "snapshot", "save", out}, "permission denied: .*needs role admin"},
		{"trace start, read-only", []string{"--token", "ro-secret", "trace", "start", "--node", addr, "--duration", "1s", "--out", out},
			"permission denied: .*needs role admin"},
		{"member add, read-write", []string{"--token", "rw-secret", "member", "add", "n9", "127.0.0.1:1"}, "permission denied: .*needs role admin"},
	} {
		start := time.Now()
		r := cairn(t, "", append([]string{"--endpoints", addr, "--timeout", "20s"}, c.args...)...)
		took := time.Since(start)
		if r.code != 1 || !regexp.MustCompile(c.want).MatchString(r.stderr) || strings.Contains(r.stderr, "unreachable") ||
			strings.Contains(r.stderr, "deadline") || took > 10*time.Second {
			t.Errorf("%s: exit %d after %v, stderr %q; want exit 1 at once with %q", c.name, r.code, took, r.stderr, c.want)
		}
	}
}
