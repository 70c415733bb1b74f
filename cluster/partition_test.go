package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
)

// TestPartitionedLeaderServesNoLinearizableRead isolates the leader's raft
// traffic (raft's in-memory transport; gossip and gRPC still work). The
// majority elects a new leader and overwrites a key. From then on, no
// linearizable read through the old leader may return the old value: each
// fails or (forwarded to the new leader) returns the new one, and the old
// leader's read-index path fails.
//
// Reads through the old leader that begin before the new value is
// acknowledged may still return the old one: right after the partition the
// old leader is still the only leader (its in-flight heartbeats may even
// confirm it), and such a read linearizes before the overwrite.
func TestPartitionedLeaderServesNoLinearizableRead(t *testing.T) {
	tc := newTestCluster(t)
	trans := map[string]*raft.InmemTransport{}
	var nodes []*Node
	var seed string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		_, tr := raft.NewInmemTransport(raft.ServerAddress(id + ".inmem:1"))
		trans[id] = tr
		cfg := testConfig(t, id)
		cfg.BootstrapExpect = 3
		if seed != "" {
			cfg.Join = []string{seed}
		}
		n := tc.start(cfg, &Deps{Transport: tr})
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	connectAll := func() {
		for _, a := range trans {
			for _, b := range trans {
				if a != b {
					a.Connect(b.LocalAddr(), b)
				}
			}
		}
	}
	connectAll()
	old := tc.waitReady(nodes, 3)
	put(t, tc.kv(old), "k", "old")

	// Partition the leader's raft traffic both ways.
	trans[old.ID()].DisconnectAll()
	for id, tr := range trans {
		if id != old.ID() {
			tr.Disconnect(trans[old.ID()].LocalAddr())
		}
	}

	// Reads through the old leader run throughout.
	type result struct {
		value        string
		err          error
		start        time.Time
		afterNewAck  bool
		sinceNewWait time.Duration
	}
	var newAcked time.Time
	ackedCh := make(chan time.Time, 1)
	results := make(chan result, 10000)
	var reads atomic.Int64 // reads completed
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		kv := tc.kv(old)
		var acked time.Time
		for {
			select {
			case <-stop:
				return
			case acked = <-ackedCh:
			default:
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			r, err := kv.Get(ctx, &cairnpb.GetRequest{Key: []byte("k")})
			cancel()
			reads.Add(1)
			res := result{value: string(r.GetKv().GetValue()), err: err, start: start}
			if !acked.IsZero() && start.After(acked) {
				res.afterNewAck, res.sinceNewWait = true, start.Sub(acked)
			}
			select {
			case results <- res:
			default:
			}
		}
	}()

	var majority []*Node
	for _, n := range nodes {
		if n != old {
			majority = append(majority, n)
		}
	}
	var newLeader *Node
	waitFor(t, 10*time.Second, "a new leader", func() bool {
		for _, n := range majority {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				newLeader = n
				return true
			}
		}
		return false
	})
	put(t, tc.kv(newLeader), "k", "new")
	newAcked = time.Now()
	ackedCh <- newAcked

	// The old leader's read-index path fails now.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if _, err := old.readIndex(ctx); err == nil {
		t.Error("the partitioned leader completed a read index after the new leader's write")
	}
	cancel()
	// Let the reader run against the old leader for a while (it steps
	// down and knows no leader to forward to).
	waitFor(t, 10*time.Second, "the old leader to step down", func() bool { return !old.IsLeader() })
	from := reads.Load()
	waitFor(t, 20*time.Second, "5 more reads through the old leader", func() bool { return reads.Load() >= from+5 })
	close(stop)
	<-readerDone
	close(results)
	after, failedAfter := 0, 0
	for r := range results {
		if !r.afterNewAck {
			continue
		}
		after++
		if r.err != nil {
			failedAfter++
			continue
		}
		if r.value != "new" {
			t.Errorf("a linearizable read through the old leader began %v after the new value was acknowledged and returned %q",
				r.sinceNewWait, r.value)
		}
	}
	t.Logf("reads through the old leader begun after the overwrite: %d, of which %d failed", after, failedAfter)
	if after == 0 {
		t.Fatal("no read through the old leader began after the overwrite")
	}

	// A serializable read on the old leader may be stale: that is its
	// contract.
	if got := get(t, tc.kv(old), "k", cairnpb.Consistency_SERIALIZABLE).GetKv(); string(got.GetValue()) != "old" {
		t.Errorf("serializable read on the partitioned node = %v", got)
	}

	// Heal: the old leader rejoins as a follower and catches up.
	connectAll()
	waitFor(t, 10*time.Second, "the old leader to catch up", func() bool {
		kv, err := old.fsm.Get([]byte("k"))
		return err == nil && string(kv.GetValue()) == "new"
	})
	if got := get(t, tc.kv(old), "k", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "new" {
		t.Errorf("after healing: %v", got)
	}
}
