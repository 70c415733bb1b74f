package client

import (
	"context"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
)

// Cmp is one condition of a Txn, built with Value, Version, ModIndex,
// CreateIndex, Exists or NotExists.
type Cmp struct {
	pb *cairnpb.Compare
}

// ValueCmp builds comparisons of a key's value (bytewise). On a missing
// key every value comparison is false.
type ValueCmp struct{ key []byte }

// Value starts a comparison of key's value: Value(k).Equal(v).
func Value(key []byte) ValueCmp { return ValueCmp{key} }

func (v ValueCmp) cmp(r cairnpb.Compare_Result, val []byte) Cmp {
	if val == nil {
		val = []byte{}
	}
	return Cmp{&cairnpb.Compare{Key: v.key, Target: cairnpb.Compare_VALUE, Result: r,
		TargetUnion: &cairnpb.Compare_Value{Value: val}}}
}

// Equal holds if the key exists with value val.
func (v ValueCmp) Equal(val []byte) Cmp { return v.cmp(cairnpb.Compare_EQUAL, val) }

// NotEqual holds if the key exists with a value other than val.
func (v ValueCmp) NotEqual(val []byte) Cmp { return v.cmp(cairnpb.Compare_NOT_EQUAL, val) }

// Greater holds if the key exists with a value bytewise greater than val.
func (v ValueCmp) Greater(val []byte) Cmp { return v.cmp(cairnpb.Compare_GREATER, val) }

// Less holds if the key exists with a value bytewise less than val.
func (v ValueCmp) Less(val []byte) Cmp { return v.cmp(cairnpb.Compare_LESS, val) }

// MetaCmp builds comparisons of a key's metadata: its version, mod index or
// create index. A missing key has 0 for each, so Version(k).Equal(0) means
// "k is absent".
type MetaCmp struct {
	key    []byte
	target cairnpb.Compare_Target
}

// Version starts a comparison of key's version (Puts since creation).
func Version(key []byte) MetaCmp { return MetaCmp{key, cairnpb.Compare_VERSION} }

// ModIndex starts a comparison of the raft index of key's last Put.
func ModIndex(key []byte) MetaCmp { return MetaCmp{key, cairnpb.Compare_MOD_INDEX} }

// CreateIndex starts a comparison of the raft index of key's creation.
func CreateIndex(key []byte) MetaCmp { return MetaCmp{key, cairnpb.Compare_CREATE_INDEX} }

func (m MetaCmp) cmp(r cairnpb.Compare_Result, n uint64) Cmp {
	pb := &cairnpb.Compare{Key: m.key, Target: m.target, Result: r}
	switch m.target {
	case cairnpb.Compare_VERSION:
		pb.TargetUnion = &cairnpb.Compare_Version{Version: n}
	case cairnpb.Compare_MOD_INDEX:
		pb.TargetUnion = &cairnpb.Compare_ModIndex{ModIndex: n}
	default:
		pb.TargetUnion = &cairnpb.Compare_CreateIndex{CreateIndex: n}
	}
	return Cmp{pb}
}

// Equal holds if the metadata equals n.
func (m MetaCmp) Equal(n uint64) Cmp { return m.cmp(cairnpb.Compare_EQUAL, n) }

// NotEqual holds if the metadata differs from n.
func (m MetaCmp) NotEqual(n uint64) Cmp { return m.cmp(cairnpb.Compare_NOT_EQUAL, n) }

// Greater holds if the metadata is greater than n.
func (m MetaCmp) Greater(n uint64) Cmp { return m.cmp(cairnpb.Compare_GREATER, n) }

// Less holds if the metadata is less than n.
func (m MetaCmp) Less(n uint64) Cmp { return m.cmp(cairnpb.Compare_LESS, n) }

// Exists holds if key exists.
func Exists(key []byte) Cmp {
	return Cmp{&cairnpb.Compare{Key: key, Target: cairnpb.Compare_EXISTS, Result: cairnpb.Compare_EQUAL,
		TargetUnion: &cairnpb.Compare_Exists{Exists: true}}}
}

// NotExists holds if key does not exist.
func NotExists(key []byte) Cmp {
	return Cmp{&cairnpb.Compare{Key: key, Target: cairnpb.Compare_EXISTS, Result: cairnpb.Compare_EQUAL,
		TargetUnion: &cairnpb.Compare_Exists{Exists: false}}}
}

// Proto returns the comparison as the API message.
func (c Cmp) Proto() *cairnpb.Compare { return c.pb }

// OpType is the kind of a Txn operation.
type OpType int

// Txn operation kinds.
const (
	OpTypePut OpType = iota + 1
	OpTypeGet
	OpTypeDelete
	OpTypeDeleteRange
)

func (t OpType) String() string {
	switch t {
	case OpTypePut:
		return "put"
	case OpTypeGet:
		return "get"
	case OpTypeDelete:
		return "delete"
	case OpTypeDeleteRange:
		return "delete-range"
	}
	return fmt.Sprintf("OpType(%d)", int(t))
}

// Op is one operation of a Txn, built with OpPut, OpGet, OpDelete or
// OpDeleteRange.
type Op struct {
	pb  *cairnpb.RequestOp
	err error
}

// Proto returns the operation as the API message (nil if it is invalid).
func (o Op) Proto() *cairnpb.RequestOp { return o.pb }

// OpPut sets key to value. Options: WithPrevKV.
func OpPut(key, value []byte, opts ...Option) Op {
	op := opName("txn put", key)
	o, err := applyOptions(op, kindPut, opts)
	if err == nil {
		err = checkKey(op, key)
	}
	if err != nil {
		return Op{err: err}
	}
	return Op{pb: &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Put{Put: &cairnpb.PutRequest{Key: key, Value: value, PrevKv: o.prevKV}}}}
}

// OpGet reads key (as the Txn applies, so it sees earlier operations).
func OpGet(key []byte) Op {
	if err := checkKey(opName("txn get", key), key); err != nil {
		return Op{err: err}
	}
	return Op{pb: &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Get{Get: &cairnpb.GetRequest{Key: key}}}}
}

// OpDelete removes key. Options: WithPrevKV.
func OpDelete(key []byte, opts ...Option) Op {
	op := opName("txn delete", key)
	o, err := applyOptions(op, kindDelete, opts)
	if err == nil {
		err = checkKey(op, key)
	}
	if err != nil {
		return Op{err: err}
	}
	return Op{pb: &cairnpb.RequestOp{Request: &cairnpb.RequestOp_Delete{Delete: &cairnpb.DeleteRequest{Key: key, PrevKv: o.prevKV}}}}
}

// OpDeleteRange removes the keys in [start, end), or WithPrefix those with
// a prefix (see DeleteRange).
func OpDeleteRange(start, end []byte, opts ...Option) Op {
	op := fmt.Sprintf("txn delete range [%q, %q)", start, end)
	o, err := applyOptions(op, kindDeleteRange, opts)
	if err != nil {
		return Op{err: err}
	}
	req, err := deleteRangeRequest(op, start, end, &o)
	if err != nil {
		return Op{err: err}
	}
	return Op{pb: &cairnpb.RequestOp{Request: &cairnpb.RequestOp_DeleteRange{DeleteRange: req}}}
}

// Txn is a transaction being built: If(compares...).Then(ops...).Else(ops...)
// and Commit. If every compare holds (no compares hold trivially), the Then
// operations are applied, else the Else operations; in order, each seeing
// the effects of those before it, all atomically. At most
// cairnpb.MaxTxnOps compares and operations per branch.
type Txn struct {
	c     *Client
	ctx   context.Context
	req   *cairnpb.TxnRequest
	err   error
	stage int // 0: If allowed, 1: after Then, 2: after Else
}

// Txn starts a transaction.
func (c *Client) Txn(ctx context.Context) *Txn {
	return &Txn{c: c, ctx: ctx, req: &cairnpb.TxnRequest{}}
}

func (t *Txn) fail(format string, args ...any) {
	if t.err == nil {
		t.err = invalidArg("txn", format, args...)
	}
}

// If adds compares. It must come before Then and Else.
func (t *Txn) If(cmps ...Cmp) *Txn {
	if t.stage > 0 {
		t.fail("If after Then or Else")
	}
	for _, c := range cmps {
		if c.pb == nil {
			t.fail("zero Cmp")
			continue
		}
		if err := checkKey("txn compare", c.pb.GetKey()); err != nil && t.err == nil {
			t.err = err
		}
		t.req.Compare = append(t.req.Compare, c.pb)
	}
	return t
}

// Then adds operations applied if the compares hold. It must come before
// Else.
func (t *Txn) Then(ops ...Op) *Txn {
	if t.stage > 1 {
		t.fail("Then after Else")
	}
	t.stage = 1
	t.req.Success = t.addOps(t.req.Success, ops)
	return t
}

// Else adds operations applied if a compare fails.
func (t *Txn) Else(ops ...Op) *Txn {
	t.stage = 2
	t.req.Failure = t.addOps(t.req.Failure, ops)
	return t
}

func (t *Txn) addOps(dst []*cairnpb.RequestOp, ops []Op) []*cairnpb.RequestOp {
	for _, o := range ops {
		switch {
		case o.err != nil:
			if t.err == nil {
				t.err = o.err
			}
		case o.pb == nil:
			t.fail("zero Op")
		default:
			dst = append(dst, o.pb)
		}
	}
	return dst
}

// TxnResult is the result of a committed Txn.
type TxnResult struct {
	Header
	// Succeeded reports whether the compares held (the Then branch was
	// applied) or not (the Else branch was).
	Succeeded bool
	// Results has one entry per applied operation, in order.
	Results []OpResult
}

// OpResult is the result of one Txn operation.
type OpResult struct {
	Type OpType
	// KV is, for a Get, the key's KeyValue (nil if absent).
	KV *KeyValue
	// PrevKV is, for a Put or Delete WithPrevKV, the key's previous
	// KeyValue (nil if it was absent).
	PrevKV *KeyValue
	// Deleted reports, for a Delete, whether the key existed.
	Deleted bool
	// Version, CreateIndex and ModIndex are, for a Put, the key's metadata
	// after it.
	Version, CreateIndex, ModIndex uint64
}

// Commit sends the transaction. It is a write: retried like Put, and
// applied at most once.
func (t *Txn) Commit() (*TxnResult, error) {
	if t.err != nil {
		return nil, t.err
	}
	const op = "txn"
	switch {
	case len(t.req.Compare) > cairnpb.MaxTxnOps:
		return nil, invalidArg(op, "%d compares (at most %d)", len(t.req.Compare), cairnpb.MaxTxnOps)
	case len(t.req.Success) > cairnpb.MaxTxnOps, len(t.req.Failure) > cairnpb.MaxTxnOps:
		return nil, invalidArg(op, "more than %d operations in a branch", cairnpb.MaxTxnOps)
	}
	var resp *cairnpb.TxnResponse
	err := t.c.write(t.ctx, op, func(ctx context.Context, nc *nodeConn, id string, seq uint64) error {
		t.req.ClientId, t.req.Seq = id, seq
		r, err := nc.kv.Txn(ctx, t.req)
		if err == nil {
			resp = r
			t.c.noteServed(nc, r.GetHeader())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &TxnResult{Header: headerFromProto(resp.GetHeader()), Succeeded: resp.GetSucceeded()}
	for _, r := range resp.GetResponses() {
		var or OpResult
		switch x := r.GetResponse().(type) {
		case *cairnpb.ResponseOp_Put:
			or = OpResult{Type: OpTypePut, PrevKV: kvFromProto(x.Put.GetPrevKv()), Version: x.Put.GetVersion(),
				CreateIndex: x.Put.GetCreateIndex(), ModIndex: x.Put.GetModIndex()}
		case *cairnpb.ResponseOp_Get:
			or = OpResult{Type: OpTypeGet, KV: kvFromProto(x.Get.GetKv())}
		case *cairnpb.ResponseOp_Delete:
			or = OpResult{Type: OpTypeDelete, Deleted: x.Delete.GetDeleted() > 0, PrevKV: kvFromProto(x.Delete.GetPrevKv())}
		case *cairnpb.ResponseOp_DeleteRange:
			or = OpResult{Type: OpTypeDeleteRange}
		}
		res.Results = append(res.Results, or)
	}
	return res, nil
}

// CompareAndSwap sets key to newValue if its value is oldValue, atomically;
// a nil oldValue means "if key does not exist" (an empty, non-nil one
// means the empty value). It returns an error satisfying
// errors.Is(err, ErrCompareFailed) if the key held something else.
func (c *Client) CompareAndSwap(ctx context.Context, key, oldValue, newValue []byte) error {
	op := opName("compare-and-swap", key)
	if err := checkKey(op, key); err != nil {
		return err
	}
	cmp := Value(key).Equal(oldValue)
	if oldValue == nil {
		cmp = NotExists(key)
	}
	res, err := c.Txn(ctx).If(cmp).Then(OpPut(key, newValue)).Else(OpGet(key)).Commit()
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Op = op
		}
		return err
	}
	if res.Succeeded {
		return nil
	}
	why := "key does not exist"
	if len(res.Results) == 1 && res.Results[0].KV != nil {
		if oldValue == nil {
			why = fmt.Sprintf("key exists (version %d)", res.Results[0].KV.Version)
		} else {
			why = fmt.Sprintf("current value differs (version %d)", res.Results[0].KV.Version)
		}
	}
	return clientError(op, ErrCompareFailed, codes.FailedPrecondition, "%s", why)
}
