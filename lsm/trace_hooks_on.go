//go:build !cairn_notrace

package lsm

// traceHooks compiles the read path's tracer check in. Building with
// -tags cairn_notrace leaves it out, for BenchmarkReadRandomTrace to
// measure what the check costs while no trace runs.
const traceHooks = true
