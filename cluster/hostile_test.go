package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec sends and receives a call's message as the bytes given, so a
// test can put any bytes on the wire. It names itself "proto": the server
// decodes with its protobuf codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// invokeRaw calls method with req as the request's bytes.
func invokeRaw(ctx context.Context, cc *grpc.ClientConn, method string, req []byte) error {
	var resp []byte
	return cc.Invoke(ctx, method, &req, &resp, grpc.ForceCodec(rawCodec{}))
}

// hostileMaxValue is the hostile node's value limit: small, so that a
// message over the gRPC size limit (maxMessageSize) is cheap to send.
const hostileMaxValue = 4 << 10

// TestHostileInput sends malformed, truncated and oversized requests to a
// running node, and garbage to its raft and gossip ports, and checks that
// each gets the documented error (README.md, "Security") and that the
// node keeps serving without leaking goroutines.
func TestHostileInput(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, func(c *Config) {
		c.MaxValueSize = hostileMaxValue
		c.GossipKey = bytes.Repeat([]byte{7}, 32)
	})[0]
	cc := tc.conn(n)
	kv := cairnpb.NewKVClient(cc)
	put(t, kv, "warm", "up")

	// serving checks the node still takes writes and serves reads.
	serving := func(t *testing.T) {
		t.Helper()
		key := fmt.Sprintf("after-%s", t.Name())
		put(t, kv, key, "ok")
		if got := get(t, kv, key, cairnpb.Consistency_LINEARIZABLE); string(got.GetKv().GetValue()) != "ok" {
			t.Fatalf("after the hostile request: get %s = %q", key, got.GetKv().GetValue())
		}
	}
	expect := func(t *testing.T, err error, code codes.Code, msg string) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != code || !strings.Contains(st.Message(), msg) {
			t.Fatalf("got %v, want %v with %q", err, code, msg)
		}
	}
	baseline := runtime.NumGoroutine()

	t.Run("malformed protobuf", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			method string
			req    []byte
		}{
			{"garbage", cairnpb.KV_Put_FullMethodName, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
			{"truncated length", cairnpb.KV_Put_FullMethodName, protowire.AppendTag(nil, 1, protowire.BytesType)},
			{"truncated bytes", cairnpb.KV_Get_FullMethodName, append(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 100), "short"...)},
			{"huge length", cairnpb.KV_Scan_FullMethodName, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 1<<62)},
			{"wrong wire type", cairnpb.KV_Txn_FullMethodName, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 1)[:4]},
			{"bad group", cairnpb.KV_Delete_FullMethodName, protowire.AppendTag(nil, 1, protowire.EndGroupType)},
			{"deep nesting", cairnpb.KV_Txn_FullMethodName, deepTxn(200)},
			{"invalid utf-8 client_id", cairnpb.KV_Put_FullMethodName, protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte{0xc3, 0x28})},
		} {
			t.Run(c.name, func(t *testing.T) {
				err := invokeRaw(ctxTimeout(t, 5*time.Second), cc, c.method, c.req)
				expect(t, err, codes.Internal, "failed to unmarshal")
			})
		}
		serving(t)
	})

	t.Run("invalid requests", func(t *testing.T) {
		ctx := ctxTimeout(t, 5*time.Second)
		big := bytes.Repeat([]byte("k"), cairnpb.MaxKeySize+1)
		_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: nil, Value: []byte("v")})
		expect(t, err, codes.InvalidArgument, "empty key")
		_, err = kv.Get(ctx, &cairnpb.GetRequest{Key: nil})
		expect(t, err, codes.InvalidArgument, "empty key")
		_, err = kv.Delete(ctx, &cairnpb.DeleteRequest{Key: big})
		expect(t, err, codes.InvalidArgument, "exceeds the limit")
		_, err = kv.Get(ctx, &cairnpb.GetRequest{Key: big})
		expect(t, err, codes.InvalidArgument, "exceeds the limit")
		_, err = kv.Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: make([]byte, hostileMaxValue+1)})
		expect(t, err, codes.InvalidArgument, "value of 4097 bytes exceeds the limit of 4096")
		_, err = kv.Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), ClientId: strings.Repeat("c", cairnpb.MaxClientIDSize+1), Seq: 1})
		expect(t, err, codes.InvalidArgument, "client_id")
		_, err = kv.Scan(ctx, &cairnpb.ScanRequest{Start: []byte("b"), End: []byte("a")})
		expect(t, err, codes.InvalidArgument, "start")
		_, err = kv.Get(ctx, &cairnpb.GetRequest{Key: []byte("k"), Consistency: 99})
		expect(t, err, codes.InvalidArgument, "unknown consistency")

		ops := make([]*cairnpb.RequestOp, cairnpb.MaxTxnOps+1)
		for i := range ops {
			ops[i] = &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: []byte{'t', byte(i)}}}}
		}
		_, err = kv.Txn(ctx, &cairnpb.TxnRequest{Success: ops})
		expect(t, err, codes.InvalidArgument, "exceeds the limit of 128")
		_, err = kv.Txn(ctx, &cairnpb.TxnRequest{Success: []*cairnpb.RequestOp{{}}})
		expect(t, err, codes.InvalidArgument, "operation without a request")
		serving(t)
	})

	t.Run("oversized message", func(t *testing.T) {
		// A Put whose value field alone is over the message limit: gRPC
		// refuses it before decoding it.
		size := maxMessageSize(hostileMaxValue) + 1
		req := protowire.AppendBytes(protowire.AppendTag(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("k")), 2, protowire.BytesType), make([]byte, size))
		err := invokeRaw(ctxTimeout(t, 10*time.Second), cc, cairnpb.KV_Put_FullMethodName, req)
		expect(t, err, codes.ResourceExhausted, "larger than max")
		serving(t)
	})

	t.Run("absurd scan limit", func(t *testing.T) {
		// More keys than MaxScanLimit, written 128 to a Txn.
		for i := 0; i < cairnpb.MaxScanLimit+1; i += cairnpb.MaxTxnOps {
			var ops []*cairnpb.RequestOp
			for j := i; j < min(i+cairnpb.MaxTxnOps, cairnpb.MaxScanLimit+1); j++ {
				ops = append(ops, &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: fmt.Appendf(nil, "scan/%06d", j)}}})
			}
			if _, err := kv.Txn(ctxTimeout(t, 10*time.Second), &cairnpb.TxnRequest{Success: ops}); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := kv.Scan(ctxTimeout(t, 10*time.Second), &cairnpb.ScanRequest{Prefix: []byte("scan/"), Limit: 1<<32 - 1, KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetKvs()) != cairnpb.MaxScanLimit || resp.GetNextPageToken() == nil {
			t.Fatalf("scan with limit 2^32-1: %d keys, next page token %q; want %d and a token", len(resp.GetKvs()), resp.GetNextPageToken(), cairnpb.MaxScanLimit)
		}
		_, err = kv.Scan(ctxTimeout(t, 10*time.Second), &cairnpb.ScanRequest{Prefix: []byte("scan/"), PageToken: []byte("not a token")})
		expect(t, err, codes.InvalidArgument, "")
		serving(t)
	})

	t.Run("truncated frames", func(t *testing.T) {
		for _, c := range []struct {
			name string
			data []byte // the DATA frame's payload, ended by END_STREAM
		}{
			{"message shorter than its prefix", append([]byte{0, 0, 0, 0, 100}, "short"...)},
			{"half a prefix", []byte{0, 0, 0}},
			{"compressed flag without compression", append([]byte{1, 0, 0, 0, 1}, 0)},
			{"prefix over the size limit", []byte{0, 0x7f, 0xff, 0xff, 0xff}},
		} {
			t.Run(c.name, func(t *testing.T) {
				code, msg := rawHTTP2Call(t, n.GRPCAddr(), cairnpb.KV_Put_FullMethodName, c.data)
				if code == codes.OK || code == codes.Unknown {
					t.Fatalf("got grpc-status %v %q, want an error", code, msg)
				}
				t.Logf("grpc-status %v: %s", code, msg)
			})
		}
		serving(t)
	})

	t.Run("garbage on the raft port", func(t *testing.T) {
		garbage := make([]byte, 64<<10)
		rand.Read(garbage)
		for _, prefix := range [][]byte{
			nil,
			{0},                               // rpcAppendEntries, then garbage msgpack
			{0, 0xdf, 0xff, 0xff, 0xff, 0xff}, // a map claiming 2^32-1 entries
			{0, 0xdd, 0xff, 0xff, 0xff, 0xff}, // an array claiming 2^32-1 entries
			{2, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xc6, 0x7f, 0xff, 0xff, 0xff}, // InstallSnapshot with a 2 GiB blob
		} {
			sendTCP(t, n.RaftAddr(), append(prefix, garbage...))
		}
		serving(t)
	})

	t.Run("garbage on the gossip port", func(t *testing.T) {
		garbage := make([]byte, 60<<10)
		rand.Read(garbage)
		uc, err := net.Dial("udp", n.GossipAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		for i := range 100 {
			if _, err := uc.Write(garbage[:1+i*300]); err != nil {
				t.Fatal(err)
			}
		}
		sendTCP(t, n.GossipAddr(), garbage)
		// A plaintext push-pull header (message type 6) with a claimed
		// 2^31 states, refused by the encrypted node.
		sendTCP(t, n.GossipAddr(), append([]byte{6, 0x83}, garbage...))
		serving(t)
	})

	waitFor(t, 10*time.Second, "the node's goroutines to return to their number before the hostile requests", func() bool {
		return runtime.NumGoroutine() <= baseline+5
	})
}

// deepTxn returns a TxnRequest encoding whose success operation nests a
// request depth levels deep in the wrong type (a Txn has no Txn ops: the
// nested fields are unknown ones, kept as bytes, or rejected).
func deepTxn(depth int) []byte {
	var b []byte
	for range depth {
		b = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), b)
	}
	return append(b, 0xff) // and a truncated tag at the end
}

// sendTCP writes data to addr and closes the connection, reading whatever
// the peer answers until it closes its side or a second passes.
func sendTCP(t *testing.T, addr string, data []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second * waitSlack))
	c.Write(data) // the peer may close early: not an error here
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.Copy(io.Discard, c)
}

// rawHTTP2Call makes a gRPC call by hand on a new HTTP/2 connection, with
// body as the bytes of its DATA frame, and returns the grpc-status and
// grpc-message of the answer.
func rawHTTP2Call(t *testing.T, addr, method string, body []byte) (codes.Code, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second * waitSlack))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := errors.Join(
		fr.WriteSettings(),
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}),
		fr.WriteData(1, true, body),
	); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s != "200" {
				return codes.Unknown, "HTTP status " + s
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "grpc-status" {
					var code uint32
					fmt.Sscan(hf.Value, &code)
					msg := ""
					for _, m := range f.RegularFields() {
						if m.Name == "grpc-message" {
							msg = m.Value
						}
					}
					return codes.Code(code), msg
				}
			}
		case *http2.RSTStreamFrame:
			return codes.Unknown, fmt.Sprintf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return codes.Unknown, fmt.Sprintf("go away: %v", f.ErrCode)
		}
	}
}

// TestRequestDeadlines checks the server-side deadlines: a request without
// a deadline gets Config.RequestTimeout, one with a far deadline is cut to
// Config.MaxRequestTimeout.
func TestRequestDeadlines(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, func(c *Config) {
		c.RequestTimeout = 300 * time.Millisecond
		c.MaxRequestTimeout = time.Second
	})[0]
	kv := tc.kv(n)
	put(t, kv, "k", "v")

	// Stall the state machine: a write waits for it until its deadline.
	release := make(chan struct{})
	stall := func() { <-release }
	n.fsm.beforeApply.Store(&stall)
	released := false
	unstall := func() {
		if !released {
			released = true
			n.fsm.beforeApply.Store(nil)
			close(release)
		}
	}
	defer unstall()

	timed := func(ctx context.Context, limit time.Duration) (time.Duration, error) {
		t.Helper()
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, err := kv.Put(ctx, &cairnpb.PutRequest{Key: []byte("k"), Value: []byte("w")})
			errc <- err
		}()
		select {
		case err := <-errc:
			return time.Since(start), err
		case <-time.After(limit * waitSlack):
			t.Fatalf("a write to a stalled node did not end within %v", limit*waitSlack)
			return 0, nil
		}
	}
	// No deadline: RequestTimeout.
	d, err := timed(context.Background(), 5*time.Second)
	if c := status.Code(err); c != codes.ResourceExhausted && c != codes.DeadlineExceeded {
		t.Fatalf("write without a deadline to a stalled node: %v, want ResourceExhausted or DeadlineExceeded", err)
	}
	t.Logf("no deadline: %v after %v", err, d)
	// An hour: cut to MaxRequestTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	d, err = timed(ctx, 5*time.Second)
	if c := status.Code(err); c != codes.ResourceExhausted && c != codes.DeadlineExceeded {
		t.Fatalf("write with an hour's deadline to a stalled node: %v, want ResourceExhausted or DeadlineExceeded", err)
	}
	if d < 500*time.Millisecond {
		t.Fatalf("write with an hour's deadline ended after %v, before MaxRequestTimeout (1s) less the margin", d)
	}
	t.Logf("an hour's deadline: %v after %v", err, d)

}

// TestMaxConcurrentStreams checks that a connection has at most
// Config.MaxConcurrentStreams calls open: two writes held by a stalled
// state machine take both streams, and a third call waits for one until
// its own deadline.
func TestMaxConcurrentStreams(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, func(c *Config) {
		c.RequestTimeout = time.Minute
		c.MaxConcurrentStreams = 2
	})[0]
	kv := tc.kv(n)
	put(t, kv, "k", "v")
	get(t, kv, "k", cairnpb.Consistency_SERIALIZABLE)

	release := make(chan struct{})
	stall := func() { <-release }
	n.fsm.beforeApply.Store(&stall)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := kv.Put(context.Background(), &cairnpb.PutRequest{Key: fmt.Appendf(nil, "s%d", i)})
			errs <- err
		}()
	}
	waitFor(t, 5*time.Second, "two writes committed and waiting for the state machine", func() bool {
		return n.raft.CommitIndex() >= n.fsm.AppliedIndex()+2
	})
	_, err := kv.Get(ctxTimeout(t, 200*time.Millisecond), &cairnpb.GetRequest{Key: []byte("k"), Consistency: cairnpb.Consistency_SERIALIZABLE})
	n.fsm.beforeApply.Store(nil)
	close(release)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("third call on a connection whose 2 streams are busy: %v, want DeadlineExceeded", err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("stalled write after the stall: %v", err)
		}
	}
	get(t, kv, "k", cairnpb.Consistency_SERIALIZABLE)
}

// TestGossipMalformedStreams sends memberlist TCP messages that crashed
// memberlist v0.6.0 to an unencrypted node (any host that reaches the
// gossip port can send them): a push-pull whose node state carries a
// protocol version list of one entry (v0.6.0 indexed it up to [5]: a
// panic), and a user message claiming 2^40 bytes (v0.6.0 allocated them).
// memberlist v0.7.0 refuses both; the node must keep serving.
func TestGossipMalformedStreams(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.formCluster(1, nil)[0]
	kv := tc.kv(n)
	put(t, kv, "k", "v")
	enc := func(vs ...any) []byte {
		var b []byte
		for _, v := range vs {
			var buf []byte
			if err := codec.NewEncoderBytes(&buf, &codec.MsgpackHandle{}).Encode(v); err != nil {
				t.Fatal(err)
			}
			b = append(b, buf...)
		}
		return b
	}
	const pushPullMsg, userMsg = 6, 8 // memberlist's messageType values
	pushPull := append([]byte{pushPullMsg}, enc(
		map[string]any{"Nodes": 1, "UserStateLen": 0, "Join": false},
		map[string]any{"Name": "intruder", "Addr": []byte{127, 0, 0, 1}, "Port": 1, "Incarnation": 1, "State": 0, "Vsn": []byte{1}},
	)...)
	sendTCP(t, n.GossipAddr(), pushPull)
	sendTCP(t, n.GossipAddr(), append([]byte{userMsg}, enc(map[string]any{"UserMsgLen": 1 << 40})...))
	put(t, kv, "k", "after")
	if got := get(t, kv, "k", cairnpb.Consistency_LINEARIZABLE); string(got.GetKv().GetValue()) != "after" {
		t.Fatalf("get after the gossip garbage: %q", got.GetKv().GetValue())
	}
	if _, ok := n.member("intruder"); ok {
		t.Fatal("the node took the intruder's malformed state")
	}
}
