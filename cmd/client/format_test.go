package main

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// unescape reads escape's output back (it is a Go string literal's body,
// but for unescaped double quotes).
func unescape(s string) ([]byte, error) {
	u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
	return []byte(u), err
}

func checkEscape(t *testing.T, b []byte) {
	t.Helper()
	e := escape(b)
	if !utf8.ValidString(e) {
		t.Fatalf("escape(%q) = %q is not valid UTF-8", b, e)
	}
	for _, r := range e {
		if r < 0x20 || r == 0x7f {
			t.Fatalf("escape(%q) = %q holds a control character", b, e)
		}
	}
	back, err := unescape(e)
	if err != nil || !bytes.Equal(back, b) {
		t.Fatalf("escape(%q) = %q reads back as %q (%v)", b, e, back, err)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"hello":       "hello",
		"a b":         "a b",
		"tab\there":   `tab\there`,
		"nl\n":        `nl\n`,
		`back\slash`:  `back\\slash`,
		"\x00\xff":    `\x00\xff`,
		"héllo wörld": "héllo wörld",
		"\u200b":      `\xe2\x80\x8b`, // zero-width space: not printable
		`"quoted"`:    `"quoted"`,
		"\xe2\x80":    `\xe2\x80`, // truncated UTF-8
	} {
		if got := escape([]byte(in)); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
		checkEscape(t, []byte(in))
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		checkEscape(t, b)
	}
}

func FuzzEscape(f *testing.F) {
	f.Add([]byte("a\x00\xff\n\\\"é"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) { checkEscape(t, b) })
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// percentile agrees with sorting and indexing by rank.
func TestPercentile(t *testing.T) {
	if percentile(nil, 0.5) != 0 {
		t.Fatal("empty")
	}
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.9: 900, 0.99: 990, 0.999: 999, 1: 1000, 0: 1} {
		if got := percentile(d, q); got != want {
			t.Errorf("p%v = %v, want %v", q, got, want)
		}
	}
	if percentile([]time.Duration{7}, 0.999) != 7 {
		t.Error("one sample")
	}
}
