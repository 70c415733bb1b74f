package cairnpb

// Limits every node enforces.
const (
	// MaxKeySize is the largest key, in bytes: 64 KiB less one, because
	// the state machine stores a key behind a one-byte prefix in an engine
	// whose keys are at most 64 KiB (package fsm checks this at compile
	// time). Keys must also be non-empty. Every layer (client, node, state
	// machine) enforces this one constant.
	MaxKeySize = 64<<10 - 1
	// DefaultMaxValueSize is the largest value, in bytes, unless a node is
	// configured otherwise (every node of a cluster must use the same
	// limit).
	DefaultMaxValueSize = 16 << 20
	// MaxClientIDSize is the longest client_id of a write, in bytes.
	MaxClientIDSize = 256
	// MaxTxnOps is the most compares, and the most operations in each of
	// the success and failure branches, of one Txn.
	MaxTxnOps = 128

	// DefaultScanLimit is the page size of a Scan whose limit is 0, and
	// MaxScanLimit the largest page size a Scan may ask for (larger limits
	// are reduced to it).
	DefaultScanLimit = 1000
	MaxScanLimit     = 10000
	// MaxScanPageBytes bounds the keys and values of one Scan page: a page
	// ends after the key that brings it to this size, or before a key that
	// would take it past the node's gRPC message limit (maxValueSize +
	// MaxKeySize + 1 MiB; a page holds at least one key, whatever its
	// size).
	MaxScanPageBytes = 4 << 20

	// DefaultMaxResponseKVBytes is MaxResponseKVBytes of the default
	// largest value.
	DefaultMaxResponseKVBytes = DefaultMaxValueSize + MaxKeySize
)

// MaxResponseKVBytes returns how many bytes of keys and values one response
// may carry on a cluster whose largest value is maxValueSize: the largest
// value with the largest key, so that any one key can always be read, and
// any response within it fits the nodes' gRPC message limit (maxValueSize
// + MaxKeySize + 1 MiB, which leaves 1 MiB for the rest of a response:
// headers and metadata, a few dozen bytes per KeyValue).
//
// A Txn whose response would carry more (the key and value of its Gets'
// kv and of its Puts' and Deletes' prev_kv, counted as often as they
// appear) fails as a whole, with InvalidArgument ("txn response exceeds
// the limit of N bytes of keys and values ..."), and applies none of its
// writes: read large values with separate Gets, or a Scan. The bound a
// Txn is held to travels in its raft command, stamped by the node that
// proposed it.
func MaxResponseKVBytes(maxValueSize int) int { return maxValueSize + MaxKeySize }

// gRPC metadata keys.
const (
	// ForwardHopsKey is the gRPC metadata key carrying how many times a
	// request has been forwarded between nodes (a decimal integer; absent
	// means 0). Nodes set it when they forward; clients do not.
	ForwardHopsKey = "cairn-forward-hops"
	// MaxForwardHops is how many times a request may be forwarded before a
	// node fails it with a NotLeader detail instead.
	MaxForwardHops = 3
)

// PrefixEnd returns the smallest key greater than every key with the given
// prefix, the exclusive end of the prefix's range, or nil when there is none
// (an empty prefix, or one of only 0xff bytes: the range is unbounded).
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			end := make([]byte, i+1)
			copy(end, prefix)
			end[i]++
			return end
		}
	}
	return nil
}
