package cluster

import (
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger (what raft logs to) that forwards
// each line to l at the matching level.
func newHCLogger(name string, l *slog.Logger, level slog.Level) hclog.Logger {
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
	return hclog.New(&hclog.LoggerOptions{
		Name:        name,
		Level:       hl,
		Output:      slogWriter{l},
		DisableTime: true,
	})
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
