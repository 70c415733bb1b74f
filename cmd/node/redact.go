package main

import (
	"encoding/json"
	"expvar"
	"fmt"
	"net/http"
	"os"
	"path"
	"strings"
)

// secretFlags are the flags whose values are secrets given on the command
// line (files holding secrets are fine to show).
var secretFlags = []string{"gossip-key"}

// redacted replaces a secret flag's value.
const redacted = "REDACTED"

// redactArgs returns a copy of a command line (os.Args: the program, then
// its arguments) with the value of every secret flag replaced by
// "REDACTED", in each form the flag package accepts: -name value,
// --name value, -name=value and --name=value. Flags are matched by exact
// name (--gossip-key-file's value stays).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		dashes := "-"
		if strings.HasPrefix(a, "--") {
			dashes = "--"
		}
		name, _, hasValue := strings.Cut(a[len(dashes):], "=")
		switch {
		case !isSecretFlag(name):
		case hasValue:
			out[i] = dashes + name + "=" + redacted
		case i+1 < len(out):
			// The next argument is the value, whatever it looks like.
			out[i+1] = redacted
			i++
		}
	}
	return out
}

func isSecretFlag(name string) bool {
	for _, s := range secretFlags {
		if name == s {
			return true
		}
	}
	return false
}

// cmdlineArgs returns the process's command line (a variable for tests,
// which cannot give the test binary a --gossip-key).
var cmdlineArgs = func() []string { return os.Args }

// redactDebug wraps h, a handler serving net/http/pprof: its
// /debug/pprof/cmdline shows the command line with secret flags redacted
// (pprof.Cmdline shows os.Args as they are: --gossip-key's value, say).
// With vars, /debug/vars (expvar's handler on http.DefaultServeMux,
// which prometheus's client library links in) is served with its
// "cmdline" redacted too.
func redactDebug(h http.Handler, vars bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Clean(r.URL.Path) {
		case "/debug/pprof/cmdline":
			serveCmdline(w)
		case "/debug/vars":
			if !vars {
				h.ServeHTTP(w, r)
				return
			}
			serveVars(w)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// serveCmdline answers as pprof.Cmdline does, with secrets redacted.
func serveCmdline(w http.ResponseWriter) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(cmdlineArgs()), "\x00"))
}

// serveVars answers as expvar's handler does, with the "cmdline" variable
// redacted.
func serveVars(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	fmt.Fprintf(w, "{\n")
	first := true
	expvar.Do(func(kv expvar.KeyValue) {
		if !first {
			fmt.Fprintf(w, ",\n")
		}
		first = false
		value := kv.Value.String()
		if kv.Key == "cmdline" {
			b, err := json.Marshal(redactArgs(cmdlineArgs()))
			if err != nil {
				b = []byte(`"` + redacted + `"`)
			}
			value = string(b)
		}
		fmt.Fprintf(w, "%q: %s", kv.Key, value)
	})
	fmt.Fprintf(w, "\n}\n")
}
