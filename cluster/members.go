package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/hashicorp/raft"
)

// watchMembers refreshes the member cache on every gossip change and wakes
// the loops that act on membership.
func (n *Node) watchMembers() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.disc.Changes():
			n.refreshMembers()
			poke(n.reconcilePoke)
			poke(n.bootstrapPoke)
		}
	}
}

func (n *Node) refreshMembers() {
	ms := n.disc.Members()
	m := make(map[string]membership.Member, len(ms))
	var peers []string
	for _, mem := range ms {
		m[mem.ID] = mem
		if mem.ID != n.cfg.ID && mem.State == membership.StateAlive && !mem.Leaving {
			peers = append(peers, mem.Addr)
			// Gossip sees the peer: reconnect now if gRPC waits out a
			// backoff from when it was down.
			if mem.GRPCAddr != "" && n.fwd.resetBackoff(mem.GRPCAddr) {
				n.log.Debug("cluster: peer back, reconnecting", "id", mem.ID, "addr", mem.GRPCAddr)
			}
		}
	}
	n.members.Store(&m)
	if len(peers) > 0 {
		slices.Sort(peers)
		if err := n.savePeers(peers); err != nil {
			n.log.Warn("cluster: saving gossip peers", "err", err)
		}
	}
}

// savePeers records the gossip addresses of the alive peers in the data
// directory, so that a restarted node rejoins them without --join (as
// serf's snapshot does). It writes only when the set changed.
// REQUIRES: called from one goroutine at a time (watchMembers, or Start
// before it).
func (n *Node) savePeers(peers []string) error {
	if slices.Equal(peers, n.savedPeers) {
		return nil
	}
	name := filepath.Join(n.cfg.DataDir, peersFileName)
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(peers, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	n.savedPeers = peers
	return nil
}

// loadPeers returns the gossip peers a previous run saved.
func loadPeers(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, peersFileName))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// member returns the gossip view of the node id.
func (n *Node) member(id string) (membership.Member, bool) {
	m, ok := (*n.members.Load())[id]
	return m, ok
}

// memberGRPCAddr returns the gRPC address node id gossips ("" if unknown).
// It does not check the member's gossip state: a caller asks for the
// address of the raft leader, which raft knows better than gossip (a
// UDP-only fault can make gossip declare a working node dead).
func (n *Node) memberGRPCAddr(id string) string {
	if id == n.cfg.ID {
		return n.grpcAddr
	}
	m, _ := n.member(id)
	return m.GRPCAddr
}

// joinLoop contacts the seeds (Config.Join and the peers a previous run
// saved) until one answers, backing off from 250ms to 10s between rounds.
func (n *Node) joinLoop(seeds []string) {
	defer n.wg.Done()
	backoff := 250 * time.Millisecond
	for {
		k, err := n.disc.Join(seeds)
		if err == nil {
			n.log.Info("cluster: joined gossip", "seeds_answered", k)
			return
		}
		if errors.Is(err, membership.ErrOtherCluster) {
			// Joining would hand this node's data directory to another
			// cluster: stop instead (clusterid.go).
			n.fail(fmt.Errorf("refusing to join: %w", err))
			return
		}
		n.log.Warn("cluster: joining gossip failed; retrying", "err", err, "in", backoff)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (n *Node) bootstrap(servers []raft.Server) error {
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	n.log.Info("cluster: bootstrapped a new cluster", "servers", strings.Join(ids, ","))
	return nil
}

// bootstrapLoop implements BootstrapExpect > 1: it waits until that many
// servers are alive in gossip; then the one with the lowest ID, having
// checked that none of them has raft state, bootstraps a configuration of
// all of them. The others wait for its log to reach them. The loop ends once
// this node has raft state (bootstrapped or added by a leader).
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := n.tryBootstrap()
		if err != nil {
			n.log.Warn("cluster: bootstrap attempt", "err", err)
		}
		if done {
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.bootstrapPoke:
		case <-t.C:
		}
	}
}

func (n *Node) hasRaftState() bool {
	return n.raft.LastIndex() > 0 || n.raft.CurrentTerm() > 0
}

func (n *Node) tryBootstrap() (done bool, err error) {
	if n.hasRaftState() {
		return true, nil
	}
	var alive []membership.Member
	for _, m := range *n.members.Load() {
		if m.State == membership.StateAlive && !m.Leaving && !m.NonVoter {
			alive = append(alive, m)
		}
	}
	if len(alive) < n.cfg.BootstrapExpect {
		return false, nil
	}
	slices.SortFunc(alive, func(a, b membership.Member) int { return strings.Compare(a.ID, b.ID) })
	if alive[0].ID != n.cfg.ID {
		return false, nil // the lowest ID bootstraps; wait for its log
	}
	// Consul's check: no server may already be part of a cluster.
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	servers := make([]raft.Server, 0, len(alive))
	for _, m := range alive {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
		if m.ID == n.cfg.ID {
			continue
		}
		st, err := n.peerStatus(ctx, m.ID, m.GRPCAddr)
		if err != nil {
			return false, fmt.Errorf("asking %s for its raft state: %w", m.ID, err)
		}
		if st.GetLastLogIndex() > 0 || st.GetTerm() > 0 || st.GetLeaderId() != "" {
			n.log.Info("cluster: not bootstrapping: a peer has raft state; waiting to be added", "peer", m.ID)
			return true, nil
		}
	}
	if n.hasRaftState() {
		return true, nil
	}
	return true, n.bootstrap(servers)
}

// peerStatus asks node id at grpcAddr for its Status, once it is verified
// as a peer (verify.go).
func (n *Node) peerStatus(ctx context.Context, id, grpcAddr string) (*cairnpb.StatusResponse, error) {
	if grpcAddr == "" {
		return nil, errors.New("no gRPC address known")
	}
	conn, err := n.peerConn(ctx, id, grpcAddr)
	if err != nil {
		return nil, err
	}
	return cairnpb.NewClusterClient(conn).Status(ctx, &cairnpb.StatusRequest{})
}

// reconcileLoop runs on the leader: after every membership change and every
// ReconcileInterval it brings the raft configuration in line with gossip
// (membership.Reconcile) until ctx is cancelled (leadership lost).
func (n *Node) reconcileLoop(ctx context.Context) {
	tracker := membership.NewTracker()
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		if err := n.reconcileOnce(ctx, tracker); err != nil && ctx.Err() == nil {
			n.log.Warn("cluster: reconcile", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.reconcilePoke:
		case <-t.C:
		}
	}
}

func (n *Node) reconcileOnce(ctx context.Context, tracker *membership.Tracker) error {
	defer n.reconcileRounds.Add(1)
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	conf, confIndex := cf.Configuration(), n.fsm.configIndex.Load()
	if err := n.ensureClusterID(ctx); err != nil {
		return err
	}
	// Gossip refuses members of other clusters; should one get through
	// (it gossiped no ID, then one), it is still not reconciled.
	cid := n.ClusterID()
	members := slices.DeleteFunc(slices.Clone(n.gossipView()), func(m membership.Member) bool {
		return m.ClusterID != "" && cid != "" && m.ClusterID != cid
	})
	in := membership.Input{
		Self:            raft.ServerID(n.cfg.ID),
		Members:         members,
		Config:          conf,
		Progress:        n.collectProgress(conf),
		RequireVerified: n.verifier.mode != verifyNone,
		Verified:        n.verifyMembers(ctx, members),
		LeaderLastIndex: n.raft.LastIndex(),
		Departed:        n.fsm.departed.snapshot(),
		Policy:          n.cfg.Policy,
	}
	in.Now = n.cfg.Now()
	tracker.Prepare(&in)
	if ctx.Err() != nil {
		return nil
	}
	p := in.Progress
	n.progress.Store(&p)
	actions := membership.Reconcile(in)
	if len(actions) == 0 {
		return nil
	}
	for _, a := range actions {
		n.log.Info("cluster: reconcile", "action", a.Kind.String(), "server", a.ID, "addr", a.Addr, "reason", a.Reason)
		n.reconcileActions.add(a.Kind.String())
	}
	// Record every graceful departure before the removal: a later leader
	// then has the record whenever it has the removal (doc.go, "Departed
	// servers").
	for _, a := range actions {
		if a.Left {
			if err := n.recordDeparture(ctx, string(a.ID), a.Incarnation); err != nil {
				return err
			}
		}
	}
	_, err := n.applier.Apply(confIndex, actions)
	return err
}

// gossipView returns the gossip view reconcile decides from: Discovery's,
// unless a test replaced it (to stage a stale view).
func (n *Node) gossipView() []membership.Member {
	if f := n.testGossipView.Load(); f != nil {
		return (*f)()
	}
	return n.disc.Members()
}

// collectProgress returns the raft progress of the configured servers as
// this leader's raft saw it in the current term (replprogress.go): the
// highest index each acknowledged and when it last answered. A server
// that has not answered an AppendEntries of this term has no entry, and
// one that has not answered for two heartbeat timeouts is unhealthy. Nothing here comes from the server's own account of itself.
func (n *Node) collectProgress(conf raft.Configuration) map[raft.ServerID]membership.ServerProgress {
	now := n.cfg.Now()
	term := n.raft.CurrentTerm()
	out := make(map[raft.ServerID]membership.ServerProgress, len(conf.Servers))
	out[raft.ServerID(n.cfg.ID)] = membership.ServerProgress{LastIndex: n.raft.LastIndex(), LastContact: now, Healthy: true}
	for _, s := range conf.Servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			continue
		}
		p := n.repl.get(s.ID, term)
		if p.contact.IsZero() {
			continue
		}
		// Raft's heartbeats answer every HeartbeatTimeout/10: two
		// timeouts without one is a server raft cannot reach.
		healthy := now.Sub(p.contact) <= 2*n.raftHeartbeatTimeout()
		out[s.ID] = membership.ServerProgress{LastIndex: p.match, LastContact: p.contact, Healthy: healthy}
	}
	return out
}

// verifyMembers starts verifying every alive member that is not this node
// and is due (verify.go: never verified, half expired, or failed more than
// peerVerifyRetry ago), and returns the IDs verified now. nil with
// verification off.
func (n *Node) verifyMembers(ctx context.Context, members []membership.Member) map[raft.ServerID]bool {
	if n.verifier.mode == verifyNone {
		return nil
	}
	for _, m := range members {
		if m.ID == n.cfg.ID || m.State != membership.StateAlive || m.GRPCAddr == "" ||
			!n.verifier.due(m.ID, m.GRPCAddr) {
			continue
		}
		// In the background: an address that does not answer must not
		// hold up the round. A verification that succeeds starts
		// another round.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if n.verifyPeer(ctx, m.ID, m.GRPCAddr, true) == nil {
				poke(n.reconcilePoke)
			}
		}()
	}
	out := make(map[raft.ServerID]bool)
	for _, m := range members {
		if n.verifier.isVerified(m.ID, m.GRPCAddr) {
			out[raft.ServerID(m.ID)] = true
		}
	}
	return out
}

// raftHeartbeatTimeout is raft's heartbeat timeout as configured.
func (n *Node) raftHeartbeatTimeout() time.Duration {
	if d := n.cfg.HeartbeatTimeout; d > 0 {
		return d
	}
	return raft.DefaultConfig().HeartbeatTimeout
}
