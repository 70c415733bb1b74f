package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// The limit flags reach the cluster configuration, bad values are refused
// naming their flag, and a gossip key file is read (with a warning if
// others can read it) but never echoed.
func TestSecurityFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(&stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestTimeout != 10*time.Second || cfg.MaxRequestTimeout != cluster.DefaultMaxRequestTimeout || cfg.MaxConcurrentStreams != cluster.DefaultMaxConcurrentStreams ||
		cfg.MaxConnsPerIP != cluster.DefaultMaxConnsPerIP {
		t.Fatalf("defaults: request timeout %v, max %v, streams %d, conns per IP %d", cfg.RequestTimeout, cfg.MaxRequestTimeout, cfg.MaxConcurrentStreams, cfg.MaxConnsPerIP)
	}
	o, _ = parseFlags([]string{"--request-timeout", "2s", "--max-request-timeout", "30s", "--max-concurrent-streams", "64", "--max-conns-per-ip", "8"}, &stderr)
	if cfg, err = o.clusterConfig(&stderr); err != nil || cfg.RequestTimeout != 2*time.Second || cfg.MaxRequestTimeout != 30*time.Second || cfg.MaxConcurrentStreams != 64 ||
		cfg.MaxConnsPerIP != 8 {
		t.Fatalf("set: %+v, %v", cfg, err)
	}
	o, _ = parseFlags([]string{"--max-conns-per-ip", "-1"}, &stderr)
	if cfg, err = o.clusterConfig(&stderr); err != nil || cfg.MaxConnsPerIP != -1 || cfg.Validate() != nil {
		t.Fatalf("--max-conns-per-ip -1: %d, %v, %v", cfg.MaxConnsPerIP, err, cfg.Validate())
	}
	for _, args := range [][]string{
		{"--request-timeout", "0s"},
		{"--request-timeout", "20s", "--max-request-timeout", "10s"},
		{"--max-concurrent-streams", "0"},
	} {
		o, _ = parseFlags(args, &stderr)
		if _, err := o.clusterConfig(&stderr); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[len(args)-2], "-")) {
			t.Errorf("%v: %v, want an error naming the flag", args, err)
		}
	}

	dir := t.TempDir()
	key := bytes.Repeat([]byte{9}, 32)
	name := filepath.Join(dir, "gossip.key")
	os.WriteFile(name, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
	var logs bytes.Buffer
	o, _ = parseFlags([]string{"--gossip-key-file", name}, &logs)
	if cfg, err = o.clusterConfig(&logs); err != nil || !bytes.Equal(cfg.GossipKey, key) {
		t.Fatalf("--gossip-key-file: key %x, %v", cfg.GossipKey, err)
	}
	if strings.Contains(logs.String(), "accessible to other users") {
		t.Fatalf("warning about a 0600 key file: %s", logs.String())
	}
	os.Chmod(name, 0o644)
	logs.Reset()
	if cfg, err = o.clusterConfig(&logs); err != nil || !bytes.Equal(cfg.GossipKey, key) {
		t.Fatalf("--gossip-key-file 0644: %v", err)
	}
	if !strings.Contains(logs.String(), "accessible to other users") || strings.Contains(logs.String(), base64.StdEncoding.EncodeToString(key)) {
		t.Fatalf("0644 key file: log %q, want a warning without the key", logs.String())
	}
	os.WriteFile(name, []byte("bm90IGEga2V5"), 0o600)
	if _, err = o.clusterConfig(&logs); err == nil || strings.Contains(err.Error(), "bm90IGEga2V5") {
		t.Fatalf("bad key file: %v, want an error that does not echo it", err)
	}
	// A --config file that sets gossip-key is a key file too.
	conf := filepath.Join(dir, "node.json")
	os.WriteFile(conf, []byte(`{"gossip-key": "`+base64.StdEncoding.EncodeToString(key)+`"}`), 0o644)
	logs.Reset()
	o, _ = parseFlags([]string{"--config", conf}, &logs)
	if cfg, err = o.clusterConfig(&logs); err != nil || !bytes.Equal(cfg.GossipKey, key) || !strings.Contains(logs.String(), "accessible to other users") {
		t.Fatalf("config file with gossip-key, mode 0644: %v, log %q", err, logs.String())
	}
	o, _ = parseFlags([]string{"--gossip-key-file", name, "--gossip-key", base64.StdEncoding.EncodeToString(key)}, &logs)
	if _, err = o.clusterConfig(&logs); err == nil {
		t.Fatal("--gossip-key with --gossip-key-file accepted")
	}
}
