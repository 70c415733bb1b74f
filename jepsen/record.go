package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/jepsen/history"
)

// recorder collects the history of a run: operations as they complete and
// faults as they are injected and healed. Times are offsets from start.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	h     history.History
}

func newRecorder(h history.History) *recorder {
	return &recorder{start: time.Now(), h: h}
}

func (r *recorder) now() time.Duration { return time.Since(r.start) }

func (r *recorder) op(o history.Op) {
	r.mu.Lock()
	r.h.Ops = append(r.h.Ops, o)
	r.mu.Unlock()
}

// fault records an injected fault and returns its index for healed.
func (r *recorder) fault(f history.Fault) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
	return len(r.h.Faults) - 1
}

func (r *recorder) healed(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults[i].End = r.now()
}

// history returns a copy of the history so far.
func (r *recorder) history() *history.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Ops = append([]history.Op(nil), r.h.Ops...)
	h.Faults = append([]history.Fault(nil), r.h.Faults...)
	return &h
}

// writeOutcome classifies the error of a write (Put, Txn): which errors
// prove the write did not take effect.
//
//   - nil: OK.
//   - ErrInvalidArgument, ErrFailedPrecondition, ErrNotFound on the first
//     and only attempt: refused before it reached raft (client package
//     documentation, "At-most-once writes"): Fail. After more than one
//     attempt an earlier one may have been applied (a retry that meets a
//     node refusing it says nothing about the attempts before): Info.
//   - everything else (a deadline, ErrUnavailable, a lost connection,
//     ResourceExhausted, Internal, ErrResultUnavailable): it may have
//     been applied, or may still be: Info. Unavailable in particular is
//     NOT a failure: the client retries the same (client_id, seq) on
//     another node, and an earlier attempt may have reached a leader that
//     committed it before losing its leadership.
//
// ErrResultUnavailable means the write was applied but its result lost;
// for a blind Put that is as good as OK, and the caller decides.
func writeOutcome(err error) history.Outcome {
	switch {
	case err == nil:
		return history.OK
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return history.Info
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrFailedPrecondition),
		errors.Is(err, client.ErrNotFound):
		var ce *client.Error
		if errors.As(err, &ce) && ce.Attempts <= 1 {
			return history.Fail
		}
	}
	return history.Info
}

// readOutcome classifies the error of a read: a read changes nothing, so
// a read that returned no value is simply a failed read, whatever the
// error (OK with Found=false for a missing key is decided by the caller).
func readOutcome(err error) history.Outcome {
	if err == nil {
		return history.OK
	}
	return history.Fail
}
