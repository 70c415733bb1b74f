package fsm

import (
	"bytes"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// NewCommand wraps a write request (*cairnpb.PutRequest, DeleteRequest,
// DeleteRangeRequest or TxnRequest) in a Command, taking client_id and seq
// from the request. The request is not copied.
func NewCommand(req proto.Message) (*fsmpb.Command, error) {
	switch r := req.(type) {
	case *cairnpb.PutRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Put{Put: r}}, nil
	case *cairnpb.DeleteRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Delete{Delete: r}}, nil
	case *cairnpb.DeleteRangeRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_DeleteRange{DeleteRange: r}}, nil
	case *cairnpb.TxnRequest:
		return &fsmpb.Command{ClientId: r.GetClientId(), Seq: r.GetSeq(), Op: &fsmpb.Command_Txn{Txn: r}}, nil
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
