package client

import (
	"context"

	"github.com/cairnkv/cairn/api/cairnpb"
)

// GossipKeyOp is an operation on the gossip keyring
// (cairnpb.GossipKeyringRequest_Op).
type GossipKeyOp = cairnpb.GossipKeyringRequest_Op

// The gossip keyring operations; a rotation is GossipKeyInstall of the new
// key, then GossipKeyUse of it, then GossipKeyRemove of the old one.
const (
	GossipKeyList    = cairnpb.GossipKeyringRequest_LIST
	GossipKeyInstall = cairnpb.GossipKeyringRequest_INSTALL
	GossipKeyUse     = cairnpb.GossipKeyringRequest_USE
	GossipKeyRemove  = cairnpb.GossipKeyringRequest_REMOVE
)

// GossipKeyringNode is one node's gossip keyring after an operation, or
// the operation's error there (cairnpb.GossipKeyringNode). Keys appear as
// fingerprints only.
type GossipKeyringNode = cairnpb.GossipKeyringNode

// GossipKeyring applies op (with key, unless listing) to the gossip
// keyring of every alive member: the node that serves the call passes it
// on to the others. It returns each node's outcome; a node that failed has
// its Error set, and the error returned is nil unless the serving node
// refused the operation as a whole (an unencrypted cluster, a malformed
// key).
func (c *Client) GossipKeyring(ctx context.Context, op GossipKeyOp, key []byte) ([]*GossipKeyringNode, error) {
	var nodes []*GossipKeyringNode
	err := c.do(ctx, "gossip keyring "+op.String(), toAny, "", func(ctx context.Context, nc *nodeConn) error {
		r, err := nc.cluster.GossipKeyring(ctx, &cairnpb.GossipKeyringRequest{Op: op, Key: key})
		if err == nil {
			nodes = r.GetNodes()
		}
		return err
	})
	return nodes, err
}
