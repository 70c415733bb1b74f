package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func TestSingleNodeBootstrapRestart(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)

	kv := tc.kv(n)
	for i := range 100 {
		put(t, kv, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i))
	}
	if got := get(t, kv, "k042", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "v42" || got.GetVersion() != 1 {
		t.Fatalf("get k042 = %v", got)
	}
	hc := healthpb.NewHealthClient(tc.conn(n))
	if r, err := hc.Check(ctxTimeout(t, time.Second), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", r, err)
	}
	st, err := tc.admin(n).Status(ctxTimeout(t, time.Second), &cairnpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != cairnpb.RaftState_LEADER || st.GetLeaderId() != "solo" || st.GetAppliedIndex() < 100 || st.GetEngine() == nil {
		t.Fatalf("status = %v", st)
	}

	// A graceful shutdown and a restart keep the data; a single node with
	// state does not bootstrap again and elects itself.
	if err := n.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	n = tc.restart("solo")
	tc.waitReady([]*Node{n}, 1)
	if got := get(t, tc.kv(n), "k099", cairnpb.Consistency_LINEARIZABLE).GetKv(); string(got.GetValue()) != "v99" {
		t.Fatalf("after restart: get k099 = %v", got)
	}
	if r := n.fsm.restores.Load(); r != 0 {
		t.Fatalf("restart restored %d snapshots", r)
	}
}

func TestRequestValidation(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	cfg.MaxValueSize = 1 << 10
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	kv := tc.kv(n)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, c := range []struct {
		name string
		req  *cairnpb.PutRequest
		code codes.Code
	}{
		{"empty key", &cairnpb.PutRequest{Value: []byte("v")}, codes.InvalidArgument},
		{"key too long", &cairnpb.PutRequest{Key: bytes.Repeat([]byte("k"), cairnpb.MaxKeySize+1)}, codes.InvalidArgument},
		{"value too long", &cairnpb.PutRequest{Key: []byte("k"), Value: make([]byte, 1<<10+1)}, codes.InvalidArgument},
		{"message too big", &cairnpb.PutRequest{Key: []byte("k"), Value: make([]byte, 2<<20)}, codes.ResourceExhausted},
		{"seq without client", &cairnpb.PutRequest{Key: []byte("k"), ClientId: "c"}, codes.InvalidArgument},
	} {
		_, err := kv.Put(ctx, c.req)
		if status.Code(err) != c.code {
			t.Errorf("%s: got %v, want code %v", c.name, err, c.code)
		}
	}
	if _, err := kv.Get(ctx, &cairnpb.GetRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("get of empty key: %v", err)
	}
	if _, err := kv.Get(ctx, &cairnpb.GetRequest{Key: []byte("k"), Consistency: 7}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("get with unknown consistency: %v", err)
	}
	// The largest value passes.
	if _, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: make([]byte, 1<<10)}); err != nil {
		t.Errorf("largest value: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "a")
	cfg.BootstrapExpect = 1
	a := tc.start(cfg, nil)

	// A port in use.
	cfgB := testConfig(t, "b")
	cfgB.GRPCAddr = a.GRPCAddr()
	b, err := New(cfgB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a used port: %v", err)
	}
	// The same data directory as a running node: its lock.
	cfgC := testConfig(t, "a")
	cfgC.DataDir = cfg.DataDir
	c, err := New(cfgC, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("start on a used data directory: %v", err)
	}
	// An unwritable data directory.
	if os.Geteuid() != 0 {
		ro := filepath.Join(t.TempDir(), "ro")
		os.Mkdir(ro, 0o500)
		cfgE := testConfig(t, "e")
		cfgE.DataDir = filepath.Join(ro, "data")
		e, _ := New(cfgE, nil)
		if err := e.Start(); err == nil {
			t.Fatal("start in an unwritable directory succeeded")
		}
	}
	// Another ID on an existing data directory.
	if err := a.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	cfgD := testConfig(t, "d")
	cfgD.DataDir = cfg.DataDir
	d, _ := New(cfgD, nil)
	if err := d.Start(); err == nil || !strings.Contains(err.Error(), `belongs to node "a"`) {
		t.Fatalf("start with another ID: %v", err)
	}
	// Bad configurations.
	for _, bad := range []Config{
		{ID: "", DataDir: "x"},
		{ID: "bad id", DataDir: "x"},
		{ID: "x"},
		{ID: "x", DataDir: "x", GRPCAddr: "nope"},
		{ID: "x", DataDir: "x", RaftLogStore: "sqlite"},
		{ID: "x", DataDir: "x", BootstrapExpect: -1},
	} {
		if _, err := New(bad, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestBackup(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	kv := tc.kv(n)
	for i := range 200 {
		put(t, kv, fmt.Sprintf("k%03d", i), strings.Repeat("v", 100))
	}
	stream, err := tc.admin(n).Backup(ctxTimeout(t, 10*time.Second), &cairnpb.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	hdr := first.GetHeader()
	if hdr == nil || len(hdr.GetFiles()) == 0 || hdr.GetAppliedIndex() < 200 || hdr.GetNodeId() != "solo" {
		t.Fatalf("backup header = %v", hdr)
	}
	dir := filepath.Join(t.TempDir(), "engine")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([][]byte, len(hdr.GetFiles()))
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		c := m.GetChunk()
		if c == nil || int(c.GetFile()) >= len(data) || c.GetOffset() != uint64(len(data[c.GetFile()])) {
			t.Fatalf("bad chunk %v", m)
		}
		data[c.GetFile()] = append(data[c.GetFile()], c.GetData()...)
	}
	for i, f := range hdr.GetFiles() {
		if uint64(len(data[i])) != f.GetSize() || crc32.Checksum(data[i], crc32.MakeTable(crc32.Castagnoli)) != f.GetCrc32C() {
			t.Fatalf("file %s: %d bytes, want %d, or checksum mismatch", f.GetName(), len(data[i]), f.GetSize())
		}
		if err := os.WriteFile(filepath.Join(dir, f.GetName()), data[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The files form an engine directory: a state machine opens on it.
	f, err := fsm.New(filepath.Dir(dir), nil)
	if err != nil {
		t.Fatalf("opening the backup: %v", err)
	}
	defer f.Close()
	if f.AppliedIndex() != hdr.GetAppliedIndex() {
		t.Fatalf("backup applied index %d, header says %d", f.AppliedIndex(), hdr.GetAppliedIndex())
	}
	scan, err := f.Scan(&cairnpb.ScanRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := len(scan.GetKvs())
	if count != 200 {
		t.Fatalf("backup holds %d user keys, want 200", count)
	}
}

// TestStalledApplyIsResourceExhausted: a write whose deadline passes while
// it is committed but the state machine cannot apply it (a stalled engine)
// fails with ResourceExhausted, and the client gets that answer before its
// own deadline.
func TestStalledApplyIsResourceExhausted(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	tc.waitReady([]*Node{n}, 1)
	release := make(chan struct{})
	stall := func() { <-release }
	n.fsm.beforeApply.Store(&stall)
	// The deadline must outlast the commit (on a loaded machine, more than
	// 300ms): the write is then stalled in the state machine, not in raft.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := tc.kv(n).Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("put while the FSM stalls: %v", err)
	}
	n.fsm.beforeApply.Store(nil)
	close(release)
	waitFor(t, 5*time.Second, "the stalled write to apply", func() bool {
		kv, err := n.fsm.Get([]byte("k"))
		return err == nil && kv != nil
	})
}

func TestReflection(t *testing.T) {
	tc := newTestCluster(t)
	cfg := testConfig(t, "solo")
	cfg.BootstrapExpect = 1
	n := tc.start(cfg, nil)
	stream, err := reflectionpb.NewServerReflectionClient(tc.conn(n)).ServerReflectionInfo(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"cairn.v1.KV", "cairn.v1.Cluster", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}
