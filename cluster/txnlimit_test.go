package cluster

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTxnLimitResponse sends the review's Txn to a running node: 128 Gets
// of one 4 MiB value, a few KB on the wire. The node built a 512 MiB
// response (1 GiB more with a client id, marshalled for the session), on
// every replica, and again after every restart, then failed to send it
// (ResourceExhausted). Now the Txn fails with InvalidArgument naming the
// bound, applies none of its writes, and the process allocates about one
// copy of the value; a Txn within the bound is answered.
func TestTxnLimitResponse(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, nil)[0]
	kv := tc.kv(n)
	big := bytes.Repeat([]byte{3}, 4<<20)
	if _, err := kv.Put(ctxTimeout(t, 10*time.Second), &cairnpb.PutRequest{Key: []byte("big"), Value: big}); err != nil {
		t.Fatal(err)
	}
	gets := func(k int) []*cairnpb.RequestOp {
		ops := make([]*cairnpb.RequestOp, k)
		for i := range ops {
			ops[i] = &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: []byte("big")}}}
		}
		return ops
	}
	write := &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: []byte("written"), Value: []byte("1")}}}
	wantMsg := fmt.Sprintf("txn response exceeds the limit of %d bytes", cairnpb.MaxResponseKVBytes(cairnpb.DefaultMaxValueSize))
	for i, client := range []string{"", "txnlimit"} {
		req := &cairnpb.TxnRequest{Success: append([]*cairnpb.RequestOp{write}, gets(cairnpb.MaxTxnOps-1)...), ClientId: client}
		if client != "" {
			req.Seq = uint64(i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := kv.Txn(ctxTimeout(t, 30*time.Second), req)
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("client id %q: %v; the process allocated %d MiB", client, err, grew>>20)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), wantMsg) {
			t.Fatalf("txn: %v, want InvalidArgument with %q", err, wantMsg)
		}
		// One copy of the value, the Put's request, and the node's
		// ordinary work; it was over 500 MiB.
		if grew > 64<<20 {
			t.Errorf("the process allocated %d MiB serving the txn", grew>>20)
		}
	}
	if resp := get(t, kv, "written", cairnpb.Consistency_LINEARIZABLE); resp.Kv != nil {
		t.Fatal("a refused txn applied its put")
	}

	// Within the bound: 3 Gets, 12 MiB, answered.
	resp, err := kv.Txn(ctxTimeout(t, 30*time.Second), &cairnpb.TxnRequest{Success: append(gets(3), write)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !bytes.Equal(resp.Responses[i].GetGet().GetKv().GetValue(), big) {
			t.Fatalf("get %d of the txn within the bound", i)
		}
	}
	if resp := get(t, kv, "written", cairnpb.Consistency_LINEARIZABLE); resp.Kv == nil {
		t.Fatal("the txn within the bound did not apply its put")
	}
}
