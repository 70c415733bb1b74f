package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

const testGossipKey = "c2VjcmV0LWdvc3NpcC1rZXktMzJieXRlcy4uLi4uLi4="

func TestRedactArgs(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"cairn-node", "--gossip-key", "K", "--id", "n1"}, []string{"cairn-node", "--gossip-key", "REDACTED", "--id", "n1"}},
		{[]string{"cairn-node", "-gossip-key", "K"}, []string{"cairn-node", "-gossip-key", "REDACTED"}},
		{[]string{"cairn-node", "--gossip-key=K", "--id=n1"}, []string{"cairn-node", "--gossip-key=REDACTED", "--id=n1"}},
		{[]string{"cairn-node", "-gossip-key=K=="}, []string{"cairn-node", "-gossip-key=REDACTED"}},
		{[]string{"cairn-node", "--gossip-key="}, []string{"cairn-node", "--gossip-key=REDACTED"}},
		// The flag package takes the next argument as the value, whatever
		// it looks like.
		{[]string{"cairn-node", "--gossip-key", "-K", "--pprof"}, []string{"cairn-node", "--gossip-key", "REDACTED", "--pprof"}},
		{[]string{"cairn-node", "--gossip-key", "--gossip-key=K"}, []string{"cairn-node", "--gossip-key", "REDACTED"}},
		// Twice: both.
		{[]string{"cairn-node", "--gossip-key", "A", "-gossip-key=B"}, []string{"cairn-node", "--gossip-key", "REDACTED", "-gossip-key=REDACTED"}},
		// A file name is no secret; nor is another flag with the name as a
		// prefix, nor the program name.
		{[]string{"cairn-node", "--gossip-key-file", "/etc/k", "--gossip-key-file=/etc/k"}, []string{"cairn-node", "--gossip-key-file", "/etc/k", "--gossip-key-file=/etc/k"}},
		{[]string{"--gossip-key"}, []string{"--gossip-key"}},
		// The flag last, without a value (an error for the flag package):
		// nothing to hide.
		{[]string{"cairn-node", "--id", "n1", "--gossip-key"}, []string{"cairn-node", "--id", "n1", "--gossip-key"}},
		{nil, []string{}},
	} {
		in := slices.Clone(c.in)
		got := redactArgs(c.in)
		if !slices.Equal(got, c.want) {
			t.Errorf("redactArgs(%q) = %q, want %q", c.in, got, c.want)
		}
		if !slices.Equal(c.in, in) {
			t.Errorf("redactArgs changed its argument to %q", c.in)
		}
	}
}

// withArgs makes the served command line args for the test.
func withArgs(t *testing.T, args []string) {
	old := cmdlineArgs
	cmdlineArgs = func() []string { return args }
	t.Cleanup(func() { cmdlineArgs = old })
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestPprofCmdlineRedacted: the metrics server with --pprof (the monitor's
// handler, as cairn-node serves it) shows the command line without the
// gossip key, and still serves the other pprof pages.
func TestPprofCmdlineRedacted(t *testing.T) {
	args := []string{"cairn-node", "--id", "n1", "--gossip-key", testGossipKey, "--pprof", "--metrics-addr", "127.0.0.1:0"}
	withArgs(t, args)
	var stderr bytes.Buffer
	o, err := parseFlags(args[1:], &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{Logger: slog.New(slog.DiscardHandler)}
	m, err := o.listenMetrics(&cfg)
	if err != nil || m == nil {
		t.Fatalf("listenMetrics: %v, %v", m, err)
	}
	// The handler's collectors ask the node only when scraped.
	if err := m.serve(nil, cfg.Logger); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.close(ctx)
	}()
	base := "http://" + m.addr()
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof//cmdline", "/debug/pprof/./cmdline", "/debug/pprof/%63mdline"} {
		code, body := get(t, base+p)
		want := strings.Join([]string{"cairn-node", "--id", "n1", "--gossip-key", "REDACTED", "--pprof", "--metrics-addr", "127.0.0.1:0"}, "\x00")
		if code != http.StatusOK || body != want || strings.Contains(body, testGossipKey) {
			t.Errorf("GET %s: %d %q, want %q", p, code, body, want)
		}
	}
	if code, body := get(t, base+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/: %d %.200q", code, body)
	}
	if code, _ := get(t, base+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/goroutine: %d", code)
	}
	// The monitor serves no /debug/vars; the wrapper adds none.
	if code, _ := get(t, base+"/debug/vars"); code != http.StatusNotFound {
		t.Errorf("GET /debug/vars on the metrics address: %d, want 404", code)
	}
}

// TestPprofCmdlineRedactedWithoutPprof: without --pprof, no pprof page is
// served, the command line included.
func TestPprofCmdlineRedactedWithoutPprof(t *testing.T) {
	withArgs(t, []string{"cairn-node", "--gossip-key", testGossipKey})
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"--metrics-addr", "127.0.0.1:0"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{Logger: slog.New(slog.DiscardHandler)}
	m, err := o.listenMetrics(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.serve(nil, cfg.Logger); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.close(ctx)
	}()
	if code, body := get(t, "http://"+m.addr()+"/debug/pprof/cmdline"); code != http.StatusNotFound || strings.Contains(body, testGossipKey) {
		t.Errorf("GET /debug/pprof/cmdline without --pprof: %d %q", code, body)
	}
}

// TestDebugEnvRedacted: the CAIRN_PPROF_ADDR server (http.DefaultServeMux,
// with net/http/pprof and expvar) shows neither in /debug/pprof/cmdline
// nor in /debug/vars' "cmdline" the gossip key.
func TestDebugEnvRedacted(t *testing.T) {
	withArgs(t, []string{"cairn-node", "--gossip-key=" + testGossipKey})
	srv := httptest.NewServer(redactDebug(http.DefaultServeMux, true))
	defer srv.Close()
	code, body := get(t, srv.URL+"/debug/pprof/cmdline")
	if code != http.StatusOK || body != "cairn-node\x00--gossip-key=REDACTED" {
		t.Errorf("GET /debug/pprof/cmdline: %d %q", code, body)
	}
	code, body = get(t, srv.URL+"/debug/vars")
	var vars map[string]json.RawMessage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &vars) != nil {
		t.Fatalf("GET /debug/vars: %d %.300q", code, body)
	}
	var cmdline []string
	if err := json.Unmarshal(vars["cmdline"], &cmdline); err != nil || !slices.Equal(cmdline, []string{"cairn-node", "--gossip-key=REDACTED"}) {
		t.Errorf("/debug/vars cmdline %s (%v)", vars["cmdline"], err)
	}
	if _, ok := vars["memstats"]; !ok || strings.Contains(body, testGossipKey) {
		t.Errorf("/debug/vars: %.300q", body)
	}
	if code, _ := get(t, srv.URL+"/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap: %d", code)
	}
}
