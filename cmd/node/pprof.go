package main

import (
	"net/http"
	_ "net/http/pprof" // served only when CAIRN_PPROF_ADDR is set
	"os"
	"runtime"
)

// With CAIRN_PPROF_ADDR=host:port in its environment, cairn-node serves
// net/http/pprof there (for the cluster benchmark's profiles: make
// bench-cluster CLUSTER_ARGS=--profile). Off by default; the mutex and block
// profiles are sampled only while it is on. Operators use --pprof instead,
// which serves the same handlers on the metrics address without turning on
// the mutex and block profiles (they cost every contended lock). Both
// show the command line without its secrets (redactDebug).
func init() {
	addr := os.Getenv("CAIRN_PPROF_ADDR")
	if addr == "" {
		return
	}
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(100_000) // one event per 100µs blocked
	// http.DefaultServeMux: net/http/pprof's handlers and expvar's
	// /debug/vars (linked in by prometheus), whose command lines are
	// redacted.
	go func() { _ = http.ListenAndServe(addr, redactDebug(http.DefaultServeMux, true)) }()
}
