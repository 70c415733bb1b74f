package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSnapshotSettingsReachRaft: the snapshot settings of a Config, or
// their defaults, are the running raft's; bad values are refused by New.
func TestSnapshotSettingsReachRaft(t *testing.T) {
	for _, tc := range []struct {
		name                string
		in                  Config
		interval            time.Duration
		threshold, trailing uint64
		retain              int
	}{
		{"defaults", Config{}, 120 * time.Second, 8192, 10240, 2},
		{"set", Config{SnapshotInterval: 7 * time.Second, SnapshotThreshold: 300, TrailingLogs: 40, SnapshotRetain: 5},
			7 * time.Second, 300, 40, 5},
	} {
		cfg := tc.in
		cfg.ID, cfg.DataDir = "x", "x"
		c, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		rc := c.raftConfig()
		if rc.SnapshotInterval != tc.interval || rc.SnapshotThreshold != tc.threshold ||
			rc.TrailingLogs != tc.trailing || c.SnapshotRetain != tc.retain {
			t.Errorf("%s: raft config interval %v threshold %d trailing %d, retain %d; want %v %d %d %d", tc.name,
				rc.SnapshotInterval, rc.SnapshotThreshold, rc.TrailingLogs, c.SnapshotRetain,
				tc.interval, tc.threshold, tc.trailing, tc.retain)
		}
	}

	// A running node's raft has them.
	tcl := newTestCluster(t)
	cfg := testConfig(t, "n1")
	cfg.BootstrapExpect = 1
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = 3*time.Second, 123, 45
	n := tcl.start(cfg, nil)
	if rc := n.raft.ReloadableConfig(); rc.SnapshotInterval != 3*time.Second || rc.SnapshotThreshold != 123 || rc.TrailingLogs != 45 {
		t.Errorf("running raft: %+v", rc)
	}

	for _, bad := range []struct {
		c    Config
		want string
	}{
		{Config{SnapshotRetain: -1}, "snapshot retain"},
		{Config{SnapshotInterval: time.Millisecond}, "snapshot interval"},
		{Config{SnapshotInterval: -time.Second}, "snapshot interval"},
	} {
		bad.c.ID, bad.c.DataDir = "x", "x"
		if _, err := New(bad.c, nil); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig about %s", bad.c, err, bad.want)
		}
	}
}
