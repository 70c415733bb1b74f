package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/cairnkv/cairn/client"
)

// escape returns b as text that is safe on a terminal and unambiguous:
// printable UTF-8 stays as it is; a backslash becomes \\, newline, tab and
// carriage return \n, \t, \r, and every other byte \xNN. unescape (and
// the txn syntax's quoted strings) read it back.
func escape(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == utf8.RuneError && n <= 1, !unicode.IsPrint(r) && r != ' ':
			for _, c := range b[:max(n, 1)] {
				fmt.Fprintf(&sb, `\x%02x`, c)
			}
		default:
			sb.Write(b[:n])
		}
		b = b[max(n, 1):]
	}
	return sb.String()
}

// bytesText formats a key or value for table output.
func (g *globals) bytesText(b []byte) string {
	if g.hex {
		return hex.EncodeToString(b)
	}
	return escape(b)
}

// jsonBytes formats a key or value for JSON: a string (hex with --hex).
// Bytes that are not valid UTF-8 are written as \xNN escapes (as in table
// output), so the JSON stays valid and nothing is lost; such a field is
// flagged in the object by an "escaped": true member (see kvJSON).
func (g *globals) jsonBytes(b []byte) (s string, escaped bool) {
	if g.hex {
		return hex.EncodeToString(b), false
	}
	if utf8.Valid(b) {
		return string(b), false
	}
	return escape(b), true
}

// kvJSON is a KeyValue as JSON.
type kvJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	Version     uint64  `json:"version"`
	CreateIndex uint64  `json:"create_index"`
	ModIndex    uint64  `json:"mod_index"`
	// Escaped is set when key or value were not valid UTF-8 and are
	// written with \xNN escapes.
	Escaped bool `json:"escaped,omitempty"`
}

func (g *globals) kvJSON(kv *client.KeyValue) kvJSON {
	k, e1 := g.jsonBytes(kv.Key)
	out := kvJSON{Key: k, Version: kv.Version, CreateIndex: kv.CreateIndex, ModIndex: kv.ModIndex, Escaped: e1}
	if kv.Value != nil {
		v, e2 := g.jsonBytes(kv.Value)
		out.Value, out.Escaped = &v, e1 || e2
	}
	return out
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// newTable returns a tab-separated table writer; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// humanBytes formats a byte count with a binary unit.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// jsonLine marshals v on one line.
func jsonLine(v any) ([]byte, error) { return json.Marshal(v) }
