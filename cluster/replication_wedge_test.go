package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
)

// rejectingLogStore fails the next reject StoreLogs calls, so that the
// follower that owns it answers the leader's AppendEntries with
// Success=false.
type rejectingLogStore struct {
	raft.LogStore
	reject atomic.Int32
}

func (s *rejectingLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *rejectingLogStore) StoreLogs(logs []*raft.Log) error {
	if s.reject.Add(-1) >= 0 {
		return errors.New("injected log store failure")
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *rejectingLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// A follower that rejects an AppendEntries (here its log store fails once)
// must receive the later entries once it accepts again. hashicorp/raft's
// pipelined replication wedges on such a rejection: its response decoder
// stops while the sender may park for ever on the pipeline's unbuffered
// channel (grafana/pyroscope#5518), so the leader heartbeats the follower
// but never sends it another entry, and raft's Shutdown then waits for the
// parked sender (CI: TestMembershipChangesWhileWriting's stop abandoned
// with exactly that stack). The node replicates without pipelining.
func TestFollowerRejectionDoesNotWedgeReplication(t *testing.T) {
	tc := newTestCluster(t)
	stores := map[string]*rejectingLogStore{}
	var nodes []*Node
	var seed string
	for i := 1; i <= 3; i++ {
		cfg := testConfig(t, fmt.Sprintf("n%d", i))
		cfg.BootstrapExpect = 3
		if seed != "" {
			cfg.Join = []string{seed}
		}
		var rs *rejectingLogStore
		logs, stable, closer, err := OpenRaftLogStore(LogStoreWAL, filepath.Join(cfg.DataDir, raftDirName), func(s raft.LogStore) raft.LogStore {
			rs = &rejectingLogStore{LogStore: s}
			return rs
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closer.Close() }) // after the node's stop, registered later
		stores[cfg.ID] = rs
		n := tc.start(cfg, &Deps{LogStore: logs, StableStore: stable})
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	tc.waitReady(nodes, 3)

	key := 0
	// Writes go to the leader (tc.kv is not safe for concurrent use).
	writes := func(leader *Node, count int) {
		tc.kv(leader)
		var wg sync.WaitGroup
		for w := range 4 { // several in flight, so the leader pipelines
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < count; i += 4 {
					req := &cairnpb.PutRequest{Key: fmt.Appendf(nil, "k%d-%d", key, i), Value: []byte("v")}
					deadline := time.Now().Add(15 * waitSlack * time.Second)
					for {
						_, err := tc.kv(leader).Put(ctxTimeout(t, 5*time.Second), req)
						if err == nil {
							break
						}
						if !retryable(err) || time.Now().After(deadline) {
							t.Errorf("put %s: %v", req.Key, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		key++
	}
	writes(tc.leader(), 50)
	for round := range 8 {
		leader := tc.leader()
		follower := otherThan(nodes, leader)
		stores[follower.ID()].reject.Store(1)
		writes(leader, 40)
		if t.Failed() {
			t.FailNow()
		}
		target := leader.raft.LastIndex()
		waitFor(t, 20*time.Second, fmt.Sprintf("round %d: %s (which rejected one append) to reach index %d", round, follower.ID(), target), func() bool {
			return follower.raft.LastIndex() >= target
		})
	}
}
