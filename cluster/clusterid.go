package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/hashicorp/raft"
)

// Cluster identity (README.md, "Operating"). Every cluster has an ID,
// decided once through raft: the first leader that finds none proposes a
// random one as a cluster-ID entry, and the first such entry applied is
// the cluster's (every replica applies the same first one). A node keeps
// the ID of the cluster its data directory belongs to in
// DataDir/cluster-id and gossips it (membership.Meta.ClusterID); gossip
// then refuses members of any other cluster, on both sides, so a node
// pointed at the wrong cluster is never added to it and never handed a
// snapshot that would replace its data: it stops with one line naming
// both IDs. An empty data directory has no ID and joins any cluster; it
// adopts the ID from the cluster-ID entry if it receives it, or else (it
// caught up from a snapshot that compacted the entry) from its leader's
// gossip once it holds raft state.

// clusterIDFileName holds the cluster ID in DataDir (see doc.go, "Data
// directory").
const clusterIDFileName = "cluster-id"

// clusterIDMagic starts the Extensions of a cluster-ID entry; the ID
// follows. Its Data is empty.
var clusterIDMagic = []byte("cairn.cluster-id\x00")

// newClusterID returns a random cluster ID: 16 bytes in hex.
func newClusterID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// validClusterID reports whether id looks like one newClusterID makes.
func validClusterID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

func encodeClusterIDEntry(id string) []byte {
	return append(slices.Clip(clusterIDMagic), id...)
}

// decodeClusterIDEntry returns the ID of a cluster-ID entry's Extensions.
func decodeClusterIDEntry(ext []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(ext, clusterIDMagic)
	if !ok || !validClusterID(string(rest)) {
		return "", false
	}
	return string(rest), true
}

// loadClusterID reads DataDir/cluster-id ("" if there is none).
func loadClusterID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, clusterIDFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: cluster ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !validClusterID(id) {
		return "", fmt.Errorf("cluster: cluster ID file %s holds %q, not 32 hex digits", filepath.Join(dir, clusterIDFileName), id)
	}
	return id, nil
}

// saveClusterID writes DataDir/cluster-id atomically and durably.
func saveClusterID(dir, id string) error {
	return writeFileDurably(filepath.Join(dir, clusterIDFileName), []byte(id+"\n"), 0o644)
}

// clusterIdentity is a node's cluster ID, set once.
type clusterIdentity struct {
	mu sync.Mutex
	id string // REQUIRES: mu
}

// ClusterID returns the ID of the cluster this node belongs to, "" until
// it knows it.
func (n *Node) ClusterID() string {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.id
}

// adoptClusterID makes id this node's cluster ID if it has none: it is
// saved in the data directory, then gossiped. A node that has another ID
// keeps it and logs the conflict (it should not be reachable: gossip
// refuses the other cluster's members).
func (n *Node) adoptClusterID(id, how string) {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	switch n.cluster.id {
	case id:
		return
	case "":
	default:
		n.log.Error("cluster: a cluster ID from another cluster reached this node; keeping its own",
			"cluster_id", n.cluster.id, "other_cluster_id", id, "from", how)
		return
	}
	if err := saveClusterID(n.cfg.DataDir, id); err != nil {
		n.log.Error("cluster: saving the cluster ID", "cluster_id", id, "err", err)
		return
	}
	n.cluster.id = id
	n.log.Info("cluster: cluster ID", "cluster_id", id, "from", how)
	if n.disc != nil {
		// Not under a lock memberlist's delegates take: SetClusterID
		// broadcasts.
		go func() {
			if err := n.disc.SetClusterID(id, time.Second); err != nil && !errors.Is(err, membership.ErrShutdown) {
				n.log.Warn("cluster: gossiping the cluster ID", "err", err)
			}
		}()
	}
}

// ensureClusterID runs on the leader: a cluster without an ID (new, or
// made by an older version) gets one through raft.
func (n *Node) ensureClusterID(ctx context.Context) error {
	if n.ClusterID() != "" {
		return nil
	}
	id := newClusterID()
	f := n.raft.ApplyLog(raft.Log{Extensions: encodeClusterIDEntry(id)}, n.cfg.ApplyTimeout)
	if err := n.waitRaft(ctx, f); err != nil {
		return fmt.Errorf("cluster: proposing a cluster ID: %w", err)
	}
	return nil
}

// clusterIDLoop adopts the leader's cluster ID on a node that holds raft
// state but no ID (it caught up from a snapshot, past the cluster-ID
// entry). It ends once the node has an ID.
func (n *Node) clusterIDLoop() {
	defer n.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for n.ClusterID() == "" {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if !n.hasRaftState() {
			continue
		}
		lid, _ := n.Leader()
		if lid == "" || lid == n.cfg.ID {
			continue // a leader without an ID proposes one (ensureClusterID)
		}
		if m, ok := n.member(lid); ok && m.ClusterID != "" {
			n.adoptClusterID(m.ClusterID, "leader "+lid)
		}
	}
}

// onRefused handles a member gossip refused (membership.Config.OnRefuse):
// it logs once per member and kind, and stops this node when it is the
// one that must go: the newer run of two nodes with one ID.
func (n *Node) onRefused(r *membership.RefusedError) {
	key := fmt.Sprintf("%v/%s/%s/%s", r.Duplicate, r.Node, r.Addr, r.Meta.ClusterID)
	if _, seen := n.refusedSeen.LoadOrStore(key, true); seen {
		return
	}
	if !r.Duplicate {
		n.log.Error("cluster: refused a member of another cluster", "member", r.Node, "addr", r.Addr,
			"member_cluster_id", r.Meta.ClusterID, "cluster_id", r.Local)
		return
	}
	n.log.Error("cluster: two nodes claim one ID", "id", r.Node, "addr", r.Addr, "existing_addr", r.Existing)
	// This node is one of the two: the newer run (larger incarnation, its
	// start time) stops; the one the cluster knew stays.
	if r.Self && r.Meta.Incarnation != 0 && r.Meta.Incarnation < n.incarnation {
		n.fail(fmt.Errorf("another node with ID %q runs at gossip address %s (since before this one): "+
			"this node stops; give each node its own --id", r.Node, r.Addr))
	}
}

// fail reports a condition under which the node must not go on (the
// process should stop: Failed). The first one is kept.
func (n *Node) fail(err error) {
	n.failed.Store(true)
	select {
	case n.failCh <- err:
		n.log.Error("cluster: the node cannot go on", "err", err)
	default:
	}
}

// Failed returns a channel that receives an error when the node finds it
// must not go on: another node holds its ID, or its data directory belongs
// to another cluster than the one it was told to join. The node itself
// keeps running (refusing what it refused) until Shutdown; cairn-node
// shuts down and exits non-zero.
func (n *Node) Failed() <-chan error { return n.failCh }
