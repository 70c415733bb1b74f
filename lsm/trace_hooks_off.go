//go:build cairn_notrace

package lsm

// traceHooks is false: Get never asks the tracer (see trace_hooks_on.go).
const traceHooks = false
