package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestLogLimiter(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	lim := newLogLimiter(10*time.Second, clk.now)
	a := logKey{level: hclog.Error, name: "raft", msg: "failed to heartbeat to", peer: "n2"}
	b := a
	b.peer = "n3"
	c := a
	c.msg = "failed to appendEntries to"

	check := func(k logKey, wantOK bool, wantSuppressed int) {
		t.Helper()
		ok, n := lim.allow(k)
		if ok != wantOK || n != wantSuppressed {
			t.Fatalf("%s at %v: allow = %v, %d; want %v, %d", k.msg+" "+k.peer, clk.t.Sub(time.Unix(1000, 0)), ok, n, wantOK, wantSuppressed)
		}
	}
	check(a, true, 0)
	// Every 0.6s, as raft's heartbeat retries: held back for 10s.
	for range 16 {
		clk.advance(600 * time.Millisecond)
		check(a, false, 0)
	}
	// Another peer, another message: their own budgets.
	check(b, true, 0)
	check(c, true, 0)
	check(b, false, 0)
	clk.advance(400 * time.Millisecond) // 10.0s after a's line
	check(a, true, 16)
	check(a, false, 0)
	clk.advance(10 * time.Second)
	check(a, true, 1)
	check(b, true, 1)
	check(c, true, 0)
	// A line that stopped repeating starts afresh.
	clk.advance(time.Hour)
	check(a, true, 0)
}

func TestLogLimiterForgets(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	lim := newLogLimiter(time.Second, clk.now)
	for i := range 3 * maxLimitedLines {
		lim.allow(logKey{msg: "m", peer: string(rune('a' + i))})
		clk.advance(time.Millisecond)
	}
	if n := len(lim.mu.lines); n > maxLimitedLines+1 {
		t.Fatalf("the limiter keeps %d lines, want at most %d", n, maxLimitedLines+1)
	}
}

// TestHCLoggerLimitsPeerErrors runs raft's heartbeat error through the
// adapter raft logs to: one line per interval per peer, with the count of
// the ones held back; other lines pass.
func TestHCLoggerLimitsPeerErrors(t *testing.T) {
	var buf bytes.Buffer
	sl := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := &fakeClock{t: time.Unix(1000, 0)}
	hl := newLimitedHCLogger("raft", sl, slog.LevelInfo, newLogLimiter(30*time.Second, clk.now))
	derived := hl.With("k", "v").Named("sub") // derived loggers are limited too
	errDial := errors.New("dial tcp 127.0.0.1:7380: connect: connection refused")
	for i := range 100 { // 60s of heartbeats every 0.6s
		hl.Error("failed to heartbeat to", "peer", "127.0.0.1:7380", "backoff time", time.Duration(i)*time.Millisecond, "error", errDial)
		hl.Warn("failed to contact", "server-id", "n2", "time", time.Duration(i)*time.Millisecond)
		derived.Error("failed to heartbeat to", "peer", "127.0.0.1:7380", "error", errDial)
		hl.Info("entering follower state", "peer", "127.0.0.1:7380")
		if i%50 == 0 {
			hl.Error("failed to commit logs", "error", errDial) // no peer: not limited
		}
		clk.advance(600 * time.Millisecond)
	}
	count := func(s string) int { return strings.Count(buf.String(), s) }
	if n := count(`msg="failed to heartbeat to" component=raft peer=127.0.0.1:7380`); n != 2 {
		t.Errorf("%d heartbeat errors logged in 60s, want 2 (at 0s and 30s):\n%s", n, buf.String())
	}
	// The second heartbeat error, at 30s (the 51st), counts the 49 in
	// between.
	second := false
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, `"backoff time"=50ms`) {
			second = strings.Contains(line, "suppressed=49")
		}
	}
	if !second {
		t.Errorf("the second heartbeat error does not say suppressed=49:\n%s", buf.String())
	}
	if n := count("suppressed=49"); n != 3 {
		t.Errorf("%d lines with suppressed=49, want 3 (one per limited line)", n)
	}
	if n := count("failed to contact"); n != 2 {
		t.Errorf("%d contact warnings, want 2", n)
	}
	if n := count(`msg="failed to heartbeat to" component=raft.sub`); n != 2 {
		t.Errorf("%d heartbeat errors from the derived logger, want 2", n)
	}
	if n := count("entering follower state"); n != 100 {
		t.Errorf("%d info lines, want all 100", n)
	}
	if n := count("failed to commit logs"); n != 2 {
		t.Errorf("%d errors without a peer, want both", n)
	}
}
