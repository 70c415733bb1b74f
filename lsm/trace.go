package lsm

import (
	"io"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/trace"
)

// Block-cache tracing (package trace).
//
// While a trace runs the DB records every lookup in its block cache (data
// blocks, by Get, iterators and blob GC's liveness checks, traced as
// compactions; compactions themselves read their inputs through their own
// read-ahead readers and never look in the block cache, so they make no
// record) and in its blob cache (BlockBlob records, one per
// blob record looked up), and the index, filter and range-deletion blocks
// each table reads and pins when it is opened (Pinned records: they never
// enter the block cache, and their later uses are memory reads that make no
// record). Flushes read no blocks. See package trace's doc.
//
// The cost while no trace runs is one atomic load per Get and per
// iterator: each builds a trace.Access only when a trace runs and passes
// nil otherwise, and the lookup sites test for nil. An iterator records its
// lookups only if the trace ran when it started.
// Metrics().BlockCache and Metrics().Blob.Cache count the hits and misses
// the caches themselves measured, to compare with a trace.

// StartTrace starts recording block-cache accesses to w (see
// trace.Tracer.StartTrace). It fails with trace.ErrTraceRunning while a
// trace runs.
func (d *DB) StartTrace(opts trace.Options, w io.Writer) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	return d.tracer.StartTrace(opts, w)
}

// EndTrace stops the running trace and flushes it to its writer; it
// returns the first error writing it, or trace.ErrNotTracing.
func (d *DB) EndTrace() error { return d.tracer.EndTrace() }

// TraceStopped returns a channel closed when the running trace stops
// writing before EndTrace (its size limit, a write error); see
// trace.Tracer.Stopped.
func (d *DB) TraceStopped() <-chan struct{} { return d.tracer.Stopped() }

// traceBlob records a blob cache lookup of record x of ukey.
func (d *DB) traceBlob(acc *trace.Access, ukey []byte, x blob.Index, hit bool) {
	var kb [trace.MaxBlockKeyLen]byte
	rec := trace.Record{
		Type:       trace.BlockBlob,
		BlockSize:  x.Len,
		BlockKey:   trace.AppendBlockKey(kb[:0], d.blobs.cacheID, uint64(x.FileNum), x.Offset),
		CFName:     trace.DefaultCFName,
		FileNumber: uint64(x.FileNum),
		CacheHit:   hit,
	}
	acc.Fill(&rec)
	rec.Level = -1
	if !d.tracer.ShouldTrace(rec.BlockKey) {
		return
	}
	if rec.Caller.IsGet() {
		rec.ReferencedKey = ukey
	}
	d.tracer.WriteBlockAccess(&rec)
}
