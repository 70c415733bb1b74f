package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Role is what an identity may do, and what a method needs. Roles are
// ordered: each allows everything the ones below it allow.
type Role int

const (
	// Open is the requirement of a method that needs no identity (health
	// checks). It is never an identity's role.
	Open Role = iota
	// ReadOnly reads keys and the cluster's status and members.
	ReadOnly
	// ReadWrite also writes keys.
	ReadWrite
	// Admin also changes the cluster: membership, leadership, snapshots,
	// backups, traces, gossip keys.
	Admin
	// Peer is another node of the cluster: it may also call the internal
	// node-to-node methods (read confirmation). Nodes forward clients'
	// requests as peers.
	Peer
)

var roleNames = [...]string{Open: "open", ReadOnly: "read-only", ReadWrite: "read-write", Admin: "admin", Peer: "peer"}

func (r Role) String() string {
	if r >= 0 && int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses the name of a role an identity can have: read-only,
// read-write, admin or peer.
func ParseRole(s string) (Role, error) {
	for r := ReadOnly; r <= Peer; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown role %q (want read-only, read-write, admin or peer)", s)
}

// TokenHashPrefix starts every token hash in a policy file.
const TokenHashPrefix = "sha256:"

// HashToken returns the policy file's form of a bearer token:
// "sha256:" and the hex SHA-256 of the token's bytes (what
// `printf %s "$TOKEN" | sha256sum` prints).
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return TokenHashPrefix + hex.EncodeToString(h[:])
}

// Policy maps identities to roles. The zero value knows no identity (only
// peers get in). It is immutable once parsed, safe for concurrent use.
type Policy struct {
	// certs maps a certificate name (CN, DNS SAN or URI SAN) to its role.
	certs map[string]Role
	// tokens maps the SHA-256 of a bearer token to its role.
	tokens map[[sha256.Size]byte]Role
}

// Load reads and parses the policy file name (see Parse).
func Load(name string) (*Policy, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("auth: policy file: %w", err)
	}
	p, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("auth: policy file %s: %w", name, err)
	}
	return p, nil
}

// ErrPolicy is wrapped by every error about a policy's contents.
var ErrPolicy = errors.New("invalid policy")

// Parse parses a policy (the package documentation shows the format). It
// refuses, naming the entry: anything but one JSON object with the
// optional fields "certs" and "tokens", each an object of strings; an
// unknown role; a token key that is not "sha256:" and 64 hex digits; an
// empty certificate name; the same identity twice (a token hash written
// in upper and lower case is the same identity); trailing data.
func Parse(data []byte) (*Policy, error) {
	p, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return p, nil
}

func parse(data []byte) (*Policy, error) {
	p := &Policy{certs: map[string]Role{}, tokens: map[[sha256.Size]byte]Role{}}
	bad := func(format string, args ...any) (*Policy, error) {
		return nil, fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("want a JSON object with \"certs\" and \"tokens\"")
	}
	seen := map[string]bool{}
	for dec.More() {
		field, err := stringToken(dec)
		if err != nil {
			return bad("%v", err)
		}
		if field != "certs" && field != "tokens" {
			return bad("unknown field %q (want \"certs\" and \"tokens\")", field)
		}
		if seen[field] {
			return bad("field %q appears twice", field)
		}
		seen[field] = true
		entries, err := readObject(dec)
		if err != nil {
			return bad("%s: %v", field, err)
		}
		for _, e := range entries {
			role, err := ParseRole(e.value)
			if err != nil {
				return bad("%s: %q: %v", field, e.key, err)
			}
			if field == "certs" {
				if e.key == "" {
					return bad("certs: empty certificate name")
				}
				if _, dup := p.certs[e.key]; dup {
					return bad("certs: %q appears twice", e.key)
				}
				p.certs[e.key] = role
				continue
			}
			h, err := parseTokenHash(e.key)
			if err != nil {
				return bad("tokens: %v", err)
			}
			if _, dup := p.tokens[h]; dup {
				return bad("tokens: %q appears twice", e.key)
			}
			p.tokens[h] = role
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("trailing data after the policy object")
	}
	return p, nil
}

type entry struct{ key, value string }

// readObject reads a JSON object of strings, in order (duplicates kept:
// the caller refuses them).
func readObject(dec *json.Decoder) ([]entry, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("want an object mapping names to roles")
	}
	var out []entry
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		v, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("%q: want a role name: %v", k, err)
		}
		out = append(out, entry{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v", tok)
	}
	return s, nil
}

// parseTokenHash parses "sha256:<64 hex digits>" (either case).
func parseTokenHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(s, TokenHashPrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return h, fmt.Errorf("%q: want %q and the 64 hex digits of the token's SHA-256, never the token itself", s, TokenHashPrefix)
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return h, fmt.Errorf("%q: want %q and the 64 hex digits of the token's SHA-256: %v", s, TokenHashPrefix, err)
	}
	return h, nil
}

// TokenRole returns the role of a bearer token, and whether the policy
// knows it. The token is looked up by its hash: the policy never holds
// it.
func (p *Policy) TokenRole(token string) (Role, bool) {
	r, ok := p.tokens[sha256.Sum256([]byte(token))]
	return r, ok
}

// CertRole returns the highest role the policy gives to any of names (a
// certificate's CN and SANs: its issuer vouches for all of them), the
// name that has it, and whether any is known.
func (p *Policy) CertRole(names []string) (Role, string, bool) {
	var best Role
	var who string
	for _, n := range names {
		if r, ok := p.certs[n]; ok && r > best {
			best, who = r, n
		}
	}
	return best, who, best != Open
}

// HasPeerToken reports whether the policy gives the role peer to the
// token (a node checks at start that its own peer token is one).
func (p *Policy) HasPeerToken(token string) bool {
	r, ok := p.TokenRole(token)
	return ok && r == Peer
}

// Counts returns how many certificate names and tokens the policy knows
// (for the node's start log).
func (p *Policy) Counts() (certs, tokens int) { return len(p.certs), len(p.tokens) }
