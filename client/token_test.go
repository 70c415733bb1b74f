package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/cluster"
)

// TestToken runs the client against a node with an authorization policy:
// Config.Token is sent with every call, and the node's refusals come back
// as ErrUnauthenticated and ErrPermissionDenied, without retries.
func TestToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	dir := t.TempDir()
	hash := func(tok string) string {
		h := sha256.Sum256([]byte(tok))
		return "sha256:" + hex.EncodeToString(h[:])
	}
	policy := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(policy, []byte(`{"tokens": {"`+hash("ro")+`": "read-only", "`+hash("rw")+`": "read-write", "`+
		hash("peer")+`": "peer"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(dir, "n1")
	cfg.BootstrapExpect = 1
	cfg.AuthFile, cfg.AuthPeerToken, cfg.InsecureAuthWithoutTLS = policy, "peer", true
	n, err := cluster.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{nodes: []*cluster.Node{n}}
	t.Cleanup(tc.stop)
	if err := tc.waitLeader(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, time.Minute)
	eps := []string{n.GRPCAddr()}

	rw := newClient(t, client.Config{Endpoints: eps, Token: "rw"})
	if _, err := rw.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("read-write put: %v", err)
	}
	ro := newClient(t, client.Config{Endpoints: eps, Token: "ro"})
	if kv, err := ro.Get(ctx, []byte("k")); err != nil || string(kv.Value) != "v" {
		t.Fatalf("read-only get: %v %v", kv, err)
	}
	_, err = ro.Put(ctx, []byte("k"), []byte("w"))
	var e *client.Error
	if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "read-write") ||
		!errors.As(err, &e) || e.Attempts != 1 {
		t.Fatalf("read-only put: %v (want ErrPermissionDenied naming read-write, after one attempt)", err)
	}
	if _, _, err := ro.Snapshot(ctx); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("read-only snapshot: %v", err)
	}
	for _, tok := range []string{"", "wrong"} {
		c := newClient(t, client.Config{Endpoints: eps, Token: tok})
		if _, err := c.Get(ctx, []byte("k")); !errors.Is(err, client.ErrUnauthenticated) || strings.Contains(err.Error(), "wrong") {
			t.Fatalf("get with token %q: %v", tok, err)
		}
	}
	if kv, err := rw.Get(ctx, []byte("k")); err != nil || string(kv.Value) != "v" {
		t.Fatalf("the refused put wrote: %v %v", kv, err)
	}
	for _, bad := range []string{"a b", " x", "tab\t", "é"} {
		if _, err := client.New(client.Config{Endpoints: eps, Token: bad}); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
}
