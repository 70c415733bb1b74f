package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestReadIndexAgreesWithBarrierRead checks the read-index path against the
// dumb linearizable read (a raft barrier, then a local read) while one
// writer increments a counter: every read returns at least the last value
// acknowledged before it began, and the two kinds of read, alternated, never
// go back in time relative to each other.
func TestReadIndexAgreesWithBarrierRead(t *testing.T) {
	tc := newTestCluster(t)
	tc.formCluster(3, nil)
	tc.setLoadTargets()
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); ; {
			select {
			case <-stop:
				return
			default:
			}
			// Any node: followers forward. A failed put is retried (it
			// writes the same value, so applying it twice is harmless).
			conns := tc.liveConns()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cairnpb.NewKVClient(conns[i%int64(len(conns))]).Put(ctx, &cairnpb.PutRequest{Key: []byte("ctr"), Value: []byte(strconv.FormatInt(i, 10))})
			cancel()
			if err == nil {
				acked.Store(i)
				i++
			}
		}
	}()
	value := func(kvp *cairnpb.KeyValue) int64 {
		if kvp == nil {
			return 0
		}
		v, err := strconv.ParseInt(string(kvp.GetValue()), 10, 64)
		if err != nil {
			t.Fatalf("bad counter %q", kvp.GetValue())
		}
		return v
	}
	// The reads on the leader retry on another leader if leadership moves
	// (possible on a loaded machine); only successful reads are checked.
	readIndexRead := func() int64 {
		for {
			leader := tc.leader()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := leader.readIndex(ctx)
			cancel()
			if err != nil {
				t.Logf("read index on %s: %v; retrying", leader.ID(), err)
				continue
			}
			kvp, err := leader.fsm.Get([]byte("ctr"))
			if err != nil {
				t.Fatal(err)
			}
			return value(kvp)
		}
	}
	barrierRead := func() int64 {
		for {
			leader := tc.leader()
			if err := leader.raft.Barrier(5 * time.Second).Error(); err != nil {
				t.Logf("barrier on %s: %v; retrying", leader.ID(), err)
				continue
			}
			kvp, err := leader.fsm.Get([]byte("ctr"))
			if err != nil {
				t.Fatal(err)
			}
			return value(kvp)
		}
	}
	forwardedRead := func() int64 {
		for {
			var follower *Node
			for _, n := range tc.live() {
				if !n.IsLeader() {
					follower = n
				}
			}
			r, err := tc.kv(follower).Get(ctxTimeout(t, 5*time.Second), &cairnpb.GetRequest{Key: []byte("ctr")})
			if err != nil {
				t.Logf("read through %s: %v; retrying", follower.ID(), err)
				continue
			}
			return value(r.GetKv())
		}
	}
	prev := int64(0)
	reads := []func() int64{readIndexRead, barrierRead, forwardedRead}
	for i := range 300 {
		lo := acked.Load()
		v := reads[i%len(reads)]()
		if v < lo || v < prev {
			t.Fatalf("read %d (kind %d) = %d; acknowledged before it began: %d; previous read: %d", i, i%len(reads), v, lo, prev)
		}
		prev = v
	}
	close(stop)
	wg.Wait()
	if acked.Load() < 10 {
		t.Fatalf("only %d writes during the reads", acked.Load())
	}
}

// TestForwardHopLimit: a request that has been forwarded MaxForwardHops
// times fails on a follower with Unavailable and a NotLeader detail naming
// the leader, instead of being forwarded again.
func TestForwardHopLimit(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	leader := tc.leader()
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 5*time.Second), cairnpb.ForwardHopsKey, fmt.Sprint(cairnpb.MaxForwardHops))
	_, err := tc.kv(follower).Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || len(st.Details()) != 1 {
		t.Fatalf("put with exhausted hops: %v", err)
	}
	nl, ok := st.Details()[0].(*cairnpb.NotLeader)
	if !ok || tc.nodes[nl.GetLeaderId()] == nil || nl.GetLeaderGrpcAddr() != tc.nodes[nl.GetLeaderId()].GRPCAddr() {
		t.Fatalf("detail = %v", st.Details())
	}
	// The leader itself serves it: hops only matter for forwarding.
	if _, err := tc.kv(leader).Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil && leader.IsLeader() {
		t.Fatal(err)
	}
	put(t, tc.kv(leader), "k", "v")
	// Admin requests forward too.
	resp, err := tc.admin(follower).TransferLeader(ctxTimeout(t, 10*time.Second), &cairnpb.TransferLeaderRequest{Id: follower.ID()})
	if err != nil || resp.GetLeaderId() != follower.ID() {
		t.Fatalf("transfer to %s: %v, %v", follower.ID(), resp, err)
	}
	waitFor(t, 10*time.Second, "the new leader to be ready", func() bool {
		return follower.IsLeader() && follower.readyTerm.Load() == follower.raft.CurrentTerm()
	})
	if got := get(t, tc.kv(leader), "k", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "v" {
		t.Fatalf("after the transfer: %v", got)
	}
}

// TestReadIndexOverNonFSMEntries: when the newest committed entries are a
// barrier and a no-op, which raft never hands to the FSM, a read index
// still completes without waiting for another write.
func TestReadIndexOverNonFSMEntries(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	put(t, tc.kv(n), "k", "v")
	for range 3 {
		if err := n.raft.Barrier(time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if n.raft.CommitIndex() <= n.AppliedIndex() {
		t.Fatalf("commit index %d, applied %d: no trailing barrier", n.raft.CommitIndex(), n.AppliedIndex())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	before := n.raft.CommitIndex()
	idx, err := n.readIndex(ctx)
	if err != nil {
		t.Fatalf("read index over trailing barriers: %v", err)
	}
	// The read index is the commit index when the read began.
	if idx != before {
		t.Fatalf("read index %d, commit index at the read's start %d", idx, before)
	}
}

// TestReadRoundsAreBatched: concurrent linearizable reads share the
// quorum rounds that confirm leadership, and confirming writes nothing to
// the raft log.
func TestReadRoundsAreBatched(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	n := tc.waitReady(nodes, 3)
	put(t, tc.kv(n), "k", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const reads = 64
	before, rounds := n.raft.LastIndex(), n.reads.rounds.Load()
	errs := make(chan error, reads)
	for range reads {
		go func() {
			_, err := n.readIndex(ctx)
			errs <- err
		}()
	}
	for range reads {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if grew := n.raft.LastIndex() - before; grew != 0 {
		t.Errorf("%d reads appended %d log entries", reads, grew)
	}
	if r := n.reads.rounds.Load() - rounds; r >= reads {
		t.Fatalf("%d reads took %d rounds: rounds are not batched", reads, r)
	} else {
		t.Logf("%d concurrent reads took %d confirmation rounds", reads, r)
	}
}

// TestStaleLeaderServesNoRead: a leader cut off from the others' raft
// traffic that still believes it leads (its leader lease is long) while
// the majority has elected a new leader and acknowledged an overwrite must
// not complete a read index, nor serve the old value through gRPC. This is
// the hazard of a paused leader: the old leader's view is stale, and only
// the followers' current terms (the Confirm round) tell it so.
func TestStaleLeaderServesNoRead(t *testing.T) {
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
		if i == 1 {
			// n1 keeps believing it leads for up to 2 leases after it
			// loses contact (raft checks its lease every lease).
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 6*time.Second, 6*time.Second, 6*time.Second
		} else {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 1500*time.Millisecond, 1500*time.Millisecond, time.Second
		}
		if seed != "" {
			cfg.Join = []string{seed}
		}
		n := tc.start(cfg, &Deps{Transport: tr})
		if seed == "" {
			seed = n.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	for _, a := range trans {
		for _, b := range trans {
			if a != b {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	leader := tc.waitReady(nodes, 3)
	old := nodes[0]
	if leader != old {
		if err := leader.transferLeadership(ctxTimeout(t, 20*time.Second), old.ID()); err != nil {
			t.Fatalf("moving leadership to %s: %v", old.ID(), err)
		}
	}
	if got := tc.waitReady(nodes, 3); got != old {
		t.Fatalf("leader is %s, want %s", got.ID(), old.ID())
	}
	put(t, tc.kv(old), "k", "old")
	if _, err := old.readIndex(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("read index on the connected leader: %v", err)
	}

	trans[old.ID()].DisconnectAll()
	for id, tr := range trans {
		if id != old.ID() {
			tr.Disconnect(trans[old.ID()].LocalAddr())
		}
	}
	var newLeader *Node
	waitFor(t, 20*time.Second, "a new leader", func() bool {
		for _, n := range nodes[1:] {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				newLeader = n
				return true
			}
		}
		return false
	})
	put(t, tc.kv(newLeader), "k", "new")
	if !old.IsLeader() {
		t.Skip("the old leader stepped down before the check (machine too slow for its lease)")
	}
	_, err := old.readIndex(ctxTimeout(t, 5*time.Second))
	if err == nil {
		kv, _ := old.fsm.Get([]byte("k"))
		t.Fatalf("the stale leader completed a read index after the overwrite (it would serve %q)", kv.GetValue())
	}
	t.Logf("stale leader's read index: %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := tc.kv(old).Get(ctx, &cairnpb.GetRequest{Key: []byte("k")})
	if err == nil && string(r.GetKv().GetValue()) != "new" {
		t.Fatalf("a linearizable read through the stale leader returned %q after the overwrite", r.GetKv().GetValue())
	}
	if !old.IsLeader() {
		t.Log("note: the old leader stepped down during the check")
	}
}

// TestConfirmAnswersOnlyItsLeader: a node's ReadIndex service (registered
// on its gRPC server) echoes term and nonce only for the leader it follows
// in its current term, and refuses another term, another leader and a
// malformed request.
func TestConfirmAnswersOnlyItsLeader(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	c := cairnpb.NewReadIndexClient(tc.conn(follower))
	term := leader.raft.CurrentTerm()
	confirm := func(req *cairnpb.ConfirmRequest) (*cairnpb.ConfirmResponse, error) {
		return c.Confirm(ctxTimeout(t, 5*time.Second), req)
	}

	resp, err := confirm(&cairnpb.ConfirmRequest{Term: term, Nonce: 42, LeaderId: leader.ID()})
	if follower.raft.CurrentTerm() != term {
		t.Skip("leadership moved during the test")
	}
	if err != nil {
		t.Fatalf("the leader's confirm request of term %d: %v", term, err)
	}
	if resp.GetTerm() != term || resp.GetNonce() != 42 {
		t.Fatalf("answer %v, want term %d nonce 42", resp, term)
	}
	for _, tt := range []struct {
		name string
		req  *cairnpb.ConfirmRequest
		code codes.Code
	}{
		{"older term", &cairnpb.ConfirmRequest{Term: term - 1, Nonce: 1, LeaderId: leader.ID()}, codes.FailedPrecondition},
		{"newer term", &cairnpb.ConfirmRequest{Term: term + 1, Nonce: 1, LeaderId: leader.ID()}, codes.FailedPrecondition},
		{"another leader", &cairnpb.ConfirmRequest{Term: term, Nonce: 1, LeaderId: follower.ID()}, codes.FailedPrecondition},
		{"no leader", &cairnpb.ConfirmRequest{Term: term, Nonce: 1}, codes.InvalidArgument},
		{"no term", &cairnpb.ConfirmRequest{Nonce: 1, LeaderId: leader.ID()}, codes.InvalidArgument},
	} {
		if _, err := confirm(tt.req); status.Code(err) != tt.code {
			t.Errorf("%s: got %v, want %s", tt.name, err, tt.code)
		}
	}
}
