package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
)

// fakeCluster is an in-memory stand-in for a cairn cluster, for testing the
// client's routing, retries and paging without raft: nodes on bufconn
// listeners, one of which is the leader. Followers do not forward: they
// answer writes and linearizable reads with a NotLeader detail, which
// exercises the client's leader discovery. Writes are deduplicated by
// client_id and seq as the real state machine does.
type fakeCluster struct {
	t     testing.TB
	nodes map[string]*fakeNode // by address

	mu struct {
		sync.Mutex
		leader   string // address; "" for no leader
		data     map[string]*cairnpb.KeyValue
		index    uint64
		sessions map[string]fakeSession
		// applied counts applied writes (not deduplicated repeats).
		applied int
		// seqViolations records writes whose seq was below the session's
		// last: with the real state machine they would be dropped.
		seqViolations []string
		// inject maps a method name to errors its next calls fail with, in
		// order (on any node). An error of afterApply kind is returned
		// after the write was applied.
		inject map[string][]injected
	}
}

type fakeSession struct {
	seq  uint64
	resp proto.Message
}

type injected struct {
	err        error
	afterApply bool
}

type fakeNode struct {
	cairnpb.UnimplementedKVServer
	cairnpb.UnimplementedClusterServer
	cl   *fakeCluster
	id   string
	addr string
	lis  *bufconn.Listener
	srv  *grpc.Server

	mu    sync.Mutex
	calls map[string]int
}

func newFakeCluster(t testing.TB, n int) *fakeCluster {
	fc := &fakeCluster{t: t, nodes: map[string]*fakeNode{}}
	fc.mu.data = map[string]*cairnpb.KeyValue{}
	fc.mu.sessions = map[string]fakeSession{}
	fc.mu.inject = map[string][]injected{}
	for i := 1; i <= n; i++ {
		fn := &fakeNode{cl: fc, id: fmt.Sprintf("n%d", i), addr: fmt.Sprintf("127.0.0.1:%d", 10000+i),
			lis: bufconn.Listen(1 << 20), srv: grpc.NewServer(), calls: map[string]int{}}
		cairnpb.RegisterKVServer(fn.srv, fn)
		cairnpb.RegisterClusterServer(fn.srv, fn)
		go fn.srv.Serve(fn.lis)
		fc.nodes[fn.addr] = fn
	}
	t.Cleanup(func() {
		for _, fn := range fc.nodes {
			fn.srv.Stop()
		}
	})
	return fc
}

func (fc *fakeCluster) addrs() []string {
	var a []string
	for addr := range fc.nodes {
		a = append(a, addr)
	}
	slices.Sort(a)
	return a
}

// dialer routes the client's connections to the bufconn listeners; an
// unknown address is refused, like a closed port.
func (fc *fakeCluster) dialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		fn, ok := fc.nodes[addr]
		if !ok {
			return nil, fmt.Errorf("dial %s: connection refused", addr)
		}
		return fn.lis.DialContext(ctx)
	})
}

// client returns a client of the given endpoints (all nodes if none).
func (fc *fakeCluster) client(cfg Config) *Client {
	fc.t.Helper()
	if cfg.Endpoints == nil {
		cfg.Endpoints = fc.addrs()
	}
	cfg.DialOptions = append(cfg.DialOptions, fc.dialer())
	c, err := New(cfg)
	if err != nil {
		fc.t.Fatal(err)
	}
	fc.t.Cleanup(func() { c.Close() })
	return c
}

func (fc *fakeCluster) setLeader(addr string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.mu.leader = addr
}

func (fc *fakeCluster) inject(method string, errs ...injected) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.mu.inject[method] = append(fc.mu.inject[method], errs...)
}

func (fc *fakeCluster) applied() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.mu.applied
}

func (fn *fakeNode) count(method string) int {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return fn.calls[method]
}

// enter records a call and returns an injected error to fail it with (and
// whether that error comes after applying), or a NotLeader status when the
// call needs the leader and this node is not it.
func (fn *fakeNode) enter(method string, needLeader bool) (err error, afterApply bool) {
	fn.mu.Lock()
	fn.calls[method]++
	fn.mu.Unlock()
	fc := fn.cl
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if q := fc.mu.inject[method]; len(q) > 0 {
		fc.mu.inject[method] = q[1:]
		if q[0].afterApply {
			return q[0].err, true
		}
		return q[0].err, false
	}
	if needLeader && fc.mu.leader != fn.addr {
		st := status.New(codes.Unavailable, "not leader")
		leaderID := ""
		if l := fc.nodes[fc.mu.leader]; l != nil {
			leaderID = l.id
		}
		st, _ = st.WithDetails(&cairnpb.NotLeader{LeaderId: leaderID, LeaderGrpcAddr: fc.mu.leader})
		return st.Err(), false
	}
	return nil, false
}

// applyWrite applies a write with at-most-once semantics.
func (fn *fakeNode) applyWrite(method, clientID string, seq uint64, apply func(index uint64) proto.Message) (proto.Message, error) {
	err, after := fn.enter(method, true)
	if err != nil && !after {
		return nil, err
	}
	fc := fn.cl
	fc.mu.Lock()
	var resp proto.Message
	if s, ok := fc.mu.sessions[clientID]; ok && clientID != "" && seq <= s.seq {
		if seq < s.seq {
			fc.mu.seqViolations = append(fc.mu.seqViolations, fmt.Sprintf("%s: seq %d after %d", clientID, seq, s.seq))
			fc.mu.Unlock()
			return nil, status.Error(codes.AlreadyExists, "result no longer retained")
		}
		resp = s.resp
	} else {
		fc.mu.index++
		fc.mu.applied++
		resp = apply(fc.mu.index)
		if clientID != "" {
			fc.mu.sessions[clientID] = fakeSession{seq: seq, resp: resp}
		}
	}
	fc.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (fn *fakeNode) header(index uint64) *cairnpb.ResponseHeader {
	return &cairnpb.ResponseHeader{NodeId: fn.id, RaftTerm: 1, AppliedIndex: index}
}

func (fn *fakeNode) Put(ctx context.Context, req *cairnpb.PutRequest) (*cairnpb.PutResponse, error) {
	if len(req.GetKey()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "empty key")
	}
	resp, err := fn.applyWrite("Put", req.GetClientId(), req.GetSeq(), func(index uint64) proto.Message {
		fc := fn.cl
		prev := fc.mu.data[string(req.GetKey())]
		kv := &cairnpb.KeyValue{Key: req.GetKey(), Value: req.GetValue(), Version: 1, CreateIndex: index, ModIndex: index}
		if prev != nil {
			kv.Version, kv.CreateIndex = prev.Version+1, prev.CreateIndex
		}
		fc.mu.data[string(req.GetKey())] = kv
		r := &cairnpb.PutResponse{Header: fn.header(index), Version: kv.Version, CreateIndex: kv.CreateIndex, ModIndex: index}
		if req.GetPrevKv() {
			r.PrevKv = prev
		}
		return r
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cairnpb.PutResponse), nil
}

func (fn *fakeNode) Delete(ctx context.Context, req *cairnpb.DeleteRequest) (*cairnpb.DeleteResponse, error) {
	resp, err := fn.applyWrite("Delete", req.GetClientId(), req.GetSeq(), func(index uint64) proto.Message {
		fc := fn.cl
		prev := fc.mu.data[string(req.GetKey())]
		delete(fc.mu.data, string(req.GetKey()))
		r := &cairnpb.DeleteResponse{Header: fn.header(index)}
		if prev != nil {
			r.Deleted = 1
			if req.GetPrevKv() {
				r.PrevKv = prev
			}
		}
		return r
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cairnpb.DeleteResponse), nil
}

func (fn *fakeNode) Get(ctx context.Context, req *cairnpb.GetRequest) (*cairnpb.GetResponse, error) {
	if err, _ := fn.enter("Get", req.GetConsistency() == cairnpb.Consistency_LINEARIZABLE); err != nil {
		return nil, err
	}
	fc := fn.cl
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return &cairnpb.GetResponse{Header: fn.header(fc.mu.index), Kv: fc.mu.data[string(req.GetKey())]}, nil
}

// Scan pages with the last key returned as the token.
func (fn *fakeNode) Scan(ctx context.Context, req *cairnpb.ScanRequest) (*cairnpb.ScanResponse, error) {
	if err, _ := fn.enter("Scan", req.GetConsistency() == cairnpb.Consistency_LINEARIZABLE); err != nil {
		return nil, err
	}
	if len(req.GetPrefix()) > 0 && (len(req.GetStart()) > 0 || len(req.GetEnd()) > 0) {
		return nil, status.Error(codes.InvalidArgument, "prefix with start or end")
	}
	lo, hi := req.GetStart(), req.GetEnd()
	if p := req.GetPrefix(); len(p) > 0 {
		lo, hi = p, cairnpb.PrefixEnd(p)
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = cairnpb.DefaultScanLimit
	}
	fc := fn.cl
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var keys []string
	for k := range fc.mu.data {
		if bytes.Compare([]byte(k), lo) >= 0 && (len(hi) == 0 || bytes.Compare([]byte(k), hi) < 0) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if req.GetReverse() {
		slices.Reverse(keys)
	}
	if tok := string(req.GetPageToken()); tok != "" {
		i := sort.Search(len(keys), func(i int) bool {
			if req.GetReverse() {
				return keys[i] < tok
			}
			return keys[i] > tok
		})
		keys = keys[i:]
	}
	resp := &cairnpb.ScanResponse{Header: fn.header(fc.mu.index)}
	for i, k := range keys {
		if i == limit {
			resp.NextPageToken = []byte(keys[i-1])
			break
		}
		kv := proto.Clone(fc.mu.data[k]).(*cairnpb.KeyValue)
		if req.GetKeysOnly() {
			kv.Value = nil
		}
		resp.Kvs = append(resp.Kvs, kv)
	}
	return resp, nil
}

func (fn *fakeNode) Txn(ctx context.Context, req *cairnpb.TxnRequest) (*cairnpb.TxnResponse, error) {
	resp, err := fn.applyWrite("Txn", req.GetClientId(), req.GetSeq(), func(index uint64) proto.Message {
		fc := fn.cl
		ok := true
		for _, c := range req.GetCompare() {
			kv := fc.mu.data[string(c.GetKey())]
			var r int
			switch c.GetTarget() {
			case cairnpb.Compare_VALUE:
				if kv == nil {
					ok = false
					continue
				}
				r = bytes.Compare(kv.GetValue(), c.GetValue())
			case cairnpb.Compare_EXISTS:
				if (kv != nil) == c.GetExists() {
					r = 0
				} else {
					r = 1
				}
			default:
				r = int(kv.GetVersion()) - int(c.GetVersion())
			}
			switch c.GetResult() {
			case cairnpb.Compare_EQUAL:
				ok = ok && r == 0
			case cairnpb.Compare_NOT_EQUAL:
				ok = ok && r != 0
			case cairnpb.Compare_GREATER:
				ok = ok && r > 0
			case cairnpb.Compare_LESS:
				ok = ok && r < 0
			}
		}
		ops := req.GetFailure()
		if ok {
			ops = req.GetSuccess()
		}
		resp := &cairnpb.TxnResponse{Header: fn.header(index), Succeeded: ok}
		for _, op := range ops {
			switch x := op.GetRequest().(type) {
			case *cairnpb.RequestOp_Put:
				prev := fc.mu.data[string(x.Put.GetKey())]
				kv := &cairnpb.KeyValue{Key: x.Put.GetKey(), Value: x.Put.GetValue(), Version: prev.GetVersion() + 1, CreateIndex: index, ModIndex: index}
				fc.mu.data[string(kv.Key)] = kv
				resp.Responses = append(resp.Responses, &cairnpb.ResponseOp{Response: &cairnpb.ResponseOp_Put{Put: &cairnpb.PutResponse{Version: kv.Version, ModIndex: index}}})
			case *cairnpb.RequestOp_Get:
				resp.Responses = append(resp.Responses, &cairnpb.ResponseOp{Response: &cairnpb.ResponseOp_Get{Get: &cairnpb.GetResponse{Kv: fc.mu.data[string(x.Get.GetKey())]}}})
			}
		}
		return resp
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cairnpb.TxnResponse), nil
}

func (fn *fakeNode) Status(ctx context.Context, _ *cairnpb.StatusRequest) (*cairnpb.StatusResponse, error) {
	if err, _ := fn.enter("Status", false); err != nil {
		return nil, err
	}
	fc := fn.cl
	fc.mu.Lock()
	defer fc.mu.Unlock()
	resp := &cairnpb.StatusResponse{NodeId: fn.id, GrpcAddr: fn.addr, LeaderGrpcAddr: fc.mu.leader, State: cairnpb.RaftState_FOLLOWER}
	if l := fc.nodes[fc.mu.leader]; l != nil {
		resp.LeaderId = l.id
	}
	if fc.mu.leader == fn.addr {
		resp.State = cairnpb.RaftState_LEADER
	}
	return resp, nil
}

// Backup streams the files given by backupFiles.
func (fn *fakeNode) Backup(_ *cairnpb.BackupRequest, stream grpc.ServerStreamingServer[cairnpb.BackupResponse]) error {
	if err, _ := fn.enter("Backup", false); err != nil {
		return err
	}
	return fakeBackupStream(testBackupFiles, 7, stream.Send)
}

var testBackupFiles = []struct {
	name string
	data []byte
}{
	{"000001.sst", bytes.Repeat([]byte("sst data "), 1000)},
	{"EMPTY", nil},
	{"MANIFEST-000002", []byte(strings.Repeat("m", 100))},
	{"OPTIONS", []byte("options")},
}

// fakeBackupStream sends files as the real server does: a header, then
// chunks of at most chunk bytes.
func fakeBackupStream(files []struct {
	name string
	data []byte
}, chunk int, send func(*cairnpb.BackupResponse) error) error {
	hdr := &cairnpb.BackupHeader{AppliedIndex: 42, AppliedTerm: 3, NodeId: "n1"}
	for _, f := range files {
		hdr.Files = append(hdr.Files, &cairnpb.BackupFile{Name: f.name, Size: uint64(len(f.data)), Crc32C: crc32c(f.data)})
	}
	if err := send(&cairnpb.BackupResponse{Msg: &cairnpb.BackupResponse_Header{Header: hdr}}); err != nil {
		return err
	}
	for i, f := range files {
		for off := 0; off < len(f.data); off += chunk {
			end := min(off+chunk, len(f.data))
			c := &cairnpb.BackupChunk{File: uint32(i), Offset: uint64(off), Data: f.data[off:end]}
			if err := send(&cairnpb.BackupResponse{Msg: &cairnpb.BackupResponse_Chunk{Chunk: c}}); err != nil {
				return err
			}
		}
	}
	return nil
}
