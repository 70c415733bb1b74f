package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster/membership"
)

// `cairn gossip-key` rotates the shared cluster's gossip key: install,
// use, remove, each reaching the three nodes; keys appear only as
// fingerprints; refusals exit non-zero.
func TestCLIGossipKey(t *testing.T) {
	testNodes(t)
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 24)
	oldB64, newB64 := base64.StdEncoding.EncodeToString(oldKey), base64.StdEncoding.EncodeToString(newKey)
	oldFP, newFP := membership.KeyFingerprint(oldKey), membership.KeyFingerprint(newKey)

	type nodeKeys struct {
		NodeID  string   `json:"node_id"`
		Primary string   `json:"primary"`
		Keys    []string `json:"keys"`
		Error   string   `json:"error"`
	}
	check := func(what, primary string, keys ...string) {
		t.Helper()
		var nodes []nodeKeys
		out := ok(t, "", "gossip-key", "list", "-o", "json")
		if err := json.Unmarshal([]byte(out), &nodes); err != nil || len(nodes) != 3 {
			t.Fatalf("%s: gossip-key list: %v\n%s", what, err, out)
		}
		for _, n := range nodes {
			if n.Primary != primary || strings.Join(n.Keys, ",") != strings.Join(keys, ",") || n.Error != "" {
				t.Fatalf("%s: node %+v, want primary %s and keys %v", what, n, primary, keys)
			}
		}
		if strings.Contains(out, oldB64) || strings.Contains(out, newB64) {
			t.Fatalf("%s: list shows a key:\n%s", what, out)
		}
	}
	sorted := func(a, b string) []string {
		if a > b {
			a, b = b, a
		}
		return []string{a, b}
	}
	// The operations reach the members the serving node sees alive: wait
	// until it sees all three.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var nodes []nodeKeys
		if err := json.Unmarshal([]byte(ok(t, "", "gossip-key", "list", "-o", "json")), &nodes); err == nil && len(nodes) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gossip-key list never reached 3 nodes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	check("before", oldFP, oldFP)
	if out := ok(t, "", "gossip-key", "install", newB64); !strings.Contains(out, "NODE") || strings.Count(out, newFP) != 3 {
		t.Fatalf("install:\n%s", out)
	}
	check("installed", oldFP, sorted(oldFP, newFP)...)
	ok(t, "", "gossip-key", "use", newB64)
	check("used", newFP, sorted(oldFP, newFP)...)
	if r := cairn(t, "", "gossip-key", "remove", newB64); r.code != 1 || !strings.Contains(r.stderr, "failed on 3 of 3 nodes") || !strings.Contains(r.stdout, "primary gossip key") {
		t.Fatalf("removing the primary key: %+v", r)
	}
	ok(t, "", "gossip-key", "remove", oldB64)
	check("removed", newFP, newFP)
	if r := cairn(t, "", "gossip-key", "install", "not-base64"); r.code != 2 || !strings.Contains(r.stderr, "base64 of 16, 24 or 32 bytes") {
		t.Fatalf("bad key: %+v", r)
	}
	if r := cairn(t, "", "gossip-key", "use", oldB64); r.code != 1 || !strings.Contains(r.stderr, "not in the gossip keyring") {
		t.Fatalf("using a removed key: %+v", r)
	}
}
