// Package base holds the vocabulary shared by every package of the engine:
// internal keys (user key + sequence number + kind), sequence and file
// numbers, the internal iterator interface, file naming, and the engine's
// error values (ErrNotFound, ErrInvalidArgument, the corruption marker).
//
// lsm/sst, lsm/version, lsm/record and lsm/filter import base and never the
// lsm package itself.
package base
