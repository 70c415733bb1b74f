// Command cairn is the command-line client of a cairn cluster, built as
// `cairn` (go build -o cairn ./cmd/client):
//
//	cairn put greeting hello
//	cairn get greeting
//	cairn scan --prefix user/
//	cairn status
//	cairn bench put --clients 16 --duration 10s
//
// It talks to the nodes named by --endpoints (or $CAIRN_ENDPOINTS; default
// 127.0.0.1:7379, a node started with no flags). A cluster with an
// authorization policy needs --token (or $CAIRN_TOKEN). Run `cairn --help` or
// `cairn COMMAND --help` for every command, with examples.
//
// Exit codes: 0 on success; 1 when the command failed (one line on stderr
// says why), including `get` of a missing key (like grep finding nothing)
// and a failed `cas`; 2 for a usage error (unknown command or flag, wrong
// arguments).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a command line the command cannot run: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run runs the command line args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "cairn: ") {
		msg = "cairn: " + msg
	}
	fmt.Fprintln(stderr, msg)
	if isUsageError(err) {
		fmt.Fprintln(stderr, "Run 'cairn --help' for usage.")
		return exitUsage
	}
	return exitError
}

// isUsageError tells usage errors, ours and cobra's, from failures.
func isUsageError(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return true
	}
	// cobra's own errors for unknown commands and argument validation.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "required flag", "accepts ", "requires at least", "requires at most", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
