package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// writeLoad runs writers that put unique keys through random live nodes,
// each write with its own client_id and seq, retried with the same seq
// until acknowledged (or the load stops). It records every acknowledged
// key.
type writeLoad struct {
	tc      *testCluster
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	acked   map[string]string
	retries atomic.Int64
}

func startWriteLoad(tc *testCluster, writers int) *writeLoad {
	w := &writeLoad{tc: tc, stop: make(chan struct{}), acked: map[string]string{}}
	for i := range writers {
		w.wg.Add(1)
		go w.run(i)
	}
	return w
}

func (w *writeLoad) run(writer int) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(writer), 1))
	clientID := fmt.Sprintf("writer-%d", writer)
	for seq := uint64(1); ; seq++ {
		key := fmt.Sprintf("w%d-%05d", writer, seq)
		req := &cairnpb.PutRequest{Key: []byte(key), Value: []byte(key), ClientId: clientID, Seq: seq}
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			live := w.tc.liveConns()
			if len(live) == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cairnpb.NewKVClient(live[rng.IntN(len(live))]).Put(ctx, req)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.acked[key] = key
				w.mu.Unlock()
				break
			}
			if c := status.Code(err); c == codes.InvalidArgument || c == codes.AlreadyExists {
				panic(fmt.Sprintf("write %s: %v", key, err))
			}
			w.retries.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (w *writeLoad) finish() map[string]string {
	close(w.stop)
	w.wg.Wait()
	return w.acked
}

func (w *writeLoad) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// liveConns returns client connections to the live nodes. Safe for
// concurrent use with the test goroutine's start/stop (it snapshots under
// tc.mu).
func (tc *testCluster) liveConns() []*grpc.ClientConn {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]*grpc.ClientConn(nil), tc.loadConns...)
}

// checkAcked verifies that every acknowledged write is present, once
// (version 1: its retries were deduplicated), through a linearizable read
// on every live node.
func checkAcked(t *testing.T, tc *testCluster, acked map[string]string) {
	t.Helper()
	for _, n := range tc.live() {
		kv := tc.kv(n)
		for key, want := range acked {
			got := get(t, kv, key, cairnpb.Consistency_LINEARIZABLE).GetKv()
			if string(got.GetValue()) != want || got.GetVersion() != 1 {
				t.Fatalf("%s: acknowledged %s = %q, read %v", n.ID(), key, want, got)
			}
		}
	}
}

// TestLeaderFailoverNoLostWrites kills the leader under concurrent writes;
// the survivors elect a new one and every acknowledged write survives,
// applied exactly once.
func TestLeaderFailoverNoLostWrites(t *testing.T) {
	tc := newTestCluster(t)
	tc.formCluster(3, nil)
	tc.setLoadTargets()
	load := startWriteLoad(tc, 8)
	waitFor(t, 10*time.Second, "writes before the failover", func() bool { return load.count() >= 200 })

	old := tc.leader()
	if err := old.kill(); err != nil {
		t.Fatal(err)
	}
	tc.setLoadTargets()
	before := load.count()
	newLeader := tc.leader()
	if newLeader == old {
		t.Fatal("the killed node still leads")
	}
	waitFor(t, 10*time.Second, "writes after the failover", func() bool { return load.count() >= before+200 })
	acked := load.finish()
	t.Logf("%d writes acknowledged, %d retried; leader %s -> %s", len(acked), load.retries.Load(), old.ID(), newLeader.ID())
	checkAcked(t, tc, acked)

	// The old leader comes back and catches up.
	tc.restart(old.ID())
	tc.waitReady(tc.live(), 3)
	assertSameState(t, tc.live())
	checkAcked(t, tc, acked)
}
