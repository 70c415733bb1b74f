package client

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// ScanIterator iterates over the keys of a Scan, fetching pages as it
// goes. Use it as:
//
//	it := c.Scan(ctx, start, end)
//	defer it.Close()
//	for it.Next() {
//		kv := it.KeyValue()
//		...
//	}
//	if err := it.Err(); err != nil { ... }
//
// Each page is a consistent read of its own (per the Scan's consistency),
// but pages are read at different times: a scan over keys being written
// sees every key that exists throughout the scan, and each key at most
// once. It is not safe for concurrent use.
type ScanIterator struct {
	c     *Client
	ctx   context.Context
	op    string
	req   *cairnpb.ScanRequest
	route route
	pin   string
	// remaining is how many more keys the limit allows; < 0: no limit.
	remaining int
	pageSize  int
	// pageTimeout bounds each page's fetch (0: none but ctx's).
	pageTimeout time.Duration

	page []*cairnpb.KeyValue
	pos  int
	cur  *KeyValue
	err  error
	// last is set once the final page was fetched.
	last   bool
	closed bool
}

// Scan returns an iterator over the keys k with start <= k < end (nil
// start: from the first key; nil end: to the last), in ascending order, or
// descending WithReverse. Options: WithPrefix (instead of start and end),
// WithLimit, WithPageSize, WithPageTimeout, WithReverse, WithKeysOnly,
// WithConsistency, WithEndpoint. Errors, including bad arguments, are
// reported by Err after Next returns false.
//
// ctx bounds the whole scan. Each page is one request: with
// WithPageTimeout, or when ctx has no deadline (then
// Config.RequestTimeout), each page has its own bound, so a long scan is
// not cut short by a timeout meant for one request.
func (c *Client) Scan(ctx context.Context, start, end []byte, opts ...Option) *ScanIterator {
	op := fmt.Sprintf("scan [%q, %q)", start, end)
	it := &ScanIterator{c: c, ctx: ctx, op: op, remaining: -1}
	o, err := applyOptions(op, kindScan, opts)
	if err != nil {
		it.err = err
		return it
	}
	if o.hasPrefix {
		it.op = opName("scan prefix", o.prefix)
	}
	s, e, p, err := rangeBounds(it.op, start, end, &o)
	if err != nil {
		it.err = err
		return it
	}
	if o.limit > 0 {
		it.remaining = o.limit
	}
	switch {
	case o.pageSize < 0:
		it.err = invalidArg(it.op, "page size %d", o.pageSize)
		return it
	case o.pageSize == 0:
		it.pageSize = cairnpb.DefaultScanLimit
	default:
		it.pageSize = min(o.pageSize, cairnpb.MaxScanLimit)
	}
	it.pageTimeout = max(o.pageTimeout, 0)
	it.route, it.pin = toLeader, o.endpoint
	if o.consistency == Serializable {
		it.route = toAny
	}
	it.req = &cairnpb.ScanRequest{Start: s, End: e, Prefix: p, Reverse: o.reverse,
		Consistency: o.consistency.proto(), KeysOnly: o.keysOnly}
	return it
}

// Next advances to the next key, fetching a page if needed. It returns
// false at the end of the scan or on an error (see Err).
func (it *ScanIterator) Next() bool {
	it.cur = nil
	if it.err != nil || it.closed {
		return false
	}
	for it.pos >= len(it.page) {
		if it.last || it.remaining == 0 {
			return false
		}
		if !it.fetch() {
			return false
		}
	}
	it.cur = kvFromProto(it.page[it.pos])
	it.page[it.pos] = nil
	it.pos++
	if it.remaining > 0 {
		it.remaining--
	}
	return true
}

// fetch reads the next page.
func (it *ScanIterator) fetch() bool {
	limit := it.pageSize
	if it.remaining > 0 {
		limit = min(limit, it.remaining)
	}
	it.req.Limit = uint32(limit)
	ctx := it.ctx
	if it.pageTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, it.pageTimeout)
		defer cancel()
	}
	var resp *cairnpb.ScanResponse
	err := it.c.do(ctx, it.op, it.route, it.pin, func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.kv.Scan(ctx, it.req)
		if err == nil {
			resp = r
		}
		return err
	})
	if err != nil {
		it.err = err
		return false
	}
	it.page, it.pos = resp.GetKvs(), 0
	if tok := resp.GetNextPageToken(); len(tok) > 0 {
		it.req.PageToken = tok
	} else {
		it.last = true
	}
	return true
}

// KeyValue returns the current key, valid after Next returned true. The
// iterator does not reuse it.
func (it *ScanIterator) KeyValue() *KeyValue { return it.cur }

// Err returns the error that ended the scan, if any.
func (it *ScanIterator) Err() error { return it.err }

// Close ends the scan early; it returns Err. (An iterator holds no
// resources on the cluster: Close only drops the current page.)
func (it *ScanIterator) Close() error {
	it.closed = true
	it.page = nil
	return it.err
}

// All runs the scan to its end and returns its keys.
func (it *ScanIterator) All() ([]*KeyValue, error) {
	var out []*KeyValue
	for it.Next() {
		out = append(out, it.KeyValue())
	}
	return out, it.Close()
}
