package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/memberlist"
)

// MetaMaxSize is the largest encoded Meta memberlist will gossip. memberlist
// panics if its delegate returns more, so New checks it first.
const MetaMaxSize = memberlist.MetaMaxSize

// metaFormatV1 is the first byte of every encoded Meta. See doc.go.
const metaFormatV1 = 1

// Flag bits of the second byte of an encoded Meta. Readers ignore bits they
// do not know; writers leave them zero.
const (
	flagLeaving  = 1 << 0 // the node has announced a graceful leave
	flagNonVoter = 1 << 1 // Meta.NonVoter
)

var (
	// ErrInvalidMeta is wrapped by every error about malformed metadata,
	// whether built locally or received from a peer.
	ErrInvalidMeta = errors.New("membership: invalid node metadata")
	// ErrMetaTooLarge means the encoded metadata exceeds MetaMaxSize.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
)

// Meta is what a node gossips about itself.
type Meta struct {
	// ID is the node's raft server ID; it is also its memberlist node name,
	// so it is unique in the cluster. Required.
	ID string
	// RaftAddr is the host:port raft peers dial. Required.
	RaftAddr string
	// GRPCAddr is the host:port of the node's gRPC API. Optional; when set it
	// must be a host:port.
	GRPCAddr string
	// Version is the node's cluster protocol version, for rolling upgrades.
	Version int
	// NonVoter asks the leader to keep this node a non-voter (a read
	// replica): it is added to the configuration but never promoted, and
	// demoted if it is a voter.
	NonVoter bool
	// Incarnation identifies one run of the node: a later run of a node
	// gossips a larger one (package cluster uses the start time in
	// milliseconds, above any it recorded before). A leader does not re-add
	// a node it removed for leaving gracefully until gossip shows it with a
	// larger Incarnation (Input.Departed). Zero means unknown (a node of an
	// older version): such a member is never held back.
	Incarnation uint64
	// ClusterID is the ID of the cluster the node's data directory belongs
	// to ("" for an empty directory that has not joined one yet, or a node
	// of an older version). Discovery refuses members whose ClusterID is
	// set and differs from its own (both set): two clusters never merge,
	// and a node pointed at the wrong cluster is never taken over.
	ClusterID string
}

// Validate reports whether m can be gossiped: required fields set, addresses
// well formed, and the encoding within MetaMaxSize.
func (m Meta) Validate() error {
	if m.ID == "" {
		return fmt.Errorf("%w: empty ID", ErrInvalidMeta)
	}
	if err := checkHostPort("raft address", m.RaftAddr); err != nil {
		return err
	}
	if m.GRPCAddr != "" {
		if err := checkHostPort("gRPC address", m.GRPCAddr); err != nil {
			return err
		}
	}
	if n := m.encodedSize(); n > MetaMaxSize {
		return fmt.Errorf("%w: %d bytes encoded, limit %d", ErrMetaTooLarge, n, MetaMaxSize)
	}
	return nil
}

func checkHostPort(what, addr string) error {
	if addr == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidMeta, what)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalidMeta, what, addr, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("%w: %s %q needs a host and a port", ErrInvalidMeta, what, addr)
	}
	return nil
}

func (m Meta) encodedSize() int {
	return 2 +
		uvarintLen(uint64(len(m.ID))) + len(m.ID) +
		uvarintLen(uint64(len(m.RaftAddr))) + len(m.RaftAddr) +
		uvarintLen(uint64(len(m.GRPCAddr))) + len(m.GRPCAddr) +
		varintLen(int64(m.Version)) +
		uvarintLen(m.Incarnation) + clusterIDSize(m.ClusterID)
}

func clusterIDSize(id string) int {
	if id == "" {
		return 0
	}
	return uvarintLen(uint64(len(id))) + len(id)
}

// encodeMeta returns the wire form of m (doc.go) with the leaving flag as
// given. It does not validate m.
func encodeMeta(m Meta, leaving bool) []byte {
	buf := make([]byte, 0, m.encodedSize())
	var flags byte
	if leaving {
		flags |= flagLeaving
	}
	if m.NonVoter {
		flags |= flagNonVoter
	}
	buf = append(buf, metaFormatV1, flags)
	for _, s := range [...]string{m.ID, m.RaftAddr, m.GRPCAddr} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	buf = binary.AppendVarint(buf, int64(m.Version))
	buf = binary.AppendUvarint(buf, m.Incarnation)
	if m.ClusterID == "" {
		return buf // as before ClusterID existed
	}
	buf = binary.AppendUvarint(buf, uint64(len(m.ClusterID)))
	return append(buf, m.ClusterID...)
}

// decodeMeta parses and validates the wire form of a Meta. Bytes after the
// known fields are an extension area for later versions and are ignored.
// Every error wraps ErrInvalidMeta; decodeMeta never panics on any input.
func decodeMeta(buf []byte) (m Meta, leaving bool, err error) {
	if len(buf) < 2 {
		return Meta{}, false, fmt.Errorf("%w: %d bytes, need at least 2", ErrInvalidMeta, len(buf))
	}
	if buf[0] != metaFormatV1 {
		return Meta{}, false, fmt.Errorf("%w: unknown format version %d", ErrInvalidMeta, buf[0])
	}
	flags := buf[1]
	rest := buf[2:]
	var fields [3]string
	for i, name := range [...]string{"ID", "raft address", "gRPC address"} {
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return Meta{}, false, fmt.Errorf("%w: bad length of %s", ErrInvalidMeta, name)
		}
		rest = rest[k:]
		if n > uint64(len(rest)) {
			return Meta{}, false, fmt.Errorf("%w: %s length %d exceeds the remaining %d bytes", ErrInvalidMeta, name, n, len(rest))
		}
		fields[i] = string(rest[:n])
		rest = rest[n:]
	}
	v, k := binary.Varint(rest)
	if k <= 0 {
		return Meta{}, false, fmt.Errorf("%w: bad version", ErrInvalidMeta)
	}
	if int64(int(v)) != v {
		return Meta{}, false, fmt.Errorf("%w: version %d out of range", ErrInvalidMeta, v)
	}
	rest = rest[k:]
	// Incarnation is the first field of the extension area: metadata from
	// a node of an older version ends before it (Incarnation 0).
	var inc uint64
	if len(rest) > 0 {
		if inc, k = binary.Uvarint(rest); k <= 0 {
			return Meta{}, false, fmt.Errorf("%w: bad incarnation", ErrInvalidMeta)
		}
		rest = rest[k:]
	}
	// ClusterID follows, in the extension area too: metadata that ends
	// before it has none.
	var clusterID string
	if len(rest) > 0 {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return Meta{}, false, fmt.Errorf("%w: bad cluster ID", ErrInvalidMeta)
		}
		clusterID = string(rest[k : k+int(n)])
	}
	m = Meta{
		ID:          fields[0],
		RaftAddr:    fields[1],
		GRPCAddr:    fields[2],
		Version:     int(v),
		NonVoter:    flags&flagNonVoter != 0,
		Incarnation: inc,
		ClusterID:   clusterID,
	}
	if err := m.Validate(); err != nil {
		return Meta{}, false, err
	}
	return m, flags&flagLeaving != 0, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
