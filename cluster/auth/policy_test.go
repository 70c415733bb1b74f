package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	p, err := Parse([]byte(`{
		"certs": {"admin": "admin", "reader": "read-only", "spiffe://cairn/w": "read-write", "n1": "peer"},
		"tokens": {
			"` + HashToken("ro-token") + `": "read-only",
			"` + strings.ToUpper(HashToken("rw-token")[len(TokenHashPrefix):]) + `": "read-write"
		}
	}`))
	if err == nil {
		t.Fatal("a token hash without its sha256: prefix was accepted")
	}
	p, err = Parse([]byte(`{
		"certs": {"admin": "admin", "reader": "read-only", "spiffe://cairn/w": "read-write", "n1": "peer"},
		"tokens": {
			"` + HashToken("ro-token") + `": "read-only",
			"sha256:` + strings.ToUpper(HashToken("rw-token")[len(TokenHashPrefix):]) + `": "read-write"
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		names []string
		role  Role
		who   string
	}{
		{[]string{"admin"}, Admin, "admin"},
		{[]string{"reader", "x.example"}, ReadOnly, "reader"},
		{[]string{"nobody", "spiffe://cairn/w"}, ReadWrite, "spiffe://cairn/w"},
		// The highest role of all the names.
		{[]string{"reader", "admin"}, Admin, "admin"},
		{[]string{"n1"}, Peer, "n1"},
		{[]string{"nobody"}, Open, ""},
		{nil, Open, ""},
		// Names match exactly.
		{[]string{"Admin", "reader "}, Open, ""},
	} {
		r, who, ok := p.CertRole(c.names)
		if r != c.role || who != c.who || ok != (c.role != Open) {
			t.Errorf("CertRole(%q) = %v, %q, %v; want %v, %q", c.names, r, who, ok, c.role, c.who)
		}
	}
	for tok, want := range map[string]Role{"ro-token": ReadOnly, "rw-token": ReadWrite} {
		if r, ok := p.TokenRole(tok); !ok || r != want {
			t.Errorf("TokenRole(%q) = %v, %v; want %v", tok, r, ok, want)
		}
	}
	for _, tok := range []string{"", "ro-token ", "RO-TOKEN", HashToken("ro-token")} {
		if r, ok := p.TokenRole(tok); ok {
			t.Errorf("TokenRole(%q) = %v: an unknown token has a role", tok, r)
		}
	}
	if c, tk := p.Counts(); c != 4 || tk != 2 {
		t.Errorf("Counts = %d, %d", c, tk)
	}
	// Both fields are optional.
	for _, s := range []string{`{}`, `{"certs": {}}`, ` {"tokens": {}} ` + "\n"} {
		if _, err := Parse([]byte(s)); err != nil {
			t.Errorf("Parse(%s): %v", s, err)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	h := HashToken("t")
	for _, c := range []struct{ in, want string }{
		{``, "want a JSON object"},
		{`[]`, "want a JSON object"},
		{`{"certs": {"a": "root"}}`, `unknown role "root"`},
		{`{"certs": {"a": "Admin"}}`, `unknown role "Admin"`},
		{`{"certs": {"a": "open"}}`, `unknown role "open"`},
		{`{"certs": {"a": 1}}`, "want a role name"},
		{`{"certs": {"a": null}}`, "want a role name"},
		{`{"certs": {"": "admin"}}`, "empty certificate name"},
		{`{"certs": {"a": "admin", "a": "read-only"}}`, `certs: "a" appears twice`},
		{`{"certs": {}, "certs": {}}`, `"certs" appears twice`},
		{`{"tokens": {"secret-token": "admin"}}`, `never the token itself`},
		{`{"tokens": {"sha256:abcd": "admin"}}`, `64 hex digits`},
		{`{"tokens": {"sha256:` + strings.Repeat("g", 64) + `": "admin"}}`, `invalid byte`},
		{`{"tokens": {"` + h + `": "admin", "sha256:` + strings.ToUpper(h[7:]) + `": "read-only"}}`, "appears twice"},
		{`{"roles": {}}`, `unknown field "roles"`},
		{`{"certs": {"a": "admin"}, "extra": 1}`, `unknown field "extra"`},
		{`{"certs": []}`, "want an object"},
		{`{"certs": {"a": "admin"}`, "EOF"},
		{`{"certs": {"a": "admin"}} {}`, "trailing data"},
		{`{"certs": {"a": "admin"}} x`, "trailing data"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v; want an ErrPolicy mentioning %q", c.in, err, c.want)
		}
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "auth.json")
	if _, err := Load(name); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("Load of a missing file: %v", err)
	}
	os.WriteFile(name, []byte(`{"certs": {"a": "superuser"}}`), 0o600)
	if _, err := Load(name); err == nil || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), "superuser") {
		t.Fatalf("Load of a bad file: %v", err)
	}
	os.WriteFile(name, []byte(`{"tokens": {"`+HashToken("x")+`": "admin"}}`), 0o600)
	p, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p.TokenRole("x"); !ok || r != Admin {
		t.Fatalf("TokenRole = %v, %v", r, ok)
	}
}

func TestHashToken(t *testing.T) {
	// sha256("test"), as `printf %s test | sha256sum` prints it.
	if got, want := HashToken("test"), "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"; got != want {
		t.Fatalf("HashToken = %s, want %s", got, want)
	}
}

// FuzzParse: no input panics, and an accepted policy has only known roles.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"certs": {"a": "admin"}, "tokens": {"` + HashToken("t") + `": "read-only"}}`))
	f.Add([]byte(`{"certs": {"a": "admin", "a": "peer"}}`))
	f.Add([]byte(`{"tokens": {"sha256:00": "x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		for _, r := range p.certs {
			if r < ReadOnly || r > Peer {
				t.Fatalf("role %v accepted", r)
			}
		}
		for _, r := range p.tokens {
			if r < ReadOnly || r > Peer {
				t.Fatalf("role %v accepted", r)
			}
		}
	})
}
