package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// testMaxKey writes the largest key cairnpb.MaxKeySize allows through the
// client, reads it back from the leader and a follower, and checks that a
// key one byte longer is refused with InvalidArgument by the client and,
// sent around the client's own check, by a follower (which checks before
// forwarding) and by the leader (whose state machine checks too).
func testMaxKey(t *testing.T, tc *testCluster, c *client.Client) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := bytes.Repeat([]byte{'m'}, cairnpb.MaxKeySize)
	key[0], key[len(key)-1] = 'A', 'Z'
	put, err := c.Put(ctx, key, []byte("max"))
	if err != nil {
		t.Fatalf("put of a %d-byte key: %v", len(key), err)
	}
	kv, err := c.Get(ctx, key)
	if err != nil || !bytes.Equal(kv.Key, key) || string(kv.Value) != "max" {
		t.Fatalf("get of the %d-byte key: %v, %v", len(key), kv, err)
	}
	kvs, err := c.Scan(ctx, key[:1], nil, client.WithLimit(1)).All()
	if err != nil || len(kvs) != 1 || !bytes.Equal(kvs[0].Key, key) {
		t.Fatalf("scan from the %d-byte key: %d keys, %v", len(key), len(kvs), err)
	}
	// Every replica has it: a serializable read of each node, once it has
	// applied the put.
	for _, n := range tc.nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			kv, err := c.Get(ctx, key, client.WithSerializable(), client.WithEndpoint(n.GRPCAddr()))
			if err == nil && bytes.Equal(kv.Key, key) && kv.ModIndex == put.ModIndex {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: serializable get of the %d-byte key: %v, %v", n.ID(), len(key), kv, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	long := append(bytes.Clone(key), 'x')
	if _, err := c.Put(ctx, long, []byte("no")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("client: put of a %d-byte key: %v, want ErrInvalidArgument", len(long), err)
	}
	if _, err := c.Get(ctx, long); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("client: get of a %d-byte key: %v, want ErrInvalidArgument", len(long), err)
	}
	for _, n := range tc.nodes {
		cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4<<20)))
		if err != nil {
			t.Fatal(err)
		}
		kvc := cairnpb.NewKVClient(cc)
		role := "follower"
		if n.IsLeader() {
			role = "leader"
		}
		_, err = kvc.Put(ctx, &cairnpb.PutRequest{Key: long, Value: []byte("no")})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s %s: raw put of a %d-byte key: %v, want InvalidArgument", role, n.ID(), len(long), err)
		}
		_, err = kvc.Txn(ctx, &cairnpb.TxnRequest{Success: []*cairnpb.RequestOp{{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: long}}}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s %s: raw txn put of a %d-byte key: %v, want InvalidArgument", role, n.ID(), len(long), err)
		}
		// The largest key goes through the raw API too (no layer below
		// the client refuses it); a leader change may make an attempt
		// fail with Unavailable, which a client retries.
		for deadline := time.Now().Add(15 * time.Second); ; {
			_, err := kvc.Put(ctx, &cairnpb.PutRequest{Key: key, Value: []byte("raw")})
			if err == nil {
				break
			}
			if code := status.Code(err); code == codes.InvalidArgument || time.Now().After(deadline) {
				t.Fatalf("%s %s: raw put of a %d-byte key: %v", role, n.ID(), len(key), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cc.Close()
	}
	if _, err := c.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
}

// delayScans delays every Scan request by d before sending it.
func delayScans(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == cairnpb.KV_Scan_FullMethodName {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// testScanPageTimeout scans many pages, each slowed down, with a page
// timeout shorter than the whole scan: it succeeds, where the same bound
// on the whole scan fails.
func testScanPageTimeout(t *testing.T, tc *testCluster, c *client.Client) {
	ctx := ctxTimeout(t, 60*time.Second)
	const keys, pageSize = 60, 5 // 12 pages (and a last, empty one)
	ops := make([]client.Op, 0, keys)
	for i := range keys {
		ops = append(ops, client.OpPut([]byte(fmt.Sprintf("pagetimeout/%03d", i)), []byte("v")))
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	// pageTimeout leaves room for a leader change on a loaded machine.
	const delay, pageTimeout = 100 * time.Millisecond, 10 * time.Second
	slow := newClient(t, client.Config{Endpoints: tc.endpoints(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(delayScans(delay))}})

	// The whole scan takes at least 12 × 100ms = 1.2s; each page about
	// 100ms, far below pageTimeout.
	opts := []client.Option{client.WithPrefix([]byte("pagetimeout/")), client.WithPageSize(pageSize)}
	start := time.Now()
	kvs, err := slow.Scan(ctx, nil, nil, append(opts, client.WithPageTimeout(pageTimeout))...).All()
	if err != nil || len(kvs) != keys {
		t.Fatalf("scan with a page timeout: %d keys, %v", len(kvs), err)
	}
	if took := time.Since(start); took < keys/pageSize*delay {
		t.Fatalf("the scan took %v, less than its pages' delays: the interceptor did not run", took)
	}
	// The contrast: a bound of 6 pages' delay on the whole scan cuts it
	// short.
	short, cancel := context.WithTimeout(ctx, 6*delay)
	defer cancel()
	kvs, err = slow.Scan(short, nil, nil, opts...).All()
	if !errors.Is(err, context.DeadlineExceeded) || len(kvs) >= keys {
		t.Fatalf("scan bounded as a whole: %d keys, %v; want a deadline error", len(kvs), err)
	}
	// And a page that does not arrive within the page timeout fails the
	// scan.
	kvs, err = slow.Scan(ctx, nil, nil, append(opts, client.WithPageTimeout(delay/4))...).All()
	if !errors.Is(err, context.DeadlineExceeded) || len(kvs) != 0 {
		t.Fatalf("scan with a page timeout below the page's delay: %d keys, %v; want a deadline error", len(kvs), err)
	}
}
