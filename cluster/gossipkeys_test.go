package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keyringOp runs a GossipKeyring operation through node n and returns the
// answer, failing the test on an RPC error or a node's error.
func keyringOp(t *testing.T, tc *testCluster, n *Node, op cairnpb.GossipKeyringRequest_Op, key []byte, nodes int) *cairnpb.GossipKeyringResponse {
	t.Helper()
	resp, err := tc.admin(n).GossipKeyring(ctxTimeout(t, 10*time.Second), &cairnpb.GossipKeyringRequest{Op: op, Key: key})
	if err != nil {
		t.Fatalf("%v: %v", op, err)
	}
	if len(resp.GetNodes()) != nodes {
		t.Fatalf("%v answered for %d nodes, want %d: %v", op, len(resp.GetNodes()), nodes, resp)
	}
	for _, nk := range resp.GetNodes() {
		if nk.GetError() != "" {
			t.Fatalf("%v on %s: %s", op, nk.GetNodeId(), nk.GetError())
		}
	}
	return resp
}

// checkKeyring checks that every node of resp has primary as its primary
// key and exactly keys.
func checkKeyring(t *testing.T, resp *cairnpb.GossipKeyringResponse, primary []byte, keys ...[]byte) {
	t.Helper()
	var want []string
	for _, k := range keys {
		want = append(want, membership.KeyFingerprint(k))
	}
	for _, nk := range resp.GetNodes() {
		if nk.GetPrimary() != membership.KeyFingerprint(primary) {
			t.Fatalf("node %s: primary key %s, want %s", nk.GetNodeId(), nk.GetPrimary(), membership.KeyFingerprint(primary))
		}
		got := strings.Join(nk.GetFingerprints(), ",")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Fatalf("node %s: keys %s, want %s", nk.GetNodeId(), got, strings.Join(want, ","))
			}
		}
		if len(nk.GetFingerprints()) != len(want) {
			t.Fatalf("node %s: keys %s, want %s", nk.GetNodeId(), got, strings.Join(want, ","))
		}
	}
}

// seesAlive reports whether n's gossip view has id alive.
func seesAlive(n *Node, id string) bool {
	m, ok := n.member(id)
	return ok && m.State == membership.StateAlive
}

// TestGossipKeyRotation rotates the gossip key of a running 3-node cluster
// (install, use, remove, through one node's GossipKeyring), then checks
// that a node started with only the new key joins, that a node with the
// old key cannot, and that a member restarted with its original
// configuration comes back with the rotated keyring (the keyring file).
func TestGossipKeyRotation(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	tc := newTestCluster(t)
	// Every log line of every node, at debug level, to check that no key
	// is ever logged.
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nodes := tc.formCluster(3, func(c *Config) { c.GossipKey, c.Logger = oldKey, logger.With("node", c.ID) })
	n1 := nodes[0]
	// The operations reach the members the serving node sees alive.
	waitFor(t, 10*time.Second, "every node seeing the others alive", func() bool {
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b && !seesAlive(a, b.ID()) {
					return false
				}
			}
		}
		return true
	})

	checkKeyring(t, keyringOp(t, tc, n1, cairnpb.GossipKeyringRequest_LIST, nil, 3), oldKey, oldKey)

	// Refused: using or removing a key not installed, a malformed key.
	_, err := tc.admin(n1).GossipKeyring(ctxTimeout(t, 5*time.Second), &cairnpb.GossipKeyringRequest{Op: cairnpb.GossipKeyringRequest_USE, Key: newKey})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("using a key not installed: %v, want InvalidArgument", err)
	}
	_, err = tc.admin(n1).GossipKeyring(ctxTimeout(t, 5*time.Second), &cairnpb.GossipKeyringRequest{Op: cairnpb.GossipKeyringRequest_INSTALL, Key: []byte("short")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("installing a 5-byte key: %v, want InvalidArgument", err)
	}

	checkKeyring(t, keyringOp(t, tc, n1, cairnpb.GossipKeyringRequest_INSTALL, newKey, 3), oldKey, oldKey, newKey)
	checkKeyring(t, keyringOp(t, tc, nodes[1], cairnpb.GossipKeyringRequest_USE, newKey, 3), newKey, oldKey, newKey)
	// Removing the primary key is refused on every node.
	resp, err := tc.admin(n1).GossipKeyring(ctxTimeout(t, 5*time.Second), &cairnpb.GossipKeyringRequest{Op: cairnpb.GossipKeyringRequest_REMOVE, Key: newKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, nk := range resp.GetNodes() {
		if !strings.Contains(nk.GetError(), "primary gossip key") {
			t.Fatalf("removing the primary key on %s: %q, want a refusal", nk.GetNodeId(), nk.GetError())
		}
	}
	checkKeyring(t, keyringOp(t, tc, n1, cairnpb.GossipKeyringRequest_REMOVE, oldKey, 3), newKey, newKey)

	// The cluster still gossips: a member's metadata change (a restart with
	// the old configuration; the keyring file gives it the new key)
	// reaches the others.
	if err := nodes[1].kill(); err != nil {
		t.Fatal(err)
	}
	n2 := tc.restart("n2")
	waitFor(t, 10*time.Second, "n2 back in gossip after a restart with its original --gossip-key", func() bool {
		return seesAlive(n1, "n2") && seesAlive(n2, "n1") && seesAlive(n2, "n3")
	})
	if p, _, _ := n2.disc.Keys(); !bytes.Equal(p, newKey) {
		t.Fatalf("restarted n2's primary key is %s, want the rotated %s", membership.KeyFingerprint(p), membership.KeyFingerprint(newKey))
	}
	if st, err := os.Stat(filepath.Join(tc.cfgs["n2"].DataDir, gossipKeyringFileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	// A node with only the new key joins.
	c4 := testConfig(t, "n4")
	c4.GossipKey, c4.Join = newKey, []string{n1.GossipAddr()}
	n4 := tc.start(c4, nil)
	waitFor(t, 10*time.Second, "n4 (new key) in n1's gossip view", func() bool { return seesAlive(n1, "n4") })

	// A node with the old key does not: its join's push-pull cannot be
	// decrypted, and nobody learns of it.
	c5 := testConfig(t, "n5")
	c5.GossipKey = oldKey
	n5 := tc.start(c5, nil)
	if got, err := n5.disc.Join([]string{n1.GossipAddr(), n4.GossipAddr()}); err == nil || got != 0 {
		t.Fatalf("a node with the removed key joined %d seeds (err %v)", got, err)
	}
	if _, ok := n1.member("n5"); ok {
		t.Fatal("n1 knows n5, which has the removed key")
	}
	if len(n5.disc.Members()) != 1 {
		t.Fatalf("n5 (wrong key) sees %d members", len(n5.disc.Members()))
	}

	out := logs.String()
	if !strings.Contains(out, "gossip keyring changed") {
		t.Fatal("the keyring changes were not logged")
	}
	for _, k := range [][]byte{oldKey, newKey} {
		for _, enc := range []string{base64.StdEncoding.EncodeToString(k), hex.EncodeToString(k), string(k)} {
			if strings.Contains(out, enc) {
				t.Fatalf("a gossip key is in the logs (as %q)", enc)
			}
		}
	}
}

// TestGossipKeyringUnencrypted: a node without a gossip key has no
// keyring to rotate.
func TestGossipKeyringUnencrypted(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, nil)[0]
	_, err := tc.admin(n).GossipKeyring(ctxTimeout(t, 5*time.Second), &cairnpb.GossipKeyringRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("keyring list on an unencrypted node: %v, want FailedPrecondition", err)
	}
	if _, err := os.Stat(filepath.Join(tc.cfgs["n1"].DataDir, gossipKeyringFileName)); !os.IsNotExist(err) {
		t.Fatalf("an unencrypted node wrote a keyring file: %v", err)
	}
}
