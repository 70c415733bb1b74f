package cairnpb

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ prefix, want []byte }{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{0x00}, []byte{0x01}},
	} {
		if got := PrefixEnd(tc.prefix); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tc.prefix, got, tc.want)
		}
	}
}

// TestPrefixEndProperty checks the defining property against random keys:
// k has the prefix iff prefix <= k < PrefixEnd(prefix) (nil: unbounded).
func TestPrefixEndProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 0x01, 'a', 0xfe, 0xff}
	gen := func(n int) []byte {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	for range 20000 {
		prefix, k := gen(3), gen(4)
		end := PrefixEnd(prefix)
		in := bytes.Compare(k, prefix) >= 0 && (end == nil || bytes.Compare(k, end) < 0)
		if in != bytes.HasPrefix(k, prefix) {
			t.Fatalf("prefix %x key %x end %x: in range %v, has prefix %v", prefix, k, end, in, !in)
		}
	}
}

// TestMaxResponseKVBytesFitsAMessage: a Txn response whose keys and values
// reach MaxResponseKVBytes, spread over the most operations with the
// largest metadata, still fits the nodes' gRPC messages (maxValueSize +
// MaxKeySize + 1 MiB), so every Txn the bound lets through can be sent.
func TestMaxResponseKVBytesFitsAMessage(t *testing.T) {
	for _, maxValue := range []int{4 << 10, DefaultMaxValueSize, 64 << 20} {
		bound := MaxResponseKVBytes(maxValue)
		resp := &TxnResponse{
			Header:    &ResponseHeader{NodeId: string(make([]byte, 256)), RaftTerm: 1<<64 - 1, AppliedIndex: 1<<64 - 1},
			Succeeded: true,
		}
		left := bound
		for i := range MaxTxnOps {
			n := left / (MaxTxnOps - i)
			left -= n
			k := min(n, MaxKeySize)
			kv := &KeyValue{Key: make([]byte, k), Value: make([]byte, n-k), Version: 1<<64 - 1, CreateIndex: 1<<64 - 1, ModIndex: 1<<64 - 1}
			resp.Responses = append(resp.Responses, &ResponseOp{Response: &ResponseOp_Get{Get: &GetResponse{Kv: kv}}})
		}
		if size, limit := proto.Size(resp), maxValue+MaxKeySize+1<<20; size > limit {
			t.Errorf("largest value %d: a response of %d bytes of keys and values encodes to %d bytes, more than a message's %d",
				maxValue, bound, size, limit)
		}
	}
}
