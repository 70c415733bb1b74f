package membership

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrShutdown is returned by methods called after Shutdown.
var ErrShutdown = errors.New("membership: discovery is shut down")

// Profile selects memberlist's timings.
type Profile int

const (
	// ProfileLAN is memberlist.DefaultLANConfig: for real networks.
	ProfileLAN Profile = iota
	// ProfileLocal is memberlist.DefaultLocalConfig: faster probes and
	// shorter timeouts, for loopback clusters and tests.
	ProfileLocal
)

// DefaultTombstoneRetention is how long Discovery remembers dead and left
// members when Config.TombstoneRetention is zero (serf's reconnect timeout).
const DefaultTombstoneRetention = 72 * time.Hour

// Config configures a Discovery.
type Config struct {
	// Meta is what this node gossips; Meta.ID is its memberlist node name.
	Meta Meta
	// BindAddr is the gossip listen IP; default "0.0.0.0".
	BindAddr string
	// BindPort is the gossip listen port (TCP and UDP). Zero picks a free
	// port; LocalAddr reports it.
	BindPort int
	// AdvertiseAddr and AdvertisePort are what peers dial; by default the
	// bind address (or a private IP when binding to all interfaces) and the
	// bind port.
	AdvertiseAddr string
	AdvertisePort int
	// Profile selects memberlist's timings; default ProfileLAN.
	Profile Profile
	// SecretKey, if set (16, 24 or 32 bytes), encrypts and authenticates
	// gossip. Every member needs the same key.
	SecretKey []byte
	// Keys are further keys the node accepts gossip encrypted with (a key
	// rotation in progress, keyring.go); used only with SecretKey, which
	// stays the key the node encrypts with.
	Keys [][]byte
	// Label, if set, is attached to every gossip packet; members with a
	// different label ignore them, so two clusters on one network never merge.
	Label string
	// TombstoneRetention is how long a dead or left member stays in Members
	// after its state change; default DefaultTombstoneRetention. It should
	// exceed Policy.FailedGracePeriod, or a failed member that is forgotten
	// becomes "unknown" and its grace period starts again.
	TombstoneRetention time.Duration
	// Logger receives memberlist's log lines at matching levels; nil
	// discards them.
	Logger *slog.Logger
	// Now is the clock for Member.StateChangedAt; default time.Now.
	Now func() time.Time
	// Tune, if set, is called last on the memberlist configuration (tests
	// shorten timings with it). It must not replace Name, Delegate, Events,
	// Alive, Merge or Conflict.
	Tune func(*memberlist.Config)
	// OnRefuse, if set, is told of every member Discovery refuses: one of
	// another cluster (Meta.ClusterID), or one that claims this node's ID
	// or another member's from another address. It is called from
	// memberlist's goroutines with its locks held: it must return at once
	// and must not call into Discovery.
	OnRefuse func(*RefusedError)
}

// ErrOtherCluster is wrapped by Join's error when a seed belongs to
// another cluster than this node (Meta.ClusterID).
var ErrOtherCluster = errors.New("membership: another cluster")

// RefusedError describes a member Discovery refused.
type RefusedError struct {
	// Duplicate: the member claims an ID that a node at another address
	// holds (Existing); else it belongs to another cluster.
	Duplicate bool
	// Node is the member's ID (memberlist name), Addr its gossip address,
	// Meta what it gossips (zero if it could not be decoded).
	Node, Addr string
	Meta       Meta
	// Local is this node's cluster ID (another-cluster refusals).
	Local string
	// Existing is the gossip address of the node that holds the ID
	// (duplicates), and ExistingMeta what it gossips; Self is set when
	// that node is this one.
	Existing     string
	ExistingMeta Meta
	Self         bool
}

func (e *RefusedError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("membership: two nodes claim the ID %q: one at %s, one at %s (each node needs its own --id)", e.Node, e.Existing, e.Addr)
	}
	return fmt.Sprintf("membership: member %s at %s belongs to cluster %s, this node to cluster %s: refused (a data directory belongs to one cluster; an empty one joins any)",
		e.Node, e.Addr, e.Meta.ClusterID, e.Local)
}

// Unwrap makes an another-cluster refusal match ErrOtherCluster.
func (e *RefusedError) Unwrap() error {
	if e.Duplicate {
		return nil
	}
	return ErrOtherCluster
}

// Discovery gossips this node's Meta with memberlist and tracks every member's
// state, telling a graceful leave (StateLeft) from a failure (StateDead).
//
// memberlist cannot tell them apart for us: the *memberlist.Node it passes to
// NotifyLeave always carries State == StateAlive, because memberlist keeps the
// real state in a field of its private nodeState that shadows Node.State
// (hashicorp/memberlist#293, fix proposed in #321). So Leave first gossips the
// intent in the node's metadata (flag "leaving", doc.go) and waits for that
// broadcast, then leaves; peers classify a NotifyLeave as StateLeft when the
// last metadata they saw carried the flag (or when a memberlist with #321
// reports StateLeft), and as StateDead otherwise. A leave whose intent was
// lost is seen as a failure: the safe direction, it waits for the grace
// period.
//
// Lock order: memberlist's internal locks, then d.mu. memberlist calls the
// event delegate with its node lock held, so nothing may call into memberlist
// while holding d.mu. d.lifeMu is taken before memberlist's locks.
type Discovery struct {
	id        string
	now       func() time.Time
	logger    *slog.Logger
	retention time.Duration
	ml        *memberlist.Memberlist // set once by New
	// keyring is memberlist's keyring, nil if gossip is not encrypted
	// (keyring.go).
	keyring *memberlist.Keyring

	// changes has capacity one; a pending value means "membership changed
	// since you last looked". Never closed: memberlist may deliver a late
	// event after Shutdown.
	changes chan struct{}

	// meta is this node's Meta; localMeta its current encoding, read by
	// memberlist through NodeMeta.
	meta      Meta
	localMeta atomic.Pointer[[]byte]

	isShutdown atomic.Bool

	// clusterID is Meta.ClusterID as it is now (SetClusterID), read by the
	// delegates that refuse members of other clusters.
	clusterID atomic.Pointer[string]
	onRefuse  func(*RefusedError)
	// joinRefusal is the first refusal of another cluster's member seen
	// while Join runs: Join returns it.
	joinRefusal atomic.Pointer[RefusedError]
	joining     atomic.Bool

	// lifeMu serializes Leave and Shutdown: memberlist panics on a Leave
	// after Shutdown.
	lifeMu sync.Mutex
	left   bool // REQUIRES: lifeMu held

	mu struct {
		sync.Mutex
		// members holds one entry per memberlist node name ever seen, minus
		// tombstones older than the retention.
		members map[string]*entry
	}
}

// entry is the tracked state of one memberlist node.
type entry struct {
	member Member
	// metaErr is why the node's metadata could not be decoded; such a node
	// (a foreign process on the gossip port, or a newer format) is left out
	// of Members.
	metaErr error
}

// New starts gossiping on the configured address. The node is a cluster of
// one until Join.
func New(cfg Config) (*Discovery, error) {
	if err := cfg.Meta.Validate(); err != nil {
		return nil, err
	}
	d := &Discovery{
		id:        cfg.Meta.ID,
		now:       cfg.Now,
		logger:    cfg.Logger,
		retention: cfg.TombstoneRetention,
		changes:   make(chan struct{}, 1),
		meta:      cfg.Meta,
		onRefuse:  cfg.OnRefuse,
	}
	cid := cfg.Meta.ClusterID
	d.clusterID.Store(&cid)
	if d.now == nil {
		d.now = time.Now
	}
	if d.logger == nil {
		d.logger = slog.New(slog.DiscardHandler)
	}
	if d.retention <= 0 {
		d.retention = DefaultTombstoneRetention
	}
	d.mu.members = make(map[string]*entry)
	buf := encodeMeta(cfg.Meta, false)
	d.localMeta.Store(&buf)

	var mc *memberlist.Config
	switch cfg.Profile {
	case ProfileLAN:
		mc = memberlist.DefaultLANConfig()
	case ProfileLocal:
		mc = memberlist.DefaultLocalConfig()
	default:
		return nil, fmt.Errorf("membership: unknown profile %d", cfg.Profile)
	}
	mc.Name = cfg.Meta.ID
	if cfg.BindAddr != "" {
		mc.BindAddr = cfg.BindAddr
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	if cfg.AdvertisePort == 0 {
		mc.AdvertisePort = cfg.BindPort
	}
	if len(cfg.SecretKey) > 0 {
		kr, err := memberlist.NewKeyring(cfg.Keys, cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("membership: gossip keyring: %w", err)
		}
		mc.Keyring, d.keyring = kr, kr
	} else if len(cfg.Keys) > 0 {
		return nil, errors.New("membership: gossip keys without a primary key (SecretKey)")
	}
	mc.Label = cfg.Label
	mc.Delegate = (*delegate)(d)
	mc.Events = (*eventDelegate)(d)
	mc.Alive = (*aliveDelegate)(d)
	mc.Merge = (*mergeDelegate)(d)
	mc.Conflict = (*conflictDelegate)(d)
	mc.Logger = log.New(logWriter{d.logger}, "", 0)
	mc.LogOutput = nil
	if cfg.Tune != nil {
		cfg.Tune(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: starting gossip on %s: %w",
			net.JoinHostPort(mc.BindAddr, fmt.Sprint(cfg.BindPort)), err)
	}
	d.ml = ml
	return d, nil
}

// Join contacts the seeds (host:port gossip addresses) once each and merges
// their view of the cluster. It returns how many seeds answered; the error is
// nil if at least one did. Retrying with backoff is the caller's job.
func (d *Discovery) Join(seeds []string) (int, error) {
	if d.isShutdown.Load() {
		return 0, ErrShutdown
	}
	if len(seeds) == 0 {
		return 0, errors.New("membership: join: no seeds")
	}
	d.joinRefusal.Store(nil)
	d.joining.Store(true)
	n, err := d.ml.Join(seeds)
	d.joining.Store(false)
	if r := d.joinRefusal.Load(); r != nil {
		return 0, fmt.Errorf("membership: join %s: %w", strings.Join(seeds, ","), r)
	}
	if err != nil {
		return n, fmt.Errorf("membership: join %s: %w", strings.Join(seeds, ","), err)
	}
	return n, nil
}

// SetClusterID sets this node's Meta.ClusterID (once a node learns the
// cluster it belongs to) and gossips it, waiting up to timeout for the
// broadcast. From then on members of other clusters are refused.
func (d *Discovery) SetClusterID(id string, timeout time.Duration) error {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.isShutdown.Load() {
		return ErrShutdown
	}
	d.meta.ClusterID = id
	if err := d.meta.Validate(); err != nil {
		return err
	}
	d.clusterID.Store(&id)
	buf := encodeMeta(d.meta, d.left)
	d.localMeta.Store(&buf)
	return d.ml.UpdateNode(timeout)
}

// refusesCluster returns the refusal of a member whose metadata buf names
// another cluster than this node's, nil if it is not refused (either
// cluster ID unset, or they are equal; metadata that does not decode is
// left to observe).
func (d *Discovery) refusesCluster(name, addr string, buf []byte) *RefusedError {
	local := *d.clusterID.Load()
	if local == "" {
		return nil
	}
	m, _, err := decodeMeta(buf)
	if err != nil || m.ClusterID == "" || m.ClusterID == local {
		return nil
	}
	return &RefusedError{Node: name, Addr: addr, Meta: m, Local: local}
}

func (d *Discovery) refused(r *RefusedError) {
	if d.onRefuse != nil {
		d.onRefuse(r)
	}
}

// LocalAddr returns the gossip host:port peers reach this node at, for use
// as another node's seed.
func (d *Discovery) LocalAddr() string {
	return d.ml.LocalNode().Address()
}

// ID returns this node's ID (Config.Meta.ID).
func (d *Discovery) ID() string { return d.id }

// Members returns every member this node knows of, itself included, dead and
// left ones until their tombstone expires, sorted by ID.
func (d *Discovery) Members() []Member {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Member, 0, len(d.mu.members))
	for name, e := range d.mu.members {
		if e.member.State == StateDead || e.member.State == StateLeft {
			if now.Sub(e.member.StateChangedAt) > d.retention {
				delete(d.mu.members, name)
				continue
			}
		}
		if e.metaErr == nil {
			out = append(out, e.member)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Changes returns a channel that receives a value after the membership
// changes (a join, a leave or failure, a metadata update). Notifications
// coalesce: one value may stand for many changes, so read Members after
// each. The channel is never closed.
func (d *Discovery) Changes() <-chan struct{} { return d.changes }

// Leave announces a graceful leave and then leaves the cluster, so peers see
// this node as StateLeft rather than StateDead. It waits up to timeout for
// each of the two broadcasts to go out (timeout <= 0 waits without bound).
// The node keeps answering gossip until Shutdown; calling Leave again does
// nothing.
func (d *Discovery) Leave(timeout time.Duration) error {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.isShutdown.Load() {
		return ErrShutdown
	}
	if d.left {
		return nil
	}
	d.left = true
	buf := encodeMeta(d.meta, true)
	d.localMeta.Store(&buf)
	// Wait until the leaving flag is out before the dead message: a newer
	// message about this node would invalidate it in memberlist's queue.
	errIntent := d.ml.UpdateNode(timeout)
	if errIntent != nil {
		errIntent = fmt.Errorf("membership: announcing leave: %w", errIntent)
	}
	errLeave := d.ml.Leave(timeout)
	if errLeave != nil {
		errLeave = fmt.Errorf("membership: leave: %w", errLeave)
	}
	return errors.Join(errIntent, errLeave)
}

// Shutdown stops gossip without leaving: peers see this node fail. Call
// Leave first for a graceful exit. Shutdown is idempotent.
func (d *Discovery) Shutdown() error {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.isShutdown.Swap(true) {
		return nil
	}
	if err := d.ml.Shutdown(); err != nil {
		return fmt.Errorf("membership: shutdown: %w", err)
	}
	return nil
}

func (d *Discovery) notify() {
	select {
	case d.changes <- struct{}{}:
	default:
	}
}

// observe records an event about node n. Called by memberlist with its node
// lock held: it must not call into memberlist.
func (d *Discovery) observe(n *memberlist.Node, state State) {
	now := d.now()
	m, leaving, err := decodeMeta(n.Meta)
	if err == nil && m.ID != n.Name {
		err = fmt.Errorf("%w: ID %q differs from node name %q", ErrInvalidMeta, m.ID, n.Name)
	}
	d.mu.Lock()
	e, ok := d.mu.members[n.Name]
	if !ok {
		e = &entry{}
		d.mu.members[n.Name] = e
	}
	prevErr := e.metaErr
	if err == nil {
		e.member.Meta = m
		e.member.Leaving = leaving
	}
	e.metaErr = err
	if state == StateDead && (n.State == memberlist.StateLeft || e.member.Leaving) {
		state = StateLeft
	}
	if !ok || e.member.State != state {
		e.member.State = state
		e.member.StateChangedAt = now
	}
	e.member.Addr = n.Address()
	d.mu.Unlock()

	if err != nil && (prevErr == nil || prevErr.Error() != err.Error()) {
		d.logger.Warn("membership: ignoring member with unusable metadata", "node", n.Name, "addr", n.Address(), "err", err)
	}
	d.notify()
}

// delegate implements memberlist.Delegate.
type delegate Discovery

func (g *delegate) NodeMeta(limit int) []byte {
	buf := *(*Discovery)(g).localMeta.Load()
	if len(buf) > limit {
		// Unreachable: New validated the size against MetaMaxSize, which
		// is the limit memberlist passes.
		panic(fmt.Sprintf("membership: encoded meta of %d bytes exceeds memberlist limit %d", len(buf), limit))
	}
	return buf
}
func (g *delegate) NotifyMsg([]byte)                           {}
func (g *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *delegate) LocalState(join bool) []byte                { return nil }
func (g *delegate) MergeRemoteState(buf []byte, join bool)     {}

// aliveDelegate implements memberlist.AliveDelegate: alive messages about
// members of another cluster are dropped.
type aliveDelegate Discovery

func (g *aliveDelegate) NotifyAlive(n *memberlist.Node) error {
	d := (*Discovery)(g)
	if r := d.refusesCluster(n.Name, n.Address(), n.Meta); r != nil {
		d.refused(r)
		return r
	}
	return nil
}

// mergeDelegate implements memberlist.MergeDelegate: a push-pull (a join,
// or anti-entropy) with a node of another cluster is cancelled on both
// sides.
type mergeDelegate Discovery

func (g *mergeDelegate) NotifyMerge(peers []*memberlist.Node) error {
	d := (*Discovery)(g)
	for _, n := range peers {
		if r := d.refusesCluster(n.Name, n.Address(), n.Meta); r != nil {
			if d.joining.Load() {
				d.joinRefusal.CompareAndSwap(nil, r)
			}
			d.refused(r)
			return r
		}
	}
	return nil
}

// conflictDelegate implements memberlist.ConflictDelegate: memberlist
// keeps the node it knew and ignores the other; Discovery reports both.
type conflictDelegate Discovery

func (g *conflictDelegate) NotifyConflict(existing, other *memberlist.Node) {
	d := (*Discovery)(g)
	r := &RefusedError{Duplicate: true, Node: other.Name, Addr: other.Address(), Existing: existing.Address(), Self: existing.Name == d.id}
	r.Meta, _, _ = decodeMeta(other.Meta)
	r.ExistingMeta, _, _ = decodeMeta(existing.Meta)
	d.refused(r)
}

// eventDelegate implements memberlist.EventDelegate. memberlist reuses the
// *Node it passes, so observe copies what it keeps.
type eventDelegate Discovery

func (g *eventDelegate) NotifyJoin(n *memberlist.Node) { (*Discovery)(g).observe(n, StateAlive) }
func (g *eventDelegate) NotifyLeave(n *memberlist.Node) {
	(*Discovery)(g).observe(n, StateDead) // observe turns it into StateLeft when due
}
func (g *eventDelegate) NotifyUpdate(n *memberlist.Node) { (*Discovery)(g).observe(n, StateAlive) }

// logWriter routes memberlist's log lines ("[WARN] memberlist: ...") to slog
// at the matching level.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, lv := range [...]struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
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
