package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// route says where a request goes.
type route int

const (
	// toLeader: writes, linearizable reads, membership changes. Sent to the
	// known leader; while none is known, to the nodes in turn (any node
	// forwards to the leader).
	toLeader route = iota
	// toAny: serializable reads, Status. Sent to the nodes in turn.
	toAny
	// toLeaderNode: requests that describe or copy the serving node and
	// are best served by the leader (Members, whose health only the leader
	// knows; Backup, whose copy is then the freshest). The leader is looked
	// up first if unknown.
	toLeaderNode
)

// Retry backoff: the n-th pause is uniform in [d/2, d) with d =
// baseRetryBackoff * 2^n, capped at Config.MaxRetryBackoff.
const baseRetryBackoff = 20 * time.Millisecond

// leaderLookupInterval rate-limits background leader lookups.
const leaderLookupInterval = 50 * time.Millisecond

// do runs call, retrying it on other nodes or after a pause while the
// error is retryable (see retryable) and ctx allows. pinned, if set, is the
// one address to send to. Every attempt of a write sends the same request,
// so a retry never changes its meaning (its client_id and seq make the
// cluster apply it at most once).
func (c *Client) do(ctx context.Context, op string, r route, pinned string,
	call func(ctx context.Context, nc *nodeConn) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	if r == toLeaderNode && pinned == "" && c.Leader() == "" {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		c.lookup(lctx)
		cancel()
	}
	var last error
	pauses := 0
	var refused map[string]bool // nodes whose TLS handshake failed for good
	for attempt := 1; ; attempt++ {
		nc, err := c.pick(r, pinned)
		if err != nil {
			if e, ok := err.(*Error); ok {
				e.Op = op
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return c.ctxError(op, err, last, attempt-1)
		}
		err = call(ctx, nc)
		if err == nil {
			return nil
		}
		st := toStatus(err)
		if cerr := ctxErr(ctx); cerr != nil {
			// An attempt cut short by the deadline says nothing new: report
			// the failure of the attempt before it, if there was one.
			if code := st.Code(); (code == codes.DeadlineExceeded || code == codes.Canceled) && last != nil {
				err = last
			}
			return c.ctxError(op, cerr, err, attempt)
		}
		last = err
		if herr := nc.handshake.refusedBy(st); herr != nil {
			// A certificate that does not verify, or a node refusing
			// ours, fails the same way every time: end the call once the
			// node it is pinned to, or every node, refused.
			if refused == nil {
				refused = map[string]bool{}
			}
			refused[nc.addr] = true
			if pinned != "" || c.allRefused(refused) {
				return tlsError(op, nc.addr, herr, attempt)
			}
		}
		retry, immediate := c.retryable(st, nc, pinned != "")
		if p := (permanent{}); errors.As(err, &p) {
			retry = false
		}
		if !retry {
			e := newError(op, err, attempt)
			if c.isClosed() {
				e.kind = ErrClosed
			}
			return e
		}
		c.log.Debug("cairn: retrying", "op", op, "node", nc.addr, "attempt", attempt, "code", st.Code(), "err", st.Message())
		if immediate && attempt < 3 {
			continue
		}
		d := min(baseRetryBackoff<<min(pauses, 20), c.cfg.MaxRetryBackoff)
		d = d/2 + rand.N(d/2+1)
		pauses++
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return c.ctxError(op, ctx.Err(), err, attempt)
		case <-c.ctx.Done():
			t.Stop()
			return clientError(op, ErrClosed, codes.Canceled, "client closed")
		case <-t.C:
		}
	}
}

// allRefused reports whether every node the client has a connection to is
// in refused.
func (c *Client) allRefused(refused map[string]bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.mu.order {
		if !refused[a] {
			return false
		}
	}
	return true
}

// tlsError is the error of a call ended by a TLS handshake with addr that
// failed for good (herr, see permanentTLSError).
func tlsError(op, addr string, herr error, attempts int) *Error {
	return &Error{Op: op, Status: status.Newf(codes.Unavailable, "TLS handshake with %s failed: %v", addr, herr),
		Attempts: attempts, kind: ErrTLSHandshake}
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's deadline has passed
// (gRPC may fail a call on the deadline just before ctx.Err() is set).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// ctxError is the error of a call whose context ended: the context's
// error, with the last attempt's status if there was one.
func (c *Client) ctxError(op string, ctxErr, last error, attempts int) *Error {
	if c.isClosed() {
		return clientError(op, ErrClosed, codes.Canceled, "client closed")
	}
	e := &Error{Op: op, Context: ctxErr, Attempts: attempts}
	if last != nil {
		e.Status = toStatus(last)
	} else {
		e.Status = toStatus(ctxErr)
	}
	e.kind = kindOf(e.Status.Code())
	return e
}

// retryable decides what to do after a failed attempt on nc: whether to
// retry, and whether at once (the cluster named a new leader to try).
// Unavailable (the node is unreachable, has no leader or no quorum, or is
// not the leader) and DeadlineExceeded from the node (its own timeout, not
// ours) are retried; every other code is final. As a side effect it
// updates the client's idea of the leader.
func (c *Client) retryable(st *status.Status, nc *nodeConn, pinned bool) (retry, immediate bool) {
	nl, hasNL := notLeader(st)
	switch st.Code() {
	case codes.Unavailable:
	case codes.FailedPrecondition:
		if !hasNL {
			return false, false
		}
	case codes.DeadlineExceeded:
		return true, false
	default:
		return false, false
	}
	if pinned {
		return true, false
	}
	if hasNL {
		if addr := nl.GetLeaderGrpcAddr(); addr != "" && addr != nc.addr {
			changed := c.setLeader(addr, nl.GetLeaderId())
			return true, changed
		}
		c.forgetLeader(nc.addr)
		return true, false
	}
	// The node itself is unreachable (or shutting down): try another.
	c.forgetLeader(nc.addr)
	return true, false
}

// pick returns the connection for the next attempt.
func (c *Client) pick(r route, pinned string) (*nodeConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, clientError("", ErrClosed, codes.Canceled, "client closed")
	}
	if pinned != "" {
		return c.connLocked(pinned)
	}
	if r != toAny && c.mu.leader != "" {
		return c.mu.conns[c.mu.leader], nil
	}
	if r != toAny {
		c.lookupLeaderLocked()
	}
	addr := c.mu.order[c.mu.next%len(c.mu.order)]
	c.mu.next++
	return c.mu.conns[addr], nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// setLeader records addr as the leader's address (dialing it if new) and
// reports whether that changed anything.
func (c *Client) setLeader(addr, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed || c.mu.leader == addr {
		return false
	}
	if _, err := c.connLocked(addr); err != nil {
		c.log.Debug("cairn: cannot dial leader", "addr", addr, "err", err)
		return false
	}
	if id != "" {
		c.mu.idByAddr[addr] = id
	}
	c.log.Debug("cairn: leader", "addr", addr, "id", id, "was", c.mu.leader)
	c.mu.leader = addr
	return true
}

// forgetLeader forgets the leader if it is addr, and looks for it again.
func (c *Client) forgetLeader(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.leader == addr {
		c.mu.leader = ""
		c.lookupLeaderLocked()
	}
}

// noteServed checks who served a request sent to nc: a write or
// linearizable read answered by another node was forwarded, so the client's
// leader is stale (or unknown) and it looks the leader up again.
func (c *Client) noteServed(nc *nodeConn, hdr *cairnpb.ResponseHeader) {
	id := hdr.GetNodeId()
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if known, ok := c.mu.idByAddr[nc.addr]; ok && known != id {
		c.lookupLeaderLocked()
	}
}

// lookupLeaderLocked starts a background leader lookup unless one runs or
// one started recently. REQUIRES: c.mu held.
func (c *Client) lookupLeaderLocked() {
	if c.mu.closed || c.mu.lookingUp || time.Since(c.mu.lastLookup) < leaderLookupInterval {
		return
	}
	c.mu.lookingUp = true
	c.mu.lastLookup = time.Now()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		c.lookup(ctx)
		cancel()
		c.mu.Lock()
		c.mu.lookingUp = false
		c.mu.Unlock()
	}()
}

func (c *Client) lookupLeader() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookupLeaderLocked()
}

// lookup asks every node's Status for the leader, and records the first
// answer that names one. It reports whether it found one.
func (c *Client) lookup(ctx context.Context) bool {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return false
	}
	conns := make([]*nodeConn, 0, len(c.mu.order))
	for _, a := range c.mu.order {
		conns = append(conns, c.mu.conns[a])
	}
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		addr string
		resp *cairnpb.StatusResponse
	}
	answers := make(chan answer, len(conns))
	for _, nc := range conns {
		go func() {
			resp, err := nc.cluster.Status(ctx, &cairnpb.StatusRequest{})
			if err != nil {
				resp = nil
			}
			answers <- answer{nc.addr, resp}
		}()
	}
	found := false
	for range conns {
		a := <-answers
		if a.resp == nil {
			continue
		}
		c.mu.Lock()
		if !c.mu.closed {
			c.mu.idByAddr[a.addr] = a.resp.GetNodeId()
		}
		c.mu.Unlock()
		if !found && a.resp.GetLeaderGrpcAddr() != "" {
			found = true
			c.setLeader(a.resp.GetLeaderGrpcAddr(), a.resp.GetLeaderId())
			cancel()
		}
	}
	return found
}
