package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestReplication forms a 3-node cluster by bootstrap-expect, writes
// through every node (followers forward to the leader), and checks every
// node's engine converges to the same contents.
func TestReplication(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	const keys = 60
	for i := range keys {
		n := nodes[i%len(nodes)]
		resp := put(t, tc.kv(n), fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i))
		if resp.GetHeader().GetNodeId() == "" || resp.GetHeader().GetAppliedIndex() == 0 || resp.GetVersion() != 1 {
			t.Fatalf("put via %s: %v", n.ID(), resp)
		}
	}
	leader := tc.leader()
	waitFor(t, 10*time.Second, "followers to apply", func() bool {
		for _, n := range nodes {
			if n.AppliedIndex() < leader.AppliedIndex() {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		for i := range keys {
			kv := get(t, tc.kv(n), fmt.Sprintf("k%03d", i), cairnpb.Consistency_SERIALIZABLE).GetKv()
			if string(kv.GetValue()) != fmt.Sprintf("v%d", i) {
				t.Fatalf("%s: k%03d = %v", n.ID(), i, kv)
			}
		}
	}
	assertSameState(t, nodes)

	// Scans and the other writes, through a follower.
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	kv := tc.kv(follower)
	ctx := ctxTimeout(t, 10*time.Second)
	scan, err := kv.Scan(ctx, &cairnpb.ScanRequest{Prefix: []byte("k0"), Limit: 7})
	if err != nil || len(scan.GetKvs()) != 7 || len(scan.GetNextPageToken()) == 0 || scan.GetHeader().GetNodeId() == "" {
		t.Fatalf("scan = %v, %v", scan, err)
	}
	if _, err := kv.Delete(ctx, &cairnpb.DeleteRequest{Key: []byte("k000")}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.DeleteRange(ctx, &cairnpb.DeleteRangeRequest{Prefix: []byte("k05")}); err != nil {
		t.Fatal(err)
	}
	txn, err := kv.Txn(ctx, &cairnpb.TxnRequest{
		Compare: []*cairnpb.Compare{{Key: []byte("k001"), Target: cairnpb.Compare_VERSION, Result: cairnpb.Compare_EQUAL, TargetUnion: &cairnpb.Compare_Version{Version: 1}}},
		Success: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: []byte("k001"), Value: []byte("cas")}}}},
	})
	if err != nil || !txn.GetSucceeded() {
		t.Fatalf("txn = %v, %v", txn, err)
	}
	scan, err = kv.Scan(ctx, &cairnpb.ScanRequest{Start: []byte("k"), Limit: 1000, KeysOnly: true})
	if err != nil || len(scan.GetKvs()) != keys-1-10 {
		t.Fatalf("scan after deletes: %d keys, %v", len(scan.GetKvs()), err)
	}
	if got := get(t, kv, "k001", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "cas" || got.GetVersion() != 2 {
		t.Fatalf("k001 after txn = %v", got)
	}
}

// assertSameState waits for the nodes to apply the same index and checks
// their engines' checksums agree.
func assertSameState(t *testing.T, nodes []*Node) {
	t.Helper()
	waitFor(t, 10*time.Second, "identical state", func() bool {
		sum0, idx0, err := nodes[0].fsm.Checksum()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes[1:] {
			sum, idx, err := n.fsm.Checksum()
			if err != nil {
				t.Fatal(err)
			}
			if sum != sum0 || idx != idx0 {
				return false
			}
		}
		return true
	})
}

// TestFiveNodes forms a 5-node cluster on the raft-wal log store.
func TestFiveNodes(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(5, func(c *Config) { c.RaftLogStore = LogStoreWAL })
	for i := range 25 {
		put(t, tc.kv(nodes[i%5]), fmt.Sprintf("k%d", i), "v")
	}
	for _, n := range nodes {
		if got := get(t, tc.kv(n), "k24", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "v" {
			t.Fatalf("%s: k24 = %v", n.ID(), got)
		}
	}
	assertSameState(t, nodes)
	// Every node's Members lists five alive voters, one the leader, once
	// gossip has converged.
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.ID()+" to list 5 alive voters", func() bool {
			ms, err := tc.admin(n).Members(ctxTimeout(t, 5*time.Second), &cairnpb.MembersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			voters, leaders := 0, 0
			for _, m := range ms.GetMembers() {
				if m.GetSuffrage() == cairnpb.Suffrage_VOTER && m.GetStatus() == cairnpb.MemberStatus_ALIVE && m.GetGrpcAddr() != "" {
					voters++
				}
				if m.GetLeader() {
					leaders++
				}
			}
			return voters == 5 && leaders == 1
		})
	}
}

// TestReadYourWritesAcrossNodes: a write acknowledged by one node is seen
// by a linearizable read through any other, immediately.
func TestReadYourWritesAcrossNodes(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	for i := range 30 {
		w := nodes[i%3]
		put(t, tc.kv(w), "x", fmt.Sprint(i))
		for _, r := range nodes {
			if r == w {
				continue
			}
			got := get(t, tc.kv(r), "x", cairnpb.Consistency_LINEARIZABLE)
			if string(got.GetKv().GetValue()) != fmt.Sprint(i) {
				t.Fatalf("write %d via %s, read via %s: %v", i, w.ID(), r.ID(), got)
			}
		}
	}
}

// TestDuplicateRequestAppliedOnce: a write retried with the same client_id
// and seq, through the same node or another, is applied once and gets the
// first result.
func TestDuplicateRequestAppliedOnce(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	req := &cairnpb.PutRequest{Key: []byte("d"), Value: []byte("1"), ClientId: "client-a", Seq: 1}
	first, err := tc.kv(nodes[0]).Put(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		again, err := tc.kv(n).Put(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if again.GetModIndex() != first.GetModIndex() || again.GetVersion() != 1 ||
			again.GetHeader().GetAppliedIndex() != first.GetHeader().GetAppliedIndex() {
			t.Fatalf("duplicate via %s = %v, first %v", n.ID(), again, first)
		}
	}
	if got := get(t, tc.kv(nodes[1]), "d", cairnpb.Consistency_LINEARIZABLE).GetKv(); got.GetVersion() != 1 || got.GetModIndex() != first.GetModIndex() {
		t.Fatalf("after duplicates: %v", got)
	}
	// The next seq applies; the old one is then known applied, result gone.
	next := proto.Clone(req).(*cairnpb.PutRequest)
	next.Seq, next.Value = 2, []byte("2")
	if r, err := tc.kv(nodes[2]).Put(ctx, next); err != nil || r.GetVersion() != 2 {
		t.Fatalf("seq 2: %v, %v", r, err)
	}
	if _, err := tc.kv(nodes[1]).Put(ctx, req); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("stale duplicate: %v", err)
	}
	// A duplicate Txn gets the first result too, even though its compare
	// would now fail.
	txn := &cairnpb.TxnRequest{
		Compare:  []*cairnpb.Compare{{Key: []byte("d"), Target: cairnpb.Compare_VERSION, Result: cairnpb.Compare_EQUAL, TargetUnion: &cairnpb.Compare_Version{Version: 2}}},
		Success:  []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: []byte("d"), Value: []byte("3")}}}},
		ClientId: "client-b", Seq: 7,
	}
	for i, n := range nodes {
		r, err := tc.kv(n).Txn(ctx, txn)
		if err != nil || !r.GetSucceeded() {
			t.Fatalf("txn attempt %d via %s: %v, %v", i, n.ID(), r, err)
		}
	}
	if got := get(t, tc.kv(nodes[0]), "d", cairnpb.Consistency_LINEARIZABLE).GetKv(); got.GetVersion() != 3 {
		t.Fatalf("after duplicate txns: %v", got)
	}
}

// TestForwardedAndDuplicateRequestsCounted: a follower counts the writes
// it forwards to the leader by method, the leader counts none; the
// leader's state machine counts a retried write it answered from the
// session.
func TestForwardedAndDuplicateRequestsCounted(t *testing.T) {
	tc := newTestCluster(t)
	nodes := tc.formCluster(3, nil)
	leader := tc.leader()
	follower := otherThan(nodes, leader)
	ctx := ctxTimeout(t, 10*time.Second)
	req := &cairnpb.PutRequest{Key: []byte("f"), Value: []byte("1"), ClientId: "client-f", Seq: 1}
	const puts = 3
	for range puts {
		if _, err := tc.kv(follower).Put(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := follower.RequestCounts().Forwarded["Put"]; got != puts {
		t.Errorf("follower forwarded %d Puts, want %d", got, puts)
	}
	if got := leader.RequestCounts().Forwarded; len(got) != 0 {
		t.Errorf("leader forwarded %v", got)
	}
	if got := leader.RequestCounts().Duplicates; got != puts-1 {
		t.Errorf("leader's state machine counted %d duplicates, want %d", got, puts-1)
	}
}
