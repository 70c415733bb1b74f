package client

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
)

// KeyValue is a key with its value and metadata.
type KeyValue struct {
	Key   []byte
	Value []byte // nil for a Scan WithKeysOnly
	// Version counts the Puts since the key was (last) created: 1 after
	// the creating Put. Deleting the key resets it.
	Version uint64
	// CreateIndex is the raft index of the Put that created the key;
	// ModIndex that of its latest Put.
	CreateIndex, ModIndex uint64
}

func kvFromProto(p *cairnpb.KeyValue) *KeyValue {
	if p == nil {
		return nil
	}
	return &KeyValue{Key: p.GetKey(), Value: p.GetValue(), Version: p.GetVersion(),
		CreateIndex: p.GetCreateIndex(), ModIndex: p.GetModIndex()}
}

// Header describes who served a response.
type Header struct {
	// NodeID is the raft ID of the node that served the request (for a
	// write, the leader that applied it).
	NodeID string
	// RaftTerm is the node's raft term when it served the request.
	RaftTerm uint64
	// AppliedIndex is the raft index the response reflects: a write's log
	// index; for a read, an index the node had applied before reading.
	AppliedIndex uint64
}

func headerFromProto(h *cairnpb.ResponseHeader) Header {
	return Header{NodeID: h.GetNodeId(), RaftTerm: h.GetRaftTerm(), AppliedIndex: h.GetAppliedIndex()}
}

// PutResult is the result of a Put.
type PutResult struct {
	Header
	// The key's metadata after the write: ModIndex is the write's raft
	// index.
	Version, CreateIndex, ModIndex uint64
	// PrevKV is the previous KeyValue, if asked for WithPrevKV and the key
	// existed.
	PrevKV *KeyValue
}

// DeleteResult is the result of a Delete.
type DeleteResult struct {
	Header
	// Deleted reports whether the key existed.
	Deleted bool
	// PrevKV is the deleted KeyValue, if asked for WithPrevKV.
	PrevKV *KeyValue
}

// DeleteRangeResult is the result of a DeleteRange. It does not count the
// deleted keys: a range deletion is applied without visiting them.
type DeleteRangeResult struct {
	Header
}

// opName describes a call on a key for error messages.
func opName(verb string, key []byte) string {
	const max = 64
	if len(key) > max {
		return verb + " " + strconv.Quote(string(key[:max])) + "..."
	}
	return verb + " " + strconv.Quote(string(key))
}

func checkKey(op string, key []byte) error {
	switch {
	case len(key) == 0:
		return invalidArg(op, "empty key")
	case len(key) > cairnpb.MaxKeySize:
		return invalidArg(op, "key of %d bytes exceeds the limit of %d", len(key), cairnpb.MaxKeySize)
	}
	return nil
}

// write runs a write: it takes a session and numbers the write once, and
// every attempt sends that number (see session).
func (c *Client) write(ctx context.Context, op string, call func(ctx context.Context, nc *nodeConn, clientID string, seq uint64) error) error {
	s, seq := c.sessions.get()
	defer c.sessions.put(s)
	return c.do(ctx, op, toLeader, "", func(ctx context.Context, nc *nodeConn) error {
		return call(ctx, nc, s.id, seq)
	})
}

// Put sets key to value. Options: WithPrevKV.
//
// Put is applied at most once, however often it is retried. After
// ErrInvalidArgument it was not applied; after a context error or
// ErrUnavailable it may have been (see the package documentation, "At-most-
// once writes").
func (c *Client) Put(ctx context.Context, key, value []byte, opts ...Option) (*PutResult, error) {
	op := opName("put", key)
	o, err := applyOptions(op, kindPut, opts)
	if err != nil {
		return nil, err
	}
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	var resp *cairnpb.PutResponse
	err = c.write(ctx, op, func(ctx context.Context, nc *nodeConn, id string, seq uint64) error {
		r, err := nc.kv.Put(ctx, &cairnpb.PutRequest{Key: key, Value: value, PrevKv: o.prevKV, ClientId: id, Seq: seq})
		if err == nil {
			resp = r
			c.noteServed(nc, r.GetHeader())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &PutResult{Header: headerFromProto(resp.GetHeader()), Version: resp.GetVersion(),
		CreateIndex: resp.GetCreateIndex(), ModIndex: resp.GetModIndex(), PrevKV: kvFromProto(resp.GetPrevKv())}, nil
}

// Get reads a key; ErrNotFound if it does not exist. Options:
// WithConsistency (default Linearizable), WithEndpoint.
func (c *Client) Get(ctx context.Context, key []byte, opts ...Option) (*KeyValue, error) {
	op := opName("get", key)
	o, err := applyOptions(op, kindGet, opts)
	if err != nil {
		return nil, err
	}
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	r := toLeader
	if o.consistency == Serializable {
		r = toAny
	}
	var resp *cairnpb.GetResponse
	err = c.do(ctx, op, r, o.endpoint, func(ctx context.Context, nc *nodeConn) error {
		g, err := nc.kv.Get(ctx, &cairnpb.GetRequest{Key: key, Consistency: o.consistency.proto()})
		if err == nil {
			resp = g
			if o.consistency == Linearizable {
				c.noteServed(nc, g.GetHeader())
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetKv() == nil {
		return nil, clientError(op, ErrNotFound, codes.NotFound, "not found")
	}
	return kvFromProto(resp.GetKv()), nil
}

// Delete removes a key. Deleting a missing key is not an error
// (Deleted is false). Options: WithPrevKV.
func (c *Client) Delete(ctx context.Context, key []byte, opts ...Option) (*DeleteResult, error) {
	op := opName("delete", key)
	o, err := applyOptions(op, kindDelete, opts)
	if err != nil {
		return nil, err
	}
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	var resp *cairnpb.DeleteResponse
	err = c.write(ctx, op, func(ctx context.Context, nc *nodeConn, id string, seq uint64) error {
		r, err := nc.kv.Delete(ctx, &cairnpb.DeleteRequest{Key: key, PrevKv: o.prevKV, ClientId: id, Seq: seq})
		if err == nil {
			resp = r
			c.noteServed(nc, r.GetHeader())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &DeleteResult{Header: headerFromProto(resp.GetHeader()), Deleted: resp.GetDeleted() > 0,
		PrevKV: kvFromProto(resp.GetPrevKv())}, nil
}

// rangeBounds checks and fills the start/end/prefix of a range request.
func rangeBounds(op string, start, end []byte, o *callOptions) (s, e, p []byte, err error) {
	if o.hasPrefix {
		if len(start) > 0 || len(end) > 0 {
			return nil, nil, nil, invalidArg(op, "WithPrefix with a start or end key")
		}
		if len(o.prefix) == 0 {
			// Every key: from the smallest key, unbounded.
			return nil, nil, nil, nil
		}
		return nil, nil, o.prefix, nil
	}
	if len(end) > 0 && len(start) > 0 && string(end) <= string(start) {
		return nil, nil, nil, invalidArg(op, "end %q is not after start %q", end, start)
	}
	return start, end, nil, nil
}

// DeleteRange removes the keys k with start <= k < end (a nil end means
// no upper bound), or with WithPrefix the keys with a prefix. To delete
// every key, use WithPrefix(nil).
func (c *Client) DeleteRange(ctx context.Context, start, end []byte, opts ...Option) (*DeleteRangeResult, error) {
	op := fmt.Sprintf("delete range [%q, %q)", start, end)
	o, err := applyOptions(op, kindDeleteRange, opts)
	if err != nil {
		return nil, err
	}
	if o.hasPrefix {
		op = opName("delete prefix", o.prefix)
	}
	req, err := deleteRangeRequest(op, start, end, &o)
	if err != nil {
		return nil, err
	}
	var resp *cairnpb.DeleteRangeResponse
	err = c.write(ctx, op, func(ctx context.Context, nc *nodeConn, id string, seq uint64) error {
		req.ClientId, req.Seq = id, seq // the same on every attempt
		r, err := nc.kv.DeleteRange(ctx, req)
		if err == nil {
			resp = r
			c.noteServed(nc, r.GetHeader())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &DeleteRangeResult{Header: headerFromProto(resp.GetHeader())}, nil
}

func deleteRangeRequest(op string, start, end []byte, o *callOptions) (*cairnpb.DeleteRangeRequest, error) {
	s, e, p, err := rangeBounds(op, start, end, o)
	if err != nil {
		return nil, err
	}
	if len(s) == 0 && len(p) == 0 {
		if !o.hasPrefix && len(e) == 0 {
			return nil, invalidArg(op, "no range: give a start or end key, or WithPrefix (WithPrefix(nil) deletes every key)")
		}
		// The API wants start or prefix: "\x00" is the smallest key.
		s = []byte{0}
	}
	return &cairnpb.DeleteRangeRequest{Start: s, End: e, Prefix: p}, nil
}
