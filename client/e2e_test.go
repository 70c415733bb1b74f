package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/fsm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCluster runs the library against one 3-node cluster: the KV calls,
// the admin calls, backup, and leadership changes under load.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	tc := newTestCluster(t, 3)
	c := newClient(t, client.Config{Endpoints: tc.endpoints()[:1]})
	t.Run("KV", func(t *testing.T) { testKV(t, tc, c) })
	t.Run("MaxKey", func(t *testing.T) { testMaxKey(t, tc, c) })
	t.Run("ScanPageTimeout", func(t *testing.T) { testScanPageTimeout(t, tc, c) })
	t.Run("RetriedWriteAppliedOnce", func(t *testing.T) { testRetriedWrite(t, tc) })
	t.Run("Admin", func(t *testing.T) { testAdmin(t, tc, c) })
	t.Run("Backup", func(t *testing.T) { testBackup(t, c) })
	t.Run("LeaderChangeUnderLoad", func(t *testing.T) { testLeaderChange(t, tc) })
}

func testKV(t *testing.T, tc *testCluster, c *client.Client) {
	ctx := ctxTimeout(t, 2*time.Minute)
	k := []byte("kv/a")
	r1, err := c.Put(ctx, k, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Version != 1 || r1.CreateIndex != r1.ModIndex || r1.ModIndex == 0 || r1.NodeID == "" {
		t.Fatalf("first put: %+v", r1)
	}
	r2, err := c.Put(ctx, k, []byte("2"), client.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	if r2.Version != 2 || r2.CreateIndex != r1.CreateIndex || r2.ModIndex <= r1.ModIndex || string(r2.PrevKV.Value) != "1" {
		t.Fatalf("second put: %+v", r2)
	}
	kv, err := c.Get(ctx, k)
	if err != nil || string(kv.Value) != "2" || kv.Version != 2 || kv.ModIndex != r2.ModIndex {
		t.Fatalf("get: %+v %v", kv, err)
	}
	// The client found the leader, which is not its only endpoint (on a
	// loaded machine leadership may move meanwhile: a linearizable read
	// through the client makes it follow).
	for deadline := time.Now().Add(20 * time.Second); ; {
		leader := tc.stableLeader(t)
		if c.Leader() == leader.GRPCAddr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client's leader %q, cluster's %q", c.Leader(), leader.GRPCAddr())
		}
		c.Get(ctx, k)
	}
	// Serializable reads from every node see the write once applied there.
	for _, ep := range tc.endpoints() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			kv, err := c.Get(ctx, k, client.WithSerializable(), client.WithEndpoint(ep))
			if err == nil && kv.Version == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("serializable get from %s: %+v %v", ep, kv, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := c.Get(ctx, []byte("kv/missing")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := c.Put(ctx, nil, []byte("x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	// A value over the cluster's limit is refused by the cluster.
	_, err = c.Put(ctx, []byte("kv/big"), make([]byte, cairnpb.DefaultMaxValueSize+1))
	if !errors.Is(err, client.ErrInvalidArgument) && status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized value: %v", err)
	}

	// Scan pages transparently, in both directions, with a limit.
	var want []string
	for i := range 25 {
		key := fmt.Sprintf("scan/%02d", i)
		want = append(want, key)
		if _, err := c.Put(ctx, []byte(key), []byte{byte(i), 0xff, 0}); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(it *client.ScanIterator) []string {
		t.Helper()
		var out []string
		for it.Next() {
			out = append(out, string(it.KeyValue().Key))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := keys(c.Scan(ctx, nil, nil, client.WithPrefix([]byte("scan/")), client.WithPageSize(4))); !slices.Equal(got, want) {
		t.Fatalf("prefix scan: %q", got)
	}
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if got := keys(c.Scan(ctx, []byte("scan/"), []byte("scan0"), client.WithReverse(), client.WithPageSize(7), client.WithLimit(10))); !slices.Equal(got, rev[:10]) {
		t.Fatalf("reverse scan: %q", got)
	}
	if got := keys(c.Scan(ctx, []byte("scan/05"), []byte("scan/10"), client.WithSerializable())); !slices.Equal(got, want[5:10]) {
		t.Fatalf("range scan: %q", got)
	}
	it := c.Scan(ctx, nil, nil, client.WithPrefix([]byte("scan/")), client.WithKeysOnly(), client.WithLimit(1))
	if !it.Next() || it.KeyValue().Value != nil || it.KeyValue().Version != 1 || it.Next() {
		t.Fatal("keys-only scan")
	}

	// Delete and DeleteRange.
	dr, err := c.Delete(ctx, k, client.WithPrevKV())
	if err != nil || !dr.Deleted || string(dr.PrevKV.Value) != "2" {
		t.Fatalf("delete: %+v %v", dr, err)
	}
	if dr, err := c.Delete(ctx, k); err != nil || dr.Deleted {
		t.Fatalf("delete again: %+v %v", dr, err)
	}
	if _, err := c.DeleteRange(ctx, []byte("scan/10"), []byte("scan/20")); err != nil {
		t.Fatal(err)
	}
	if got := keys(c.Scan(ctx, nil, nil, client.WithPrefix([]byte("scan/")))); !slices.Equal(got, append(slices.Clone(want[:10]), want[20:]...)) {
		t.Fatalf("after delete range: %q", got)
	}
	if _, err := c.DeleteRange(ctx, nil, nil, client.WithPrefix([]byte("scan/"))); err != nil {
		t.Fatal(err)
	}
	if got := keys(c.Scan(ctx, nil, nil, client.WithPrefix([]byte("scan/")))); len(got) != 0 {
		t.Fatalf("after delete prefix: %q", got)
	}
	if _, err := c.DeleteRange(ctx, nil, nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("delete range without a range: %v", err)
	}

	// Txn and CompareAndSwap.
	acct := []byte("txn/acct")
	res, err := c.Txn(ctx).If(client.NotExists(acct)).Then(client.OpPut(acct, []byte("100")), client.OpGet(acct)).Commit()
	if err != nil || !res.Succeeded || len(res.Results) != 2 || string(res.Results[1].KV.Value) != "100" {
		t.Fatalf("txn create: %+v %v", res, err)
	}
	res, err = c.Txn(ctx).If(client.Version(acct).Greater(1)).Then(client.OpDelete(acct)).Else(client.OpGet(acct)).Commit()
	if err != nil || res.Succeeded || res.Results[0].Type != client.OpTypeGet || res.Results[0].KV.Version != 1 {
		t.Fatalf("txn else: %+v %v", res, err)
	}
	if err := c.CompareAndSwap(ctx, acct, []byte("100"), []byte("90")); err != nil {
		t.Fatal(err)
	}
	err = c.CompareAndSwap(ctx, acct, []byte("100"), []byte("80"))
	if !errors.Is(err, client.ErrCompareFailed) {
		t.Fatalf("stale CAS: %v", err)
	}
	if kv, _ := c.Get(ctx, acct); string(kv.Value) != "90" {
		t.Fatalf("after CAS: %q", kv.Value)
	}
	if err := c.CompareAndSwap(ctx, []byte("txn/new"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// dropFirstResponse is a client interceptor that lets the first call of
// method reach the cluster and then reports Unavailable to the client, as
// a connection broken after the request was sent would.
func dropFirstResponse(method string, calls *atomic.Int32) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, m, req, reply, cc, opts...)
		if strings.HasSuffix(m, "/"+method) && calls.Add(1) == 1 && err == nil {
			return status.Error(codes.Unavailable, "test: response dropped")
		}
		return err
	}
}

func testRetriedWrite(t *testing.T, tc *testCluster) {
	ctx := ctxTimeout(t, 2*time.Minute)
	var puts, txns atomic.Int32
	c := newClient(t, client.Config{Endpoints: tc.endpoints(), DialOptions: []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(dropFirstResponse("Put", &puts), dropFirstResponse("Txn", &txns)),
	}})
	k := []byte("retry/k")
	res, err := c.Put(ctx, k, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	// At least 2 attempts: the dropped one and its retry (more when
	// leadership moves meanwhile, on a loaded machine).
	if puts.Load() < 2 {
		t.Fatalf("%d put attempts, want at least 2", puts.Load())
	}
	if res.Version != 1 {
		t.Fatalf("the retried put reports version %d: it was applied twice", res.Version)
	}
	if kv, err := c.Get(ctx, k); err != nil || kv.Version != 1 {
		t.Fatalf("get after a retried put: %+v %v", kv, err)
	}
	// A retried increment-style Txn is applied once too.
	tr, err := c.Txn(ctx).If(client.Version(k).Equal(1)).Then(client.OpPut(k, []byte("w"))).Commit()
	if err != nil || !tr.Succeeded || txns.Load() < 2 {
		t.Fatalf("retried txn: %+v %v (%d attempts)", tr, err, txns.Load())
	}
	if kv, _ := c.Get(ctx, k); kv.Version != 2 {
		t.Fatalf("version %d after a retried txn, want 2", kv.Version)
	}
}

// checkStatusAndMembers returns what is wrong with the Status of every node
// and with Members, given the leader; "" if nothing.
func checkStatusAndMembers(ctx context.Context, tc *testCluster, c *client.Client, leader *cluster.Node) string {
	for _, n := range tc.nodes {
		st, err := c.Status(ctx, client.WithEndpoint(n.GRPCAddr()))
		if err != nil {
			return fmt.Sprintf("status of %s: %v", n.ID(), err)
		}
		if st.GetNodeId() != n.ID() || st.GetLeaderId() != leader.ID() || st.GetTerm() == 0 || st.GetEngine() == nil {
			return fmt.Sprintf("status of %s: %v", n.ID(), st)
		}
		if (st.GetState() == cairnpb.RaftState_LEADER) != (n == leader) {
			return fmt.Sprintf("status of %s: state %v", n.ID(), st.GetState())
		}
	}
	ms, err := c.Members(ctx)
	if err != nil {
		return fmt.Sprintf("members: %v", err)
	}
	var ids []string
	for _, m := range ms.GetMembers() {
		ids = append(ids, m.GetId())
		if m.GetSuffrage() != cairnpb.Suffrage_VOTER || m.GetStatus() != cairnpb.MemberStatus_ALIVE || m.GetLeader() != (m.GetId() == leader.ID()) {
			return fmt.Sprintf("member %v", m)
		}
	}
	if !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
		return fmt.Sprintf("members %v", ids)
	}
	return ""
}

func testAdmin(t *testing.T, tc *testCluster, c *client.Client) {
	ctx := ctxTimeout(t, 2*time.Minute)
	// Status and Members agree with the cluster's leader. On a loaded
	// machine an election may move leadership during the checks: then
	// they are repeated, with the new leader.
	var leader *cluster.Node
	for deadline := time.Now().Add(20 * time.Second); ; {
		leader = tc.stableLeader(t)
		problem := checkStatusAndMembers(ctx, tc, c, leader)
		if problem == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(problem)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A manual member: added as a non-voter, removed again.
	idx, err := c.AddMember(ctx, "ghost", "127.0.0.1:1", client.AsNonVoter())
	if err != nil || idx == 0 {
		t.Fatalf("add member: %d %v", idx, err)
	}
	ms, _ := c.Members(ctx)
	if !slices.ContainsFunc(ms.GetMembers(), func(m *client.Member) bool {
		return m.GetId() == "ghost" && m.GetSuffrage() == cairnpb.Suffrage_NONVOTER
	}) {
		t.Fatalf("ghost not a member: %v", ms)
	}
	if _, err := c.RemoveMember(ctx, "ghost", client.IfConfigIndex(ms.GetConfigIndex()-1)); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Fatalf("remove with a stale config index: %v", err)
	}
	if _, err := c.RemoveMember(ctx, "ghost"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveMember(ctx, "ghost"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("remove a non-member: %v", err)
	}
	if _, err := c.AddMember(ctx, "bad id!", "127.0.0.1:1"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("bad member id: %v", err)
	}
	// Snapshot of one node.
	if _, err := c.Put(ctx, []byte("admin/k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// raft refuses to snapshot while the node has not applied the latest
	// configuration entry (the cluster reports it as Internal, which the
	// client does not retry): retry here until the follower has caught up.
	var index, term uint64
	deadline := time.Now().Add(5 * time.Second)
	for {
		index, term, err = c.Snapshot(ctx, client.WithEndpoint(tc.nodes[2].GRPCAddr()))
		if err == nil || !strings.Contains(err.Error(), "wait until the configuration entry") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || index == 0 || term == 0 {
		t.Fatalf("snapshot: %d %d %v", index, term, err)
	}
	// Leadership transfer, to a named voter.
	var target string
	for _, n := range tc.nodes {
		if n != leader {
			target = n.ID()
			break
		}
	}
	got, err := c.TransferLeader(ctx, target)
	if err != nil || got != target {
		t.Fatalf("transfer to %s: %q %v", target, got, err)
	}
	if err := tc.waitLeader(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, []byte("admin/k"), []byte("after transfer")); err != nil {
		t.Fatal(err)
	}
}

func testBackup(t *testing.T, c *client.Client) {
	ctx := ctxTimeout(t, 2*time.Minute)
	for i := range 100 {
		if _, err := c.Put(ctx, fmt.Appendf(nil, "backup/%03d", i), bytes.Repeat([]byte{byte(i)}, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	var progressCalls int
	info, err := c.Backup(ctx, &buf, client.WithProgress(func(client.BackupProgress) { progressCalls++ }))
	if err != nil {
		t.Fatal(err)
	}
	if info.AppliedIndex == 0 || len(info.Files) == 0 || info.Bytes != int64(buf.Len()) || progressCalls < 2 {
		t.Fatalf("backup: %+v (%d progress calls)", info, progressCalls)
	}
	v, err := client.VerifyBackup(bytes.NewReader(buf.Bytes()))
	if err != nil || v.AppliedIndex != info.AppliedIndex || v.DataBytes() != info.DataBytes() {
		t.Fatalf("verify: %+v %v", v, err)
	}
	// The file is a state machine snapshot stream: the FSM reads its
	// manifest and restores it, with the data.
	m, err := fsm.ReadSnapshotManifest(bytes.NewReader(buf.Bytes()))
	if err != nil || m.GetAppliedIndex() != info.AppliedIndex || len(m.GetFiles()) != len(info.Files) {
		t.Fatalf("fsm manifest: %v %v", m, err)
	}
	dir := t.TempDir()
	f, err := fsm.New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Restore(fileReadCloser(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if f.AppliedIndex() != info.AppliedIndex {
		t.Fatalf("restored applied index %d, want %d", f.AppliedIndex(), info.AppliedIndex)
	}
	kv, err := f.Get([]byte("backup/042"))
	if err != nil || !bytes.Equal(kv.GetValue(), bytes.Repeat([]byte{42}, 1000)) {
		t.Fatalf("restored get: %v %v", kv, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "engine")); err != nil {
		t.Fatal(err)
	}
}

type bytesReadCloser struct{ *bytes.Reader }

func (bytesReadCloser) Close() error { return nil }

func fileReadCloser(b []byte) bytesReadCloser { return bytesReadCloser{bytes.NewReader(b)} }

// Writers keep writing through leadership transfers; no error reaches
// them, and every acknowledged write is there afterwards.
func testLeaderChange(t *testing.T, tc *testCluster) {
	ctx := ctxTimeout(t, 3*time.Minute)
	c := newClient(t, client.Config{Endpoints: tc.endpoints()})
	admin := newClient(t, client.Config{Endpoints: tc.endpoints()})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]bool{}
	var errs []error
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("lc/%d/%d", w, i)
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				_, err := c.Put(wctx, []byte(key), []byte("v"))
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					acked[key] = true
				}
				mu.Unlock()
				if _, err := c.Get(ctx, []byte(key)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("read back %s: %w", key, err))
					mu.Unlock()
				}
			}
		}()
	}
	// Each transfer (and the end) waits until the writers got 10 more
	// writes through, not for a fixed time.
	progress := func() {
		mu.Lock()
		from := len(acked)
		mu.Unlock()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= from+10 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("only %d writes in 60s", n-from)
				return
			}
		}
	}
	for range 3 {
		progress()
		if _, err := admin.TransferLeader(ctx, ""); err != nil {
			t.Errorf("transfer: %v", err)
		}
	}
	progress()
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	for key := range acked {
		if _, err := c.Get(ctx, []byte(key)); err != nil {
			t.Fatalf("acknowledged %s: %v", key, err)
		}
	}
	t.Logf("%d writes through 3 leadership transfers", len(acked))
}
