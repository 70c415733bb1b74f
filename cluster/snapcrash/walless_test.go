package snapcrash

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/internal/testnet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestKillWithUnflushedWrites: the engine runs without its own WAL behind
// the raft log (fsm/doc.go), so a kill -9 loses its memtables. A
// single-node cluster in a child process acknowledges writes (none flushed:
// no snapshot is due), is killed with SIGKILL, and restarted in process on
// its directory: raft replays its log and every acknowledged write is
// there, once (versions count each write once).
func TestKillWithUnflushedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := childSpec{ID: "solo", DataDir: filepath.Join(dir, "solo"), GRPCAddr: testnet.Addr(t), RaftAddr: testnet.Addr(t),
		GossipAddr: testnet.Addr(t), Bootstrap: true}
	child := startChild(t, spec)
	defer child.Process.Kill()
	conn, err := grpc.NewClient(spec.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	kv := cairnpb.NewKVClient(conn)
	const keys, rewrites = 200, 3
	for {
		_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte("probe"), Value: []byte("x")})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the child never served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for r := 1; r <= rewrites; r++ {
		for i := range keys {
			if _, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte(fmt.Sprintf("k%04d", i)), Value: []byte(fmt.Sprint(r))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Close()
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()

	cfg := config(spec)
	n, err := cluster.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatalf("restart after kill -9: %v", err)
	}
	defer n.Shutdown(context.Background())
	t.Logf("engine's applied index on reopening: %d", n.AppliedIndex())
	conn, err = grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv = cairnpb.NewKVClient(conn)
	for i := range keys {
		k := fmt.Sprintf("k%04d", i)
		var r *cairnpb.GetResponse
		for {
			r, err = kv.Get(ctx, &cairnpb.GetRequest{Key: []byte(k)}) // linearizable: after the replay
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || r.GetKv() == nil {
			t.Fatalf("%s after kill -9: %v, %v", k, r, err)
		}
		if got := string(r.GetKv().GetValue()); got != fmt.Sprint(rewrites) || r.GetKv().GetVersion() != rewrites {
			t.Fatalf("%s after kill -9 = %q version %d, want %q version %d", k, got, r.GetKv().GetVersion(), fmt.Sprint(rewrites), rewrites)
		}
	}
}
