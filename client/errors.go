package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors a caller can test for with errors.Is. Every error a Client returns
// for a failed request is an *Error, which also carries the gRPC status
// (status.Code(err) and status.FromError(err) work on it).
var (
	// ErrNotFound: the key (or, for RemoveMember, the member) does not
	// exist. Get returns it for a missing key; Delete does not (it reports
	// Deleted == false).
	ErrNotFound = errors.New("cairn: not found")
	// ErrCompareFailed: CompareAndSwap found another value.
	ErrCompareFailed = errors.New("cairn: compare failed")
	// ErrInvalidArgument: the request was refused without effect (an empty
	// key, a key over cairnpb.MaxKeySize (65,535 bytes), a value over the
	// cluster's limit, a bad option or range). Retrying it cannot succeed.
	ErrInvalidArgument = errors.New("cairn: invalid argument")
	// ErrUnavailable: no node could serve the request (unreachable, no
	// leader, no quorum) before the context's deadline. Combined with
	// context.DeadlineExceeded when the deadline ended the retries.
	ErrUnavailable = errors.New("cairn: unavailable")
	// ErrFailedPrecondition: a conditional membership change found the
	// configuration changed.
	ErrFailedPrecondition = errors.New("cairn: failed precondition")
	// ErrResultUnavailable: a retried write had already been applied, once,
	// but the cluster no longer holds its result (it was larger than the
	// session's result limit). The write took effect; only its response is
	// lost.
	ErrResultUnavailable = errors.New("cairn: write applied but its result is no longer available")
	// ErrUnauthenticated: the cluster requires credentials (an
	// authorization policy) and the request had none, or an unknown
	// token (Config.Token, Config.TLS).
	ErrUnauthenticated = errors.New("cairn: unauthenticated")
	// ErrPermissionDenied: the request's identity lacks the role the call
	// needs (the message names it).
	ErrPermissionDenied = errors.New("cairn: permission denied")
	// ErrTLSHandshake: the TLS handshake with the node the call is pinned
	// to (WithEndpoint), or with every node, failed in a way a retry would
	// repeat: the node's certificate does not verify against Config.TLS
	// (an unknown CA, a name it does not hold, expired), the node refused
	// the client's certificate (or its lack of one), or the node does not
	// speak TLS. The message names the cause (the x509 or TLS error). The
	// status code is Unavailable, as gRPC reports it; the call is not
	// retried until its deadline.
	ErrTLSHandshake = errors.New("cairn: TLS handshake failed")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("cairn: client closed")
)

// Error is a failed request: what was asked, the gRPC status the cluster
// (or the connection) gave, and, when the context ended the retries, the
// context's error.
//
// errors.Is(err, X) holds for the sentinel matching the status code
// (ErrNotFound for NotFound, ErrInvalidArgument for InvalidArgument,
// ErrUnavailable for Unavailable, ErrFailedPrecondition for
// FailedPrecondition, ErrResultUnavailable for AlreadyExists,
// ErrUnauthenticated for Unauthenticated, ErrPermissionDenied for
// PermissionDenied, ErrTLSHandshake for a TLS handshake that failed for
// good (see its documentation),
// context.DeadlineExceeded for DeadlineExceeded, context.Canceled for
// Canceled) and for the context's error if it ended the retries.
type Error struct {
	// Op names the call and its main argument, e.g. `put "user/1"`.
	Op string
	// Status is the last status received. When the context ended the
	// retries it is the status of the last attempt (say Unavailable), and
	// Context is set.
	Status *status.Status
	// Context is ctx.Err() if the context's deadline or cancellation ended
	// the retries, else nil.
	Context error
	// Attempts is how many times the request was sent.
	Attempts int
	// kind is the sentinel of Status's code, or a client-side sentinel.
	kind error
}

func (e *Error) Error() string {
	msg := e.Status.Message()
	if msg == "" {
		msg = e.Status.Code().String()
	}
	var s string
	switch {
	case e.Context != nil && e.Status.Code() != codes.DeadlineExceeded && e.Status.Code() != codes.Canceled:
		s = fmt.Sprintf("%v (last error: %s: %s", e.Context, codeName(e.Status.Code()), msg)
		if e.Attempts > 1 {
			s += fmt.Sprintf("; %d attempts", e.Attempts)
		}
		s += ")"
	case e.kind == ErrCompareFailed:
		s = "compare failed: " + msg
	case e.kind == ErrClosed:
		s = "client closed"
	case e.kind == ErrTLSHandshake:
		s = msg
	case msg == e.Status.Code().String() || msg == codeName(e.Status.Code()):
		s = codeName(e.Status.Code())
	default:
		s = codeName(e.Status.Code()) + ": " + msg
	}
	if e.Op == "" {
		return "cairn: " + s
	}
	return "cairn: " + e.Op + ": " + s
}

// codeName is a lower-case, spaced name of a gRPC code for messages.
func codeName(c codes.Code) string {
	switch c {
	case codes.NotFound:
		return "not found"
	case codes.InvalidArgument:
		return "invalid argument"
	case codes.Unavailable:
		return "unavailable"
	case codes.DeadlineExceeded:
		return "deadline exceeded"
	case codes.Canceled:
		return "canceled"
	case codes.FailedPrecondition:
		return "failed precondition"
	case codes.ResourceExhausted:
		return "resource exhausted"
	case codes.AlreadyExists:
		return "result unavailable"
	case codes.PermissionDenied:
		return "permission denied"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.Unimplemented:
		return "unimplemented"
	case codes.Internal:
		return "internal error"
	case codes.DataLoss:
		return "data loss"
	}
	return c.String()
}

// GRPCStatus returns the status, so that status.Code and status.FromError
// see through an *Error. When the context ended the retries the code is
// DeadlineExceeded or Canceled.
func (e *Error) GRPCStatus() *status.Status {
	switch {
	case errors.Is(e.Context, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, e.Error())
	case errors.Is(e.Context, context.Canceled):
		return status.New(codes.Canceled, e.Error())
	}
	return e.Status
}

// Is reports whether target is the error's sentinel or its context error.
func (e *Error) Is(target error) bool {
	if target == nil {
		return false
	}
	if target == e.kind {
		return true
	}
	if e.Context != nil && errors.Is(e.Context, target) {
		return true
	}
	switch e.Status.Code() {
	case codes.DeadlineExceeded:
		return target == context.DeadlineExceeded
	case codes.Canceled:
		return target == context.Canceled
	}
	return false
}

// Unwrap returns the context error, if any.
func (e *Error) Unwrap() error { return e.Context }

// kindOf returns the sentinel for a status code.
func kindOf(c codes.Code) error {
	switch c {
	case codes.NotFound:
		return ErrNotFound
	case codes.InvalidArgument, codes.OutOfRange:
		return ErrInvalidArgument
	case codes.Unavailable:
		return ErrUnavailable
	case codes.FailedPrecondition:
		return ErrFailedPrecondition
	case codes.AlreadyExists:
		return ErrResultUnavailable
	case codes.Unauthenticated:
		return ErrUnauthenticated
	case codes.PermissionDenied:
		return ErrPermissionDenied
	}
	return nil
}

// newError wraps err (a status error, or a plain error which becomes
// Unknown) for op.
func newError(op string, err error, attempts int) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	st := toStatus(err)
	return &Error{Op: op, Status: st, Attempts: attempts, kind: kindOf(st.Code())}
}

// toStatus returns err's status; a context error becomes the matching
// code, anything else Unknown.
func toStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	}
	return status.New(codes.Unknown, err.Error())
}

// clientError is an error the client makes up without asking the cluster
// (a bad argument, a closed client, a failed compare).
func clientError(op string, kind error, code codes.Code, format string, args ...any) *Error {
	return &Error{Op: op, Status: status.Newf(code, format, args...), kind: kind}
}

func invalidArg(op, format string, args ...any) *Error {
	return clientError(op, ErrInvalidArgument, codes.InvalidArgument, format, args...)
}

// notLeader returns the NotLeader detail of a status, if it has one.
func notLeader(st *status.Status) (*cairnpb.NotLeader, bool) {
	for _, d := range st.Details() {
		if nl, ok := d.(*cairnpb.NotLeader); ok {
			return nl, true
		}
	}
	return nil, false
}
