package base

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned by Get when the key has no live value.
var ErrNotFound = errors.New("lsm: not found")

// ErrInvalidArgument marks a request the engine refuses without side effects:
// an empty or oversized key, an oversized value, a bad option.
var ErrInvalidArgument = errors.New("lsm: invalid argument")

// ErrClosed is returned by operations on a closed DB, iterator or snapshot.
var ErrClosed = errors.New("lsm: closed")

// errCorruption is the marker wrapped by every corruption error.
var errCorruption = errors.New("lsm: corruption")

// CorruptionErrorf returns an error that IsCorruption recognises. It wraps
// any %w operands as fmt.Errorf does.
func CorruptionErrorf(format string, args ...any) error {
	return &corruptionError{err: fmt.Errorf(format, args...)}
}

// MarkCorruption wraps err so that IsCorruption(err) is true. A nil err
// stays nil.
func MarkCorruption(err error) error {
	if err == nil || IsCorruption(err) {
		return err
	}
	return &corruptionError{err: err}
}

type corruptionError struct{ err error }

func (e *corruptionError) Error() string {
	return "lsm: corruption: " + e.err.Error()
}
func (e *corruptionError) Unwrap() []error { return []error{errCorruption, e.err} }

// IsCorruption reports whether err (or any error it wraps) reports
// corrupt on-disk data: a checksum mismatch, a malformed block or record, an
// impossible value.
func IsCorruption(err error) bool { return errors.Is(err, errCorruption) }

// InvalidArgumentf returns an error that wraps ErrInvalidArgument.
func InvalidArgumentf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
