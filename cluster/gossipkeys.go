package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster/membership"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gossipKeyringFileName is the file in the data directory that keeps the
// gossip keyring across restarts, as Consul's serf/local.keyring does: a
// rotation (membership/keyring.go) changes the keys of running nodes, and
// a node restarted with its old --gossip-key would otherwise come back
// with a key the cluster dropped. The file is written on the first start
// with a gossip key and after every change; once it exists it wins over
// Config.GossipKey. Mode 0600: it holds the keys.
const gossipKeyringFileName = "gossip.keyring"

// gossipKeyringFile is the file's JSON: base64 keys.
type gossipKeyringFile struct {
	Primary string   `json:"primary"`
	Keys    []string `json:"keys"` // every key, the primary one included
}

// gossipKeys returns the gossip keys the node starts with: those of the
// keyring file if there is one, else Config.GossipKey (then recorded in a
// new keyring file). primary is nil if gossip is not encrypted.
func (n *Node) gossipKeys() (primary []byte, others [][]byte, err error) {
	name := filepath.Join(n.cfg.DataDir, gossipKeyringFileName)
	b, err := os.ReadFile(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(n.cfg.GossipKey) == 0 {
			return nil, nil, nil
		}
		if err := membership.ValidateKey(n.cfg.GossipKey); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		if err := saveGossipKeyring(name, n.cfg.GossipKey, [][]byte{n.cfg.GossipKey}); err != nil {
			return nil, nil, err
		}
		return n.cfg.GossipKey, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	WarnIfReadableByOthers(n.log, name, "gossip keyring")
	var f gossipKeyringFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("cluster: gossip keyring %s: %w", name, err)
	}
	decode := func(s string) ([]byte, error) {
		k, err := base64.StdEncoding.DecodeString(s)
		if err == nil {
			err = membership.ValidateKey(k)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip keyring %s: bad key: %v", name, err)
		}
		return k, nil
	}
	if primary, err = decode(f.Primary); err != nil {
		return nil, nil, err
	}
	for _, s := range f.Keys {
		k, err := decode(s)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(k, primary) {
			others = append(others, k)
		}
	}
	if len(n.cfg.GossipKey) > 0 && !bytes.Equal(n.cfg.GossipKey, primary) {
		n.log.Warn("cluster: the configured gossip key is not the keyring's primary key; using the keyring (it holds the rotations done since), delete it to start from the configured key",
			"keyring", name, "configured_key", membership.KeyFingerprint(n.cfg.GossipKey), "primary_key", membership.KeyFingerprint(primary))
	}
	return primary, others, nil
}

// saveGossipKeyring writes the keyring file name (atomically, synced,
// mode 0600).
func saveGossipKeyring(name string, primary []byte, keys [][]byte) error {
	f := gossipKeyringFile{Primary: base64.StdEncoding.EncodeToString(primary)}
	for _, k := range keys {
		f.Keys = append(f.Keys, base64.StdEncoding.EncodeToString(k))
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	if err := writeFileDurably(name, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	return nil
}

// changeGossipKeyring applies op to this node's keyring, records the
// result in the keyring file, and returns this node's keyring.
func (n *Node) changeGossipKeyring(op cairnpb.GossipKeyringRequest_Op, key []byte) (*cairnpb.GossipKeyringNode, error) {
	n.keyringMu.Lock()
	defer n.keyringMu.Unlock()
	d := n.disc
	var err error
	switch op {
	case cairnpb.GossipKeyringRequest_LIST:
	case cairnpb.GossipKeyringRequest_INSTALL:
		err = d.InstallKey(key)
	case cairnpb.GossipKeyringRequest_USE:
		err = d.UseKey(key)
	case cairnpb.GossipKeyringRequest_REMOVE:
		err = d.RemoveKey(key)
	default:
		err = fmt.Errorf("%w: unknown gossip keyring operation %d", errInvalidRequest, op)
	}
	if err != nil {
		return nil, err
	}
	primary, keys, err := d.Keys()
	if err != nil {
		return nil, err
	}
	if op != cairnpb.GossipKeyringRequest_LIST {
		n.log.Info("cluster: gossip keyring changed", "op", op.String(), "key", membership.KeyFingerprint(key),
			"primary_key", membership.KeyFingerprint(primary), "keys", len(keys))
		if err := saveGossipKeyring(filepath.Join(n.cfg.DataDir, gossipKeyringFileName), primary, keys); err != nil {
			return nil, fmt.Errorf("changed in memory but not saved (a restart loses the change): %w", err)
		}
	}
	out := &cairnpb.GossipKeyringNode{NodeId: n.cfg.ID, Primary: membership.KeyFingerprint(primary)}
	for _, k := range keys {
		out.Fingerprints = append(out.Fingerprints, membership.KeyFingerprint(k))
	}
	slices.Sort(out.Fingerprints)
	return out, nil
}

// GossipKeyring serves the keyring RPC: this node first, then (unless
// local_only) every other member gossip sees alive, asked in parallel.
func (s *clusterService) GossipKeyring(ctx context.Context, req *cairnpb.GossipKeyringRequest) (*cairnpb.GossipKeyringResponse, error) {
	n := s.n
	op := req.GetOp()
	if op != cairnpb.GossipKeyringRequest_LIST {
		if err := membership.ValidateKey(req.GetKey()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	self, err := n.changeGossipKeyring(op, req.GetKey())
	switch {
	case errors.Is(err, membership.ErrNoKeyring):
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: %v", n.cfg.ID, err)
	case errors.Is(err, membership.ErrKeyNotInstalled), errors.Is(err, errInvalidRequest):
		return nil, status.Errorf(codes.InvalidArgument, "node %s: %v", n.cfg.ID, err)
	case err != nil && req.GetLocalOnly():
		return nil, status.Errorf(codes.Internal, "node %s: %v", n.cfg.ID, err)
	case err != nil:
		self = &cairnpb.GossipKeyringNode{NodeId: n.cfg.ID, Error: err.Error()}
	}
	resp := &cairnpb.GossipKeyringResponse{Nodes: []*cairnpb.GossipKeyringNode{self}}
	if req.GetLocalOnly() {
		return resp, nil
	}
	var peers []membership.Member
	for id, m := range *n.members.Load() {
		if id != n.cfg.ID && m.State == membership.StateAlive {
			peers = append(peers, m)
		}
	}
	slices.SortFunc(peers, func(a, b membership.Member) int { return strings.Compare(a.ID, b.ID) })
	out := make([]*cairnpb.GossipKeyringNode, len(peers))
	fwd := &cairnpb.GossipKeyringRequest{Op: op, Key: req.GetKey(), LocalOnly: true}
	var wg sync.WaitGroup
	for i, m := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = &cairnpb.GossipKeyringNode{NodeId: m.ID}
			// Only to verified peers: an impostor in gossip (it has the
			// gossip key) must not be handed the new key or a token.
			cc, err := n.peerConn(ctx, m.ID, m.GRPCAddr)
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			r, err := cairnpb.NewClusterClient(cc).GossipKeyring(ctx, fwd)
			switch {
			case err != nil:
				out[i].Error = status.Convert(err).Message()
			case len(r.GetNodes()) != 1:
				out[i].Error = fmt.Sprintf("answered for %d nodes", len(r.GetNodes()))
			default:
				out[i] = r.GetNodes()[0]
			}
		}()
	}
	wg.Wait()
	resp.Nodes = append(resp.Nodes, out...)
	return resp, nil
}
