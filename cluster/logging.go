package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// peerLogInterval is how often the same warning or error about the same
// peer is logged: raft repeats "failed to heartbeat to" for a down follower
// every few hundred milliseconds, which would otherwise flood the log.
const peerLogInterval = 30 * time.Second

// newHCLogger returns an hclog.Logger (what raft logs to) that forwards
// each line to l at the matching level, and logs repeated warnings and
// errors about the same peer at most once per peerLogInterval (see
// logLimiter).
func newHCLogger(name string, l *slog.Logger, level slog.Level) hclog.Logger {
	return newLimitedHCLogger(name, l, level, newLogLimiter(peerLogInterval, time.Now))
}

func newLimitedHCLogger(name string, l *slog.Logger, level slog.Level, lim *logLimiter) hclog.Logger {
	if !l.Enabled(context.Background(), level) && !l.Enabled(context.Background(), slog.LevelError) {
		return hclog.NewNullLogger()
	}
	hl := hclog.Info
	switch {
	case level <= slog.LevelDebug:
		hl = hclog.Debug
	case level >= slog.LevelError:
		hl = hclog.Error
	case level >= slog.LevelWarn:
		hl = hclog.Warn
	}
	return &limitedLogger{Logger: &slogHCLogger{l: l, name: name, level: hl}, lim: lim}
}

// slogHCLogger is an hclog.Logger that logs to a slog.Logger: each line
// keeps its arguments as attributes (after component=the logger's name),
// so that raft's lines are as structured as the node's own, in the text
// and the JSON format alike.
type slogHCLogger struct {
	l       *slog.Logger
	name    string
	level   hclog.Level
	implied []any
}

var _ hclog.Logger = (*slogHCLogger)(nil)

func (h *slogHCLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < h.level {
		return
	}
	sl := slog.LevelInfo
	switch level {
	case hclog.Trace:
		sl = slog.LevelDebug - 4
	case hclog.Debug:
		sl = slog.LevelDebug
	case hclog.Warn:
		sl = slog.LevelWarn
	case hclog.Error:
		sl = slog.LevelError
	}
	ctx := context.Background()
	if !h.l.Enabled(ctx, sl) {
		return
	}
	all := append(h.implied[:len(h.implied):len(h.implied)], args...)
	attrs := make([]any, 0, 2+len(all))
	if h.name != "" {
		attrs = append(attrs, slog.String("component", h.name))
	}
	for i := 0; i < len(all); i += 2 {
		if i+1 == len(all) {
			attrs = append(attrs, slog.Any(hclog.MissingKey, hclogValue(all[i])))
			break
		}
		key := fmt.Sprint(all[i])
		if reservedLogKeys[key] {
			key = h.name + "_" + key // raft's "node" is not the node ID
		}
		attrs = append(attrs, slog.Any(key, hclogValue(all[i+1])))
	}
	h.l.Log(ctx, sl, msg, attrs...)
}

// reservedLogKeys are the attribute names of every line (slog's and the
// node's), which an hclog argument may not take.
var reservedLogKeys = map[string]bool{"time": true, "level": true, "msg": true, "source": true, "node": true, "component": true}

// hclogValue renders the values raft logs (errors, durations, *raft.Raft
// and other Stringers, hclog.Fmt) as text, which both slog handlers print
// as the value says (JSON would print most of them as {} or nanoseconds).
func hclogValue(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) > 0 {
			if f, ok := x[0].(string); ok {
				return fmt.Sprintf(f, x[1:]...)
			}
		}
		return fmt.Sprint([]any(x)...)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	return v
}

func (h *slogHCLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLogger) IsTrace() bool { return h.level <= hclog.Trace }
func (h *slogHCLogger) IsDebug() bool { return h.level <= hclog.Debug }
func (h *slogHCLogger) IsInfo() bool  { return h.level <= hclog.Info }
func (h *slogHCLogger) IsWarn() bool  { return h.level <= hclog.Warn }
func (h *slogHCLogger) IsError() bool { return h.level <= hclog.Error }

func (h *slogHCLogger) ImpliedArgs() []any { return h.implied }

func (h *slogHCLogger) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(h.implied[:len(h.implied):len(h.implied)], args...)
	return &c
}

func (h *slogHCLogger) Name() string { return h.name }

func (h *slogHCLogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (h *slogHCLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *slogHCLogger) SetLevel(level hclog.Level) { h.level = level }
func (h *slogHCLogger) GetLevel() hclog.Level      { return h.level }

func (h *slogHCLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slogWriter{h.l.With("component", h.name)}
}

// peerArgs are the argument names raft gives a peer under.
var peerArgs = [...]string{"peer", "server-id"}

// limitedLogger is an hclog.Logger whose warnings and errors about a peer
// (lines with a peerArgs argument) pass through lim.
type limitedLogger struct {
	hclog.Logger
	lim *logLimiter
}

func (l *limitedLogger) Log(level hclog.Level, msg string, args ...any) {
	if args, ok := l.limit(level, msg, args); ok {
		l.Logger.Log(level, msg, args...)
	}
}

func (l *limitedLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *limitedLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *limitedLogger) With(args ...any) hclog.Logger {
	return &limitedLogger{Logger: l.Logger.With(args...), lim: l.lim}
}

func (l *limitedLogger) Named(name string) hclog.Logger {
	return &limitedLogger{Logger: l.Logger.Named(name), lim: l.lim}
}

func (l *limitedLogger) ResetNamed(name string) hclog.Logger {
	return &limitedLogger{Logger: l.Logger.ResetNamed(name), lim: l.lim}
}

// limit decides whether a line is logged, and adds the count of the
// identical lines suppressed before it.
func (l *limitedLogger) limit(level hclog.Level, msg string, args []any) ([]any, bool) {
	if level < hclog.Warn || level < l.Logger.GetLevel() {
		return args, true // not limited, or not logged anyway
	}
	peer, ok := "", false
	for i := 0; i+1 < len(args) && !ok; i += 2 {
		for _, k := range peerArgs {
			if s, isStr := args[i].(string); isStr && s == k {
				peer, ok = fmt.Sprint(args[i+1]), true
			}
		}
	}
	if !ok {
		return args, true
	}
	allow, suppressed := l.lim.allow(logKey{level: level, name: l.Logger.Name(), msg: msg, peer: peer})
	if !allow {
		return nil, false
	}
	if suppressed > 0 {
		args = append(args[:len(args):len(args)], "suppressed", suppressed)
	}
	return args, true
}

// logKey identifies "the same line": its level, logger, message and peer
// (other arguments, such as the error or a backoff time, may differ).
type logKey struct {
	level hclog.Level
	name  string
	msg   string
	peer  string
}

// logLimiter lets a line through at most once per interval per key, and
// counts the lines it held back.
type logLimiter struct {
	interval time.Duration
	now      func() time.Time
	mu       struct {
		sync.Mutex
		lines map[logKey]*limitedLine
	}
}

type limitedLine struct {
	// logged is when the line was last let through.
	logged time.Time
	// suppressed counts the lines held back since.
	suppressed int
}

// maxLimitedLines bounds the limiter's memory: past it, lines not logged
// for an interval are forgotten.
const maxLimitedLines = 1024

func newLogLimiter(interval time.Duration, now func() time.Time) *logLimiter {
	l := &logLimiter{interval: interval, now: now}
	l.mu.lines = make(map[logKey]*limitedLine)
	return l
}

// allow reports whether a line with key k may be logged now and, if so, how
// many lines with the same key it suppressed since it last allowed one.
func (l *logLimiter) allow(k logKey) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, found := l.mu.lines[k]; found {
		if now.Sub(e.logged) < l.interval {
			e.suppressed++
			return false, 0
		}
		suppressed, e.logged, e.suppressed = e.suppressed, now, 0
		return true, suppressed
	}
	if len(l.mu.lines) >= maxLimitedLines {
		for key, e := range l.mu.lines {
			if now.Sub(e.logged) >= l.interval {
				delete(l.mu.lines, key)
			}
		}
	}
	l.mu.lines[k] = &limitedLine{logged: now}
	return true, 0
}

// slogWriter parses hclog's text lines ("[INFO]  raft: msg: k=v") into
// slog records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, lv := range [...]struct {
		prefix string
		level  slog.Level
	}{
		{"[TRACE]", slog.LevelDebug - 4},
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERROR]", slog.LevelError},
	} {
		if rest, ok := strings.CutPrefix(msg, lv.prefix); ok {
			level, msg = lv.level, strings.TrimSpace(rest)
			break
		}
	}
	w.l.Log(context.Background(), level, msg)
	return len(p), nil
}
