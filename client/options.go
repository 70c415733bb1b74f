package client

import (
	"fmt"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// Consistency is how a read is served.
type Consistency int

const (
	// Linearizable reads (the default) reflect every write acknowledged
	// before the read began: the leader confirms its leadership with a
	// quorum and waits until it has applied everything committed, then
	// reads.
	Linearizable Consistency = iota
	// Serializable reads are served by any node from its local state,
	// which may be stale (behind the leader), but never shows a write
	// that is not committed. Cheaper, and available without a quorum.
	Serializable
)

func (c Consistency) String() string {
	switch c {
	case Linearizable:
		return "linearizable"
	case Serializable:
		return "serializable"
	}
	return fmt.Sprintf("Consistency(%d)", int(c))
}

// ParseConsistency parses "linearizable" or "serializable" (any case; "l"
// and "s" too).
func ParseConsistency(s string) (Consistency, error) {
	switch strings.ToLower(s) {
	case "linearizable", "l", "":
		return Linearizable, nil
	case "serializable", "s":
		return Serializable, nil
	}
	return 0, fmt.Errorf("consistency %q: want linearizable or serializable", s)
}

func (c Consistency) proto() cairnpb.Consistency {
	if c == Serializable {
		return cairnpb.Consistency_SERIALIZABLE
	}
	return cairnpb.Consistency_LINEARIZABLE
}

// opKind is a set of calls, the calls an Option applies to.
type opKind uint32

const (
	kindGet opKind = 1 << iota
	kindScan
	kindPut
	kindDelete
	kindDeleteRange
	kindStatus
	kindSnapshot
	kindBackup
	kindAddMember
	kindRemoveMember
	kindMembers
)

var kindNames = []string{"Get", "Scan", "Put", "Delete", "DeleteRange", "Status", "Snapshot", "Backup", "AddMember", "RemoveMember", "Members"}

func (k opKind) String() string {
	var names []string
	for i, n := range kindNames {
		if k&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// An Option modifies one call. Each applies to some calls only (its
// documentation says which); passing it to another call fails with
// ErrInvalidArgument rather than being silently ignored.
type Option struct {
	name    string
	applies opKind
	set     func(*callOptions)
}

// callOptions are the options of one call, after applying Options.
type callOptions struct {
	consistency Consistency
	prevKV      bool
	prefix      []byte
	hasPrefix   bool
	limit       int
	pageSize    int
	pageTimeout time.Duration
	reverse     bool
	keysOnly    bool
	endpoint    string
	progress    func(BackupProgress)
	nonVoter    bool
	prevIndex   uint64
}

// applyOptions applies opts for a call of kind k.
func applyOptions(op string, k opKind, opts []Option) (callOptions, error) {
	var o callOptions
	for _, opt := range opts {
		if opt.set == nil {
			continue
		}
		if opt.applies&k == 0 {
			return o, invalidArg(op, "option %s does not apply to %s (only to %s)", opt.name, k, opt.applies)
		}
		opt.set(&o)
	}
	return o, nil
}

// WithConsistency sets a read's consistency (Get, Scan). The default is
// Linearizable.
func WithConsistency(c Consistency) Option {
	return Option{"WithConsistency", kindGet | kindScan, func(o *callOptions) { o.consistency = c }}
}

// WithSerializable is WithConsistency(Serializable).
func WithSerializable() Option { return WithConsistency(Serializable) }

// WithPrevKV asks for the key's previous KeyValue (Put, Delete, and the
// Txn operations OpPut and OpDelete).
func WithPrevKV() Option {
	return Option{"WithPrevKV", kindPut | kindDelete, func(o *callOptions) { o.prevKV = true }}
}

// WithPrefix selects the keys with the given prefix instead of a range
// (Scan, DeleteRange, OpDeleteRange); start and end must then be nil. An
// empty prefix selects every key.
func WithPrefix(prefix []byte) Option {
	return Option{"WithPrefix", kindScan | kindDeleteRange, func(o *callOptions) { o.prefix, o.hasPrefix = prefix, true }}
}

// WithLimit stops a Scan after n keys (n <= 0: no limit).
func WithLimit(n int) Option {
	return Option{"WithLimit", kindScan, func(o *callOptions) { o.limit = n }}
}

// WithPageSize sets how many keys a Scan fetches per request (default
// cairnpb.DefaultScanLimit, at most cairnpb.MaxScanLimit). Pages also end
// after about cairnpb.MaxScanPageBytes of data.
func WithPageSize(n int) Option {
	return Option{"WithPageSize", kindScan, func(o *callOptions) { o.pageSize = n }}
}

// WithPageTimeout bounds each page a Scan fetches, retries included,
// instead of (or within) the Scan's context: a scan of any length
// succeeds as long as every page arrives within d. The Scan's context
// still bounds the whole scan; without WithPageTimeout a context with no
// deadline gives each page Config.RequestTimeout. d <= 0: no page bound.
func WithPageTimeout(d time.Duration) Option {
	return Option{"WithPageTimeout", kindScan, func(o *callOptions) { o.pageTimeout = d }}
}

// WithReverse makes a Scan go from the end of its range to its start.
func WithReverse() Option {
	return Option{"WithReverse", kindScan, func(o *callOptions) { o.reverse = true }}
}

// WithKeysOnly makes a Scan return keys and metadata without values.
func WithKeysOnly() Option {
	return Option{"WithKeysOnly", kindScan, func(o *callOptions) { o.keysOnly = true }}
}

// WithEndpoint sends the call to one node (a gRPC address, dialed if it is
// not an endpoint already) without trying others: Status, Snapshot and
// Backup describe, snapshot or copy that node; a Serializable Get or Scan
// reads its local state. With a Linearizable read the node forwards to the
// leader as usual.
func WithEndpoint(addr string) Option {
	return Option{"WithEndpoint", kindGet | kindScan | kindStatus | kindSnapshot | kindBackup | kindMembers,
		func(o *callOptions) { o.endpoint = addr }}
}

// WithProgress makes Backup report its progress after every chunk it
// writes.
func WithProgress(f func(BackupProgress)) Option {
	return Option{"WithProgress", kindBackup, func(o *callOptions) { o.progress = f }}
}

// AsNonVoter makes AddMember add the server without a vote (a replica that
// receives the log but does not count for quorum).
func AsNonVoter() Option {
	return Option{"AsNonVoter", kindAddMember, func(o *callOptions) { o.nonVoter = true }}
}

// IfConfigIndex makes AddMember or RemoveMember fail with
// ErrFailedPrecondition unless the raft configuration is still the one at
// index (as returned by Members).
func IfConfigIndex(index uint64) Option {
	return Option{"IfConfigIndex", kindAddMember | kindRemoveMember, func(o *callOptions) { o.prevIndex = index }}
}
