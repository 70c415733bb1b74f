// Package dbbench runs db_bench-style workloads (fillseq, fillrandom,
// overwrite, fillsync, readrandom, readmissing, seekrandom, readseq,
// readrandom with two goroutines, readwhilewriting, a full compaction, a
// reopen, and the reads again) against cairn's lsm engine and its peers,
// Pebble v2, Badger v4 and goleveldb, with equal settings (DefaultConfig).
//
// It lives in its own module (bench/engine) so that the peers never become
// dependencies of cairn itself: `go test ./...` and `go mod tidy` at the
// repository root do not see this directory.
//
// Run runs one engine in the calling process; cmd/dbbench wraps it as a
// program and cmd/enginebench runs one dbbench process per engine per
// round, interleaved, and reports medians (see `make bench-engine`).
//
// Keys are 16 bytes: the 16-digit decimal of 2i for key i, so a missing
// key (2i+1) falls between two present ones. Values are incompressible:
// slices at random offsets of a 4 MiB buffer of random bytes. Every read
// benchmark checks what it reads: readrandom must find every key with a
// value of ValueSize bytes, readmissing must find none, seekrandom must
// land on the key it seeks, readseq must count exactly the keys written.
//
// Differences from db_bench: fillrandom writes a random permutation of
// the keys (db_bench draws with replacement), so that every key exists for
// the reads; fillsync writes Num/100 keys on a fresh DB.
package dbbench
