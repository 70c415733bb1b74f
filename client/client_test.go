package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A follower's NotLeader detail leads the client to the leader, which
// then receives the writes directly.
func TestFollowsNotLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	addrs := fc.addrs()
	fc.setLeader(addrs[2])
	c := fc.client(Config{})
	ctx := testCtx(t, 5*time.Second)
	for i := range 10 {
		if _, err := c.Put(ctx, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Leader(); got != addrs[2] {
		t.Fatalf("leader %q, want %q", got, addrs[2])
	}
	if n := fc.nodes[addrs[2]].count("Put"); n < 10 {
		t.Fatalf("leader got %d puts, want 10", n)
	}
	followerPuts := fc.nodes[addrs[0]].count("Put") + fc.nodes[addrs[1]].count("Put")
	if followerPuts > 2 {
		t.Fatalf("followers got %d puts; the client should have learned the leader after at most one each", followerPuts)
	}
	if fc.applied() != 10 {
		t.Fatalf("applied %d writes, want 10", fc.applied())
	}
}

// A leader address outside the endpoints is dialed.
func TestDialsLeaderOutsideEndpoints(t *testing.T) {
	fc := newFakeCluster(t, 2)
	addrs := fc.addrs()
	fc.setLeader(addrs[1])
	c := fc.client(Config{Endpoints: addrs[:1]})
	if _, err := c.Put(testCtx(t, 5*time.Second), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Endpoints(), addrs[1]) {
		t.Fatalf("endpoints %v do not include the leader %s", c.Endpoints(), addrs[1])
	}
	if fc.nodes[addrs[1]].count("Put") != 1 {
		t.Fatal("the leader did not get the put")
	}
}

// A write whose response is lost is retried with the same seq and applied
// once.
func TestRetriedWriteAppliedOnce(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := testCtx(t, 5*time.Second)
	fc.inject("Put", injected{status.Error(codes.Unavailable, "connection reset"), true},
		injected{status.Error(codes.DeadlineExceeded, "leader timed out"), true})
	res, err := c.Put(ctx, []byte("k"), []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fc.nodes[fc.addrs()[0]].count("Put"); got != 3 {
		t.Fatalf("%d attempts, want 3", got)
	}
	if fc.applied() != 1 || res.Version != 1 {
		t.Fatalf("applied %d times, version %d; want once, version 1", fc.applied(), res.Version)
	}
	// The same for a Txn and a Delete.
	fc.inject("Txn", injected{status.Error(codes.Unavailable, "reset"), true})
	tr, err := c.Txn(ctx).If(Version([]byte("k")).Equal(1)).Then(OpPut([]byte("k"), []byte("w"))).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn: %v %+v", err, tr)
	}
	fc.inject("Delete", injected{status.Error(codes.Unavailable, "reset"), true})
	dr, err := c.Delete(ctx, []byte("k"))
	if err != nil || !dr.Deleted {
		t.Fatalf("delete: %v %+v", err, dr)
	}
	if fc.applied() != 3 {
		t.Fatalf("applied %d writes, want 3", fc.applied())
	}
}

// Errors other than Unavailable and DeadlineExceeded are not retried, and
// errors.Is and status.Code both see them.
func TestErrorsNotRetried(t *testing.T) {
	fc := newFakeCluster(t, 1)
	addr := fc.addrs()[0]
	fc.setLeader(addr)
	c := fc.client(Config{})
	ctx := testCtx(t, 5*time.Second)
	for _, tc := range []struct {
		code codes.Code
		is   error
	}{
		{codes.InvalidArgument, ErrInvalidArgument},
		{codes.FailedPrecondition, ErrFailedPrecondition},
		{codes.ResourceExhausted, nil},
		{codes.AlreadyExists, ErrResultUnavailable},
		{codes.Internal, nil},
		{codes.NotFound, ErrNotFound},
	} {
		before := fc.nodes[addr].count("Put")
		fc.inject("Put", injected{err: status.Error(tc.code, "boom")})
		_, err := c.Put(ctx, []byte("k"), []byte("v"))
		if n := fc.nodes[addr].count("Put") - before; n != 1 {
			t.Errorf("%v: %d attempts, want 1", tc.code, n)
		}
		if status.Code(err) != tc.code {
			t.Errorf("%v: status.Code(%v) = %v", tc.code, err, status.Code(err))
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%v: errors.Is(%v, %v) is false", tc.code, err, tc.is)
		}
		if errors.Is(err, ErrUnavailable) {
			t.Errorf("%v: error is ErrUnavailable", tc.code)
		}
	}
	// Client-side checks fail without a request.
	before := fc.nodes[addr].count("Put")
	if _, err := c.Put(ctx, nil, []byte("v")); !errors.Is(err, ErrInvalidArgument) || status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty key: %v", err)
	}
	if _, err := c.Put(ctx, make([]byte, cairnpb.MaxKeySize+1), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("long key: %v", err)
	}
	if _, err := c.Get(ctx, []byte("k"), WithLimit(3)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Get WithLimit: %v", err)
	}
	if fc.nodes[addr].count("Put") != before {
		t.Error("invalid requests were sent")
	}
}

// When no node can serve, the call retries until the deadline and reports
// both the deadline and the last error.
func TestRetriesUntilDeadline(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setLeader("") // no leader: NotLeader without an address
	c := fc.client(Config{MaxRetryBackoff: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Put(ctx, []byte("k"), []byte("v"))
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("gave up after %v", time.Since(start))
	}
	var e *Error
	if !errors.As(err, &e) || e.Attempts < 3 {
		t.Fatalf("error %v: want an *Error after several attempts", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("error %v: want DeadlineExceeded and ErrUnavailable", err)
	}
	t.Log(err)
	// Once a leader appears, writes go through.
	fc.setLeader(fc.addrs()[1])
	if _, err := c.Put(testCtx(t, 5*time.Second), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// An unreachable endpoint is skipped.
func TestUnreachableEndpoint(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{Endpoints: []string{"127.0.0.1:1", fc.addrs()[0]}})
	ctx := testCtx(t, 5*time.Second)
	for i := range 5 {
		if _, err := c.Get(ctx, []byte("x"), WithSerializable()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get %d: %v", i, err)
		}
	}
	// Only unreachable: DialTimeout fails New.
	_, err := New(Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond, DialOptions: []grpc.DialOption{fc.dialer()}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New with an unreachable endpoint: %v", err)
	}
}

// Concurrent writes never have two writes in flight under one client_id,
// so the state machine never sees a seq go backwards (it would drop the
// write as a duplicate).
func TestConcurrentWritesUseDistinctSessions(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := testCtx(t, 20*time.Second)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := c.Put(ctx, fmt.Appendf(nil, "w%d/%d", w, i), []byte("v")); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.mu.seqViolations) > 0 {
		t.Fatalf("seq went backwards: %v", fc.mu.seqViolations[:min(5, len(fc.mu.seqViolations))])
	}
	if fc.mu.applied != workers*each {
		t.Fatalf("applied %d, want %d", fc.mu.applied, workers*each)
	}
	if n := c.sessions.size(); n < 1 || n > workers {
		t.Fatalf("%d sessions for %d concurrent writers", n, workers)
	}
}

// Scans agree with a sorted model for random ranges, limits, page sizes and
// directions.
func TestScanAgainstModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := testCtx(t, 2*time.Minute) // the whole test, on a loaded machine under -race
	var model []string
	for range 200 {
		k := fmt.Sprintf("%c%02d", 'a'+rng.IntN(4), rng.IntN(50))
		if _, err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(model, k) {
			model = append(model, k)
		}
	}
	sort.Strings(model)
	key := func() []byte {
		if rng.IntN(4) == 0 {
			return nil
		}
		return fmt.Appendf(nil, "%c%02d", 'a'+rng.IntN(5), rng.IntN(60))
	}
	for i := range 200 {
		var opts []Option
		start, end := key(), key()
		if len(start) > 0 && len(end) > 0 && string(end) <= string(start) {
			start, end = end, start
			if string(start) == string(end) {
				end = nil
			}
		}
		var want []string
		prefix := ""
		if rng.IntN(4) == 0 {
			prefix = string(rune('a' + rng.IntN(5)))
			start, end = nil, nil
			opts = append(opts, WithPrefix([]byte(prefix)))
		}
		for _, k := range model {
			if prefix != "" {
				if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
					want = append(want, k)
				}
				continue
			}
			if (len(start) == 0 || k >= string(start)) && (len(end) == 0 || k < string(end)) {
				want = append(want, k)
			}
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, WithReverse())
			slices.Reverse(want)
		}
		if rng.IntN(2) == 0 {
			limit := rng.IntN(20)
			opts = append(opts, WithLimit(limit))
			if limit > 0 && limit < len(want) {
				want = want[:limit]
			}
		}
		opts = append(opts, WithPageSize(1+rng.IntN(7)))
		keysOnly := rng.IntN(2) == 0
		if keysOnly {
			opts = append(opts, WithKeysOnly())
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, WithSerializable())
		}
		kvs, err := c.Scan(ctx, start, end, opts...).All()
		if err != nil {
			t.Fatalf("scan %d: %v", i, err)
		}
		var got []string
		for _, kv := range kvs {
			got = append(got, string(kv.Key))
			if keysOnly != (kv.Value == nil) || (!keysOnly && string(kv.Value) != "v"+string(kv.Key)) {
				t.Fatalf("scan %d: key %q value %q (keys only %v)", i, kv.Key, kv.Value, keysOnly)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scan %d [%q, %q) prefix %q opts %d:\n got %q\nwant %q", i, start, end, prefix, len(opts), got, want)
		}
	}
	// Bad arguments are reported by Err.
	it := c.Scan(ctx, []byte("a"), nil, WithPrefix([]byte("b")))
	if it.Next() || !errors.Is(it.Err(), ErrInvalidArgument) {
		t.Fatalf("prefix with start: %v", it.Err())
	}
	if _, err := c.Scan(ctx, []byte("b"), []byte("a")).All(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("end before start: %v", err)
	}
}

func TestTxnBuilder(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := testCtx(t, 5*time.Second)
	k := []byte("k")
	if err := c.CompareAndSwap(ctx, k, nil, []byte("1")); err != nil {
		t.Fatal(err)
	}
	err := c.CompareAndSwap(ctx, k, nil, []byte("1"))
	if !errors.Is(err, ErrCompareFailed) {
		t.Fatalf("CAS on an existing key: %v", err)
	}
	t.Log(err)
	if err := c.CompareAndSwap(ctx, k, []byte("1"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := c.CompareAndSwap(ctx, k, []byte("1"), []byte("3")); !errors.Is(err, ErrCompareFailed) {
		t.Fatalf("CAS with a stale value: %v", err)
	}
	kv, err := c.Get(ctx, k)
	if err != nil || string(kv.Value) != "2" {
		t.Fatalf("get: %v %v", kv, err)
	}
	// Misuse is reported by Commit.
	for name, txn := range map[string]*Txn{
		"If after Then":   c.Txn(ctx).Then(OpGet(k)).If(Exists(k)),
		"Then after Else": c.Txn(ctx).Else(OpGet(k)).Then(OpGet(k)),
		"empty key op":    c.Txn(ctx).Then(OpPut(nil, nil)),
		"empty key cmp":   c.Txn(ctx).If(Value(nil).Equal(nil)),
		"bad option":      c.Txn(ctx).Then(OpPut(k, nil, WithLimit(1))),
		"zero op":         c.Txn(ctx).Then(Op{}),
	} {
		if _, err := txn.Commit(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	many := make([]Op, cairnpb.MaxTxnOps+1)
	for i := range many {
		many[i] = OpGet(k)
	}
	if _, err := c.Txn(ctx).Then(many...).Commit(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("too many ops: %v", err)
	}
	// The compares built are the API's.
	for _, tc := range []struct {
		cmp    Cmp
		target cairnpb.Compare_Target
		result cairnpb.Compare_Result
	}{
		{Value(k).NotEqual(nil), cairnpb.Compare_VALUE, cairnpb.Compare_NOT_EQUAL},
		{Version(k).Greater(3), cairnpb.Compare_VERSION, cairnpb.Compare_GREATER},
		{ModIndex(k).Less(3), cairnpb.Compare_MOD_INDEX, cairnpb.Compare_LESS},
		{CreateIndex(k).Equal(3), cairnpb.Compare_CREATE_INDEX, cairnpb.Compare_EQUAL},
		{NotExists(k), cairnpb.Compare_EXISTS, cairnpb.Compare_EQUAL},
	} {
		if tc.cmp.Proto().GetTarget() != tc.target || tc.cmp.Proto().GetResult() != tc.result {
			t.Errorf("compare %v", tc.cmp.Proto())
		}
	}
	if ModIndex(k).Less(3).Proto().GetModIndex() != 3 || CreateIndex(k).Equal(4).Proto().GetCreateIndex() != 4 {
		t.Error("metadata compare values")
	}
}

func TestClosed(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	c.Close()
	if _, err := c.Put(context.Background(), []byte("k"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Endpoints: []string{""}},
		{Endpoints: []string{"no-port"}},
		{Endpoints: []string{"a:1"}, ClientID: string(make([]byte, 300))},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	c, err := New(Config{Endpoints: []string{"127.0.0.1:1", "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Endpoints()) != 1 || len(c.ClientID()) != 32 {
		t.Fatalf("endpoints %v, client id %q", c.Endpoints(), c.ClientID())
	}
}

// The backup written from a stream passes VerifyBackup, and damage to
// it is detected.
func TestBackupFormat(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	var buf bytes.Buffer
	var last BackupProgress
	info, err := c.Backup(testCtx(t, 5*time.Second), &buf, WithProgress(func(p BackupProgress) { last = p }))
	if err != nil {
		t.Fatal(err)
	}
	if info.AppliedIndex != 42 || info.NodeID != "n1" || len(info.Files) != len(testBackupFiles) || info.Bytes != int64(buf.Len()) {
		t.Fatalf("info %+v", info)
	}
	if last.Bytes != info.DataBytes() || last.Files != len(testBackupFiles) {
		t.Fatalf("last progress %+v", last)
	}
	v, err := VerifyBackup(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if v.AppliedIndex != 42 || v.AppliedTerm != 3 || !slices.Equal(v.Files, info.Files) {
		t.Fatalf("verify: %+v", v)
	}
	// Every flipped byte and every truncation is detected.
	data := buf.Bytes()
	for i := 0; i < len(data); i += 1 + i/50 {
		bad := slices.Clone(data)
		bad[i] ^= 0x40
		if _, err := VerifyBackup(bytes.NewReader(bad)); err == nil {
			t.Fatalf("flipped byte %d not detected", i)
		}
		if _, err := VerifyBackup(bytes.NewReader(data[:i])); status.Code(err) != codes.DataLoss {
			t.Fatalf("truncation at %d: %v", i, err)
		}
	}
	if _, err := VerifyBackup(bytes.NewReader(append(slices.Clone(data), 0))); status.Code(err) != codes.DataLoss {
		t.Fatalf("trailing byte: %v", err)
	}
}

// Streams that break the protocol are refused.
func TestBackupStreamErrors(t *testing.T) {
	good := func() []*cairnpb.BackupResponse {
		var msgs []*cairnpb.BackupResponse
		fakeBackupStream(testBackupFiles, 300, func(m *cairnpb.BackupResponse) error { msgs = append(msgs, m); return nil })
		return msgs
	}
	run := func(msgs []*cairnpb.BackupResponse) error {
		var buf bytes.Buffer
		bw := &backupWriter{w: bufio.NewWriter(&buf)}
		i := 0
		_, err := bw.copy(func() (*cairnpb.BackupResponse, error) {
			if i == len(msgs) {
				return nil, io.EOF
			}
			i++
			return msgs[i-1], nil
		})
		return err
	}
	if err := run(good()); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func([]*cairnpb.BackupResponse) []*cairnpb.BackupResponse{
		"empty":     func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse { return nil },
		"no header": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse { return m[1:] },
		"truncated": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse { return m[:len(m)-1] },
		"reordered": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse {
			m[1], m[2] = m[2], m[1]
			return m
		},
		"two headers": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse { return append(m, m[0]) },
		"flipped": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse {
			d := m[1].GetChunk().Data
			m[1].GetChunk().Data = append([]byte{d[0] ^ 1}, d[1:]...)
			return m
		},
		"bad name": func(m []*cairnpb.BackupResponse) []*cairnpb.BackupResponse {
			m[0].GetHeader().Files[0].Name = "../x"
			return m
		},
	} {
		if err := run(mutate(good())); status.Code(err) != codes.DataLoss {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzVerifyBackup(f *testing.F) {
	var buf bytes.Buffer
	bw := &backupWriter{w: bufio.NewWriter(&buf)}
	var msgs []*cairnpb.BackupResponse
	fakeBackupStream(testBackupFiles[2:], 50, func(m *cairnpb.BackupResponse) error { msgs = append(msgs, m); return nil })
	i := 0
	if _, err := bw.copy(func() (*cairnpb.BackupResponse, error) {
		if i == len(msgs) {
			return nil, io.EOF
		}
		i++
		return msgs[i-1], nil
	}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("CAIRNSNP"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := VerifyBackup(bytes.NewReader(data))
		if err == nil && info.Bytes != int64(len(data)) {
			t.Fatalf("verified %d of %d bytes", info.Bytes, len(data))
		}
	})
}

func TestErrorMessages(t *testing.T) {
	e := newError(`put "k"`, status.Error(codes.InvalidArgument, "value too large"), 1)
	if got, want := e.Error(), `cairn: put "k": invalid argument: value too large`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	ce := &Error{Op: "get \"k\"", Status: status.New(codes.Unavailable, "connection refused"), Context: context.DeadlineExceeded, Attempts: 4, kind: ErrUnavailable}
	if got, want := ce.Error(), `cairn: get "k": context deadline exceeded (last error: unavailable: connection refused; 4 attempts)`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(ce, ErrUnavailable) || !errors.Is(ce, context.DeadlineExceeded) || errors.Is(ce, context.Canceled) || errors.Is(ce, ErrNotFound) {
		t.Error("errors.Is on a deadline error")
	}
	wrapped := fmt.Errorf("outer: %w", ce)
	if status.Code(wrapped) != codes.DeadlineExceeded {
		t.Errorf("status.Code of a wrapped error: %v", status.Code(wrapped))
	}
}
