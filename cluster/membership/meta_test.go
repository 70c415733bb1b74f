package membership

import (
	"errors"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{ID: "n1", RaftAddr: "127.0.0.1:7000"},
		{ID: "node-ä", RaftAddr: "[::1]:7000", GRPCAddr: "localhost:7379", Version: 3, NonVoter: true},
		{ID: "x", RaftAddr: "h:1", Version: -1},
		{ID: "x", RaftAddr: "h:1", Version: 1 << 40},
		{ID: "n2", RaftAddr: "h:1", Incarnation: 7, ClusterID: "0123456789abcdef0123456789abcdef"},
	} {
		for _, leaving := range []bool{false, true} {
			if err := m.Validate(); err != nil {
				t.Fatalf("%+v: %v", m, err)
			}
			buf := encodeMeta(m, leaving)
			if len(buf) != m.encodedSize() {
				t.Fatalf("%+v: encoded %d bytes, encodedSize says %d", m, len(buf), m.encodedSize())
			}
			got, gotLeaving, err := decodeMeta(buf)
			if err != nil {
				t.Fatalf("%+v: %v", m, err)
			}
			if got != m || gotLeaving != leaving {
				t.Fatalf("round trip of %+v (leaving %v) gave %+v (leaving %v)", m, leaving, got, gotLeaving)
			}
			// Later revisions append fields (after a ClusterID, empty or
			// not) and set new flag bits: ignored.
			ext := append([]byte(nil), buf...)
			ext[1] |= 0xf0
			if m.ClusterID == "" {
				ext = append(ext, 0)
			}
			ext = append(ext, "future field"...)
			got, gotLeaving, err = decodeMeta(ext)
			if err != nil || got != m || gotLeaving != leaving {
				t.Fatalf("extended encoding of %+v: got %+v, %v, %v", m, got, gotLeaving, err)
			}
		}
	}
}

func TestMetaEncodingIsStable(t *testing.T) {
	// The format is shared by every node in a cluster: it must not drift.
	m := Meta{ID: "n1", RaftAddr: "a:1", GRPCAddr: "b:2", Version: -2, NonVoter: true, Incarnation: 300}
	got := encodeMeta(m, true)
	want := "\x01\x03\x02n1\x03a:1\x03b:2\x03\xac\x02"
	if string(got) != want {
		t.Fatalf("encoding %q, want %q", got, want)
	}
	// What nodes wrote before Incarnation existed still decodes, with
	// Incarnation 0.
	old := "\x01\x03\x02n1\x03a:1\x03b:2\x03"
	m.Incarnation = 0
	if dec, leaving, err := decodeMeta([]byte(old)); err != nil || dec != m || !leaving {
		t.Fatalf("decoding the format without Incarnation: %+v %v %v", dec, leaving, err)
	}
}

func TestMetaValidate(t *testing.T) {
	long := strings.Repeat("x", MetaMaxSize)
	for _, tc := range []struct {
		m       Meta
		wantErr error
		want    string
	}{
		{Meta{RaftAddr: "h:1"}, ErrInvalidMeta, "empty ID"},
		{Meta{ID: "n"}, ErrInvalidMeta, "empty raft address"},
		{Meta{ID: "n", RaftAddr: "nohost"}, ErrInvalidMeta, "raft address"},
		{Meta{ID: "n", RaftAddr: ":7000"}, ErrInvalidMeta, "needs a host and a port"},
		{Meta{ID: "n", RaftAddr: "h:"}, ErrInvalidMeta, "needs a host and a port"},
		{Meta{ID: "n", RaftAddr: "h:1", GRPCAddr: "h"}, ErrInvalidMeta, "gRPC address"},
		{Meta{ID: long, RaftAddr: "h:1"}, ErrMetaTooLarge, "limit 512"},
	} {
		err := tc.m.Validate()
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%.40q...) = %v, want %v containing %q", tc.m.ID, err, tc.wantErr, tc.want)
		}
	}
	// The limit is inclusive: fill an ID up to exactly MetaMaxSize bytes.
	m := Meta{RaftAddr: "h:1"}
	for m.encodedSize() < MetaMaxSize {
		m.ID += "x"
	}
	if n := m.encodedSize(); n != MetaMaxSize {
		t.Fatalf("test setup: encoded size %d", n)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("meta of exactly %d bytes: %v", MetaMaxSize, err)
	}
	m.ID += "x"
	if err := m.Validate(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("meta of %d bytes: %v", m.encodedSize(), err)
	}
}

func TestDecodeMetaRejects(t *testing.T) {
	good := encodeMeta(Meta{ID: "n1", RaftAddr: "127.0.0.1:7000", GRPCAddr: "127.0.0.1:7379", Version: 1, Incarnation: 1 << 40}, false)
	// Every strict prefix is missing a field or cuts Incarnation short,
	// except the one that ends after Version (the format before
	// Incarnation).
	oldLen := len(good) - uvarintLen(1<<40)
	for n := range len(good) {
		if n == oldLen {
			continue
		}
		if _, _, err := decodeMeta(good[:n]); !errors.Is(err, ErrInvalidMeta) {
			t.Fatalf("prefix of %d bytes: err %v", n, err)
		}
	}
	// With a cluster ID: every strict prefix is rejected but the two that
	// end where an older format did.
	withID := encodeMeta(Meta{ID: "n1", RaftAddr: "127.0.0.1:7000", Incarnation: 1 << 40, ClusterID: "0123456789abcdef0123456789abcdef"}, false)
	if m, _, err := decodeMeta(withID); err != nil || m.ClusterID != "0123456789abcdef0123456789abcdef" || m.Incarnation != 1<<40 {
		t.Fatalf("decode with a cluster ID: %+v, %v", m, err)
	}
	noID := len(withID) - 1 - 32
	for n := range len(withID) {
		if n == noID || n == noID-uvarintLen(1<<40) {
			if m, _, err := decodeMeta(withID[:n]); err != nil || m.ClusterID != "" {
				t.Fatalf("prefix of %d bytes (an older format): %+v, %v", n, m, err)
			}
			continue
		}
		if _, _, err := decodeMeta(withID[:n]); !errors.Is(err, ErrInvalidMeta) {
			t.Fatalf("prefix of %d bytes of a meta with a cluster ID: err %v", n, err)
		}
	}
	for name, buf := range map[string][]byte{
		"version 2":       append([]byte{2}, good[1:]...),
		"json":            []byte(`{"id":"n1"}`),
		"length overflow": {1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"huge length":     {1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 'n'},
		"empty ID":        encodeMeta(Meta{RaftAddr: "h:1"}, false),
		"bad raft addr":   encodeMeta(Meta{ID: "n", RaftAddr: "h"}, false),
	} {
		if _, _, err := decodeMeta(buf); !errors.Is(err, ErrInvalidMeta) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// FuzzDecodeMeta: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to bytes that decode to the same Meta.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(Meta{ID: "n1", RaftAddr: "127.0.0.1:7000", GRPCAddr: "127.0.0.1:7379", Version: 1}, false))
	f.Add(encodeMeta(Meta{ID: "n2", RaftAddr: "[::1]:1", Version: -7, NonVoter: true}, true))
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0xff, 0x80})
	f.Add([]byte(`{"ID":"n1"}`))
	f.Fuzz(func(t *testing.T, buf []byte) {
		m, leaving, err := decodeMeta(buf)
		if err != nil {
			if !errors.Is(err, ErrInvalidMeta) && !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		again, againLeaving, err := decodeMeta(encodeMeta(m, leaving))
		if err != nil || again != m || againLeaving != leaving {
			t.Fatalf("re-encoding %+v: got %+v %v %v", m, again, againLeaving, err)
		}
	})
}
