package fsm

import (
	"errors"
	"fmt"

	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
)

// Errors returned by the FSM. Test for them with errors.Is.
var (
	// ErrInvalidArgument marks a command or read the FSM refuses without
	// side effects (an empty or oversized key, an oversized value, a
	// malformed request). The cluster layer maps it to InvalidArgument.
	ErrInvalidArgument = errors.New("fsm: invalid argument")
	// ErrResultUnavailable is the result of a duplicate write (a client_id
	// and seq already applied) whose result the session no longer holds:
	// seq is older than the session's last, or the result was too large to
	// retain. The write was applied once; its result is lost.
	ErrResultUnavailable = errors.New("fsm: duplicate of an applied write whose result is no longer retained")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("fsm: closed")
	// ErrHalted wraps the error that stopped the state machine: an engine
	// write or read failed while applying, so this replica can no longer
	// apply the log deterministically. Every later apply, snapshot and
	// restore fails with it; reads still serve the last applied state. The
	// node must be restarted (it then replays the log from its durable
	// applied index).
	ErrHalted = errors.New("fsm: halted")

	// errCorruption marks damaged persisted data: an engine record or a
	// snapshot stream that does not decode or whose checksum mismatches.
	errCorruption = errors.New("fsm: corruption")
)

// IsCorruption reports whether err reports damaged data, in the FSM's
// records, in a snapshot stream, or in the engine's files.
func IsCorruption(err error) bool {
	return errors.Is(err, errCorruption) || lsm.IsCorruption(err)
}

func corruptionf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errCorruption, fmt.Sprintf(format, args...))
}

// argError is an ErrInvalidArgument with its message, which a session
// remembers so that a duplicate gets the identical error.
type argError struct{ msg string }

func (e *argError) Error() string        { return "fsm: invalid argument: " + e.msg }
func (e *argError) Is(target error) bool { return target == ErrInvalidArgument }

func invalidf(format string, args ...any) error {
	return &argError{msg: fmt.Sprintf(format, args...)}
}

// withContext prefixes an argument error's message with where it arose.
func withContext(err error, format string, args ...any) error {
	var ae *argError
	if !errors.As(err, &ae) {
		return err
	}
	return &argError{msg: fmt.Sprintf(format, args...) + ": " + ae.msg}
}

// errorResult converts a command's error result into its remembered form.
// Only argument errors are remembered (every other error halts the FSM).
func errorResult(err error) (*fsmpb.Error, bool) {
	var ae *argError
	if !errors.As(err, &ae) {
		return nil, false
	}
	return &fsmpb.Error{Code: fsmpb.ErrorCode_INVALID_ARGUMENT, Message: ae.msg}, true
}

// errorFromResult is the inverse of errorResult.
func errorFromResult(e *fsmpb.Error) error {
	switch e.GetCode() {
	case fsmpb.ErrorCode_INVALID_ARGUMENT:
		return &argError{msg: e.GetMessage()}
	default:
		return corruptionf("remembered error of unknown code %d: %s", e.GetCode(), e.GetMessage())
	}
}
