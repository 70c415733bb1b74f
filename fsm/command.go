package fsm

import (
	"bytes"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// NewCommand wraps a write request (*cairnpb.PutRequest, DeleteRequest,
// DeleteRangeRequest or TxnRequest) in a Command, taking client_id and seq
// from the request. The request is not copied. A Txn command is stamped
// with the response bound of the default largest value
// (cairnpb.DefaultMaxResponseKVBytes); FSM.NewCommand stamps the FSM's.
func NewCommand(req proto.Message) (*fsmpb.Command, error) {
	return newCommand(req, cairnpb.DefaultMaxResponseKVBytes)
}

// NewCommand is the package's NewCommand with a Txn command stamped with
// the response bound of this FSM's Options.MaxValueSize
// (cairnpb.MaxResponseKVBytes): what a node proposes.
//
// Why the bound is stamped rather than read from the applying replica's
// options: every replica must refuse or apply a Txn alike, and a replica's
// MaxValueSize is local configuration (meant to be the same on every node,
// but nothing checks it, and a rolling change of it has nodes disagree for
// a while). A fixed constant would be deterministic too, but would have to
// be either too small for a cluster configured with larger values (a Txn
// could not read one of them) or, at lsm.MaxValueSize, too large to bound
// much. The stamped bound is a function of the log alone; a command logged
// before the field existed carries 0, no bound, so replaying an old log
// applies every entry as it was applied then.
func (f *FSM) NewCommand(req proto.Message) (*fsmpb.Command, error) {
	return newCommand(req, f.limits.maxResponseKV)
}

func newCommand(req proto.Message, maxResponseKV int) (*fsmpb.Command, error) {
	switch r := req.(type) {
	case *cairnpb.PutRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Put{Put: r}}, nil
	case *cairnpb.DeleteRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Delete{Delete: r}}, nil
	case *cairnpb.DeleteRangeRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_DeleteRange{DeleteRange: r}}, nil
	case *cairnpb.TxnRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Txn{Txn: r},
			MaxTxnResponseBytes: uint64(maxResponseKV)}, nil
	default:
		return nil, invalidf("%T is not a write request", req)
	}
}

// Encode returns the raft log payload of cmd.
func Encode(cmd *fsmpb.Command) ([]byte, error) {
	return proto.Marshal(cmd)
}

// Decode parses a raft log payload written by Encode.
func Decode(data []byte) (*fsmpb.Command, error) {
	cmd := &fsmpb.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, invalidf("undecodable command: %v", err)
	}
	return cmd, nil
}

// limits are the checks every command passes before it is applied.
type limits struct {
	maxValueSize int
	// maxResponseKV is the response bound this node stamps on the Txn
	// commands it proposes (cairnpb.MaxResponseKVBytes(maxValueSize)).
	// Applying a command uses the command's own bound, never this.
	maxResponseKV int
	// maxScanPage bounds a Scan page's KeyValues, each counted with
	// scanKVOverhead (see FSM.scan).
	maxScanPage int
}

// scanKVOverhead bounds what one KeyValue adds to a ScanResponse's encoding
// beyond its key and value: its field tag and length (1+3 bytes), the key's
// and value's tags and lengths (1+3, 1+4) and three varint fields (3*11).
const scanKVOverhead = 48

// maxScanPageBytes returns the bound of a Scan page's KeyValues (with
// scanKVOverhead each) on a node whose largest value is maxValueSize, such
// that a page always fits the node's gRPC messages (maxValueSize +
// cairnpb.MaxKeySize + 1 MiB, cluster's maxMessageSize): what is left is
// the next page token (a key and 3 bytes, with its tag and length) and the
// header (a node id and two varints), for which 64 KiB is ample.
func maxScanPageBytes(maxValueSize int) int {
	return maxValueSize + cairnpb.MaxKeySize + 1<<20 - (cairnpb.MaxKeySize + 64<<10)
}

// Validate checks a command as ApplyBatch will, so that the cluster layer
// can refuse an invalid write before proposing it. The error wraps
// ErrInvalidArgument.
func (f *FSM) Validate(cmd *fsmpb.Command) error {
	return f.limits.command(cmd)
}

func (l limits) command(cmd *fsmpb.Command) error {
	if err := l.session(cmd); err != nil {
		return err
	}
	return l.op(cmd)
}

// session checks a command's at-most-once identity.
func (l limits) session(cmd *fsmpb.Command) error {
	if len(cmd.GetClientId()) > cairnpb.MaxClientIDSize {
		return invalidf("client_id of %d bytes exceeds the limit of %d", len(cmd.GetClientId()), cairnpb.MaxClientIDSize)
	}
	if cmd.GetClientId() != "" && cmd.GetSeq() == 0 {
		return invalidf("a write with a client_id needs a seq > 0")
	}
	return nil
}

// op checks a command's operation.
func (l limits) op(cmd *fsmpb.Command) error {
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_Put:
		return l.put(op.Put)
	case *fsmpb.Command_Delete:
		return l.key("key", op.Delete.GetKey())
	case *fsmpb.Command_DeleteRange:
		return l.deleteRange(op.DeleteRange)
	case *fsmpb.Command_Txn:
		return l.txn(op.Txn)
	default:
		return invalidf("command without an operation")
	}
}

func (l limits) key(what string, k []byte) error {
	switch {
	case len(k) == 0:
		return invalidf("empty %s", what)
	case len(k) > maxUserKeySize:
		return invalidf("%s of %d bytes exceeds the limit of %d", what, len(k), maxUserKeySize)
	}
	return nil
}

func (l limits) put(r *cairnpb.PutRequest) error {
	if r == nil {
		return invalidf("missing put request")
	}
	if err := l.key("key", r.GetKey()); err != nil {
		return err
	}
	if len(r.GetValue()) > l.maxValueSize {
		return invalidf("value of %d bytes exceeds the limit of %d", len(r.GetValue()), l.maxValueSize)
	}
	return nil
}

func (l limits) deleteRange(r *cairnpb.DeleteRangeRequest) error {
	if len(r.GetPrefix()) == 0 && len(r.GetStart()) == 0 {
		return invalidf("delete range needs a start or a prefix (to delete every key use start \"\\x00\")")
	}
	_, _, err := l.keyRange(r.GetStart(), r.GetEnd(), r.GetPrefix())
	return err
}

// keyRange resolves a start/end/prefix triple into the user-key range
// [lo, hi); hi == nil means unbounded. An empty start means the first key.
func (l limits) keyRange(start, end, prefix []byte) (lo, hi []byte, err error) {
	if len(prefix) > 0 {
		if len(start) > 0 || len(end) > 0 {
			return nil, nil, invalidf("prefix excludes start and end")
		}
		if err := l.key("prefix", prefix); err != nil {
			return nil, nil, err
		}
		return prefix, cairnpb.PrefixEnd(prefix), nil
	}
	if len(start) > 0 {
		if err := l.key("start", start); err != nil {
			return nil, nil, err
		}
	}
	if len(end) > 0 {
		if err := l.key("end", end); err != nil {
			return nil, nil, err
		}
		if bytes.Compare(start, end) > 0 {
			return nil, nil, invalidf("start %q > end %q", start, end)
		}
		return start, end, nil
	}
	return start, nil, nil
}

func (l limits) txn(r *cairnpb.TxnRequest) error {
	if len(r.GetCompare()) > cairnpb.MaxTxnOps || len(r.GetSuccess()) > cairnpb.MaxTxnOps ||
		len(r.GetFailure()) > cairnpb.MaxTxnOps {
		return invalidf("txn with %d compares, %d success and %d failure operations exceeds the limit of %d each",
			len(r.GetCompare()), len(r.GetSuccess()), len(r.GetFailure()), cairnpb.MaxTxnOps)
	}
	for i, c := range r.GetCompare() {
		if err := l.compare(c); err != nil {
			return withContext(err, "compare %d", i)
		}
	}
	for _, branch := range []struct {
		name string
		ops  []*cairnpb.RequestOp
	}{{"success", r.GetSuccess()}, {"failure", r.GetFailure()}} {
		for i, op := range branch.ops {
			if err := l.requestOp(op); err != nil {
				return withContext(err, "%s operation %d", branch.name, i)
			}
		}
	}
	return nil
}

func (l limits) compare(c *cairnpb.Compare) error {
	if err := l.key("key", c.GetKey()); err != nil {
		return err
	}
	switch c.GetResult() {
	case cairnpb.Compare_EQUAL, cairnpb.Compare_NOT_EQUAL, cairnpb.Compare_GREATER, cairnpb.Compare_LESS:
	default:
		return invalidf("unknown compare result %d", c.GetResult())
	}
	ok := false
	switch c.GetTarget() {
	case cairnpb.Compare_VALUE:
		_, ok = c.GetTargetUnion().(*cairnpb.Compare_Value)
	case cairnpb.Compare_VERSION:
		_, ok = c.GetTargetUnion().(*cairnpb.Compare_Version)
	case cairnpb.Compare_MOD_INDEX:
		_, ok = c.GetTargetUnion().(*cairnpb.Compare_ModIndex)
	case cairnpb.Compare_CREATE_INDEX:
		_, ok = c.GetTargetUnion().(*cairnpb.Compare_CreateIndex)
	case cairnpb.Compare_EXISTS:
		_, ok = c.GetTargetUnion().(*cairnpb.Compare_Exists)
		if r := c.GetResult(); r != cairnpb.Compare_EQUAL && r != cairnpb.Compare_NOT_EQUAL {
			return invalidf("EXISTS compares only with EQUAL or NOT_EQUAL, not %v", r)
		}
	default:
		return invalidf("unknown compare target %d", c.GetTarget())
	}
	if !ok {
		return invalidf("compare target %v with a %T operand", c.GetTarget(), c.GetTargetUnion())
	}
	return nil
}

func (l limits) requestOp(op *cairnpb.RequestOp) error {
	switch r := op.GetRequest().(type) {
	case *cairnpb.RequestOp_Put:
		return l.put(r.Put)
	case *cairnpb.RequestOp_Get:
		return l.key("key", r.Get.GetKey())
	case *cairnpb.RequestOp_Delete:
		return l.key("key", r.Delete.GetKey())
	case *cairnpb.RequestOp_DeleteRange:
		return l.deleteRange(r.DeleteRange)
	default:
		return invalidf("operation without a request")
	}
}
