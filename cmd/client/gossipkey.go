package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
)

// newGossipKeyCmd is `cairn gossip-key`, Consul's `consul keyring`: the
// gossip encryption keyring of every alive member.
func newGossipKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gossip-key",
		Short: "List and rotate the gossip encryption keys of every node",
		Long: `List and rotate the gossip encryption keys of every alive node, without a
restart. A node accepts gossip encrypted with any key of its keyring and sends
with its primary key. To rotate, run each step to completion (every node OK)
before the next:

  cairn gossip-key install NEWKEY   every node accepts NEWKEY
  cairn gossip-key use NEWKEY       every node sends with NEWKEY
  cairn gossip-key remove OLDKEY    nobody accepts OLDKEY any more

Keys are base64 of 16, 24 or 32 random bytes (e.g. 'openssl rand -base64 32',
or 'head -c32 /dev/urandom | base64'). Each node keeps its keyring in
<data-dir>/gossip.keyring, which wins over --gossip-key at the next start.
A node that was down during a rotation comes back with its old keys: install
the new key there too (--endpoints that node). Keys are shown as fingerprints
(the first 8 bytes of their SHA-256), never in full. Needs a cluster started
with --gossip-key; the key travels in the gRPC request, which is not encrypted
(cairn has no TLS yet).`,
		Example: `  cairn gossip-key list
  cairn gossip-key install "$(head -c32 /dev/urandom | base64)"`,
		Args: usageArgs(cobra.NoArgs),
		RunE: groupRunE,
	}
	sub := func(use, short string, op client.GossipKeyOp) *cobra.Command {
		nargs := 1
		if op == client.GossipKeyList {
			nargs = 0
		}
		example := map[client.GossipKeyOp]string{
			client.GossipKeyList:    "  cairn gossip-key list\n  cairn gossip-key list -o json",
			client.GossipKeyInstall: `  NEWKEY="$(head -c32 /dev/urandom | base64)"; cairn gossip-key install "$NEWKEY"`,
			client.GossipKeyUse:     `  cairn gossip-key use "$NEWKEY"`,
			client.GossipKeyRemove:  `  cairn gossip-key remove "$OLDKEY"`,
		}[op]
		return &cobra.Command{
			Use:     use,
			Short:   short,
			Example: example,
			Args:    usageArgs(cobra.ExactArgs(nargs)),
			RunE: func(cmd *cobra.Command, args []string) error {
				var key []byte
				if nargs == 1 {
					k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(args[0]))
					if err != nil || (len(k) != 16 && len(k) != 24 && len(k) != 32) {
						return usagef("KEY must be base64 of 16, 24 or 32 bytes")
					}
					key = k
				}
				return g.withClient(func(c *client.Client) error {
					ctx, cancel := g.ctx()
					defer cancel()
					nodes, err := c.GossipKeyring(ctx, op, key)
					if err != nil {
						return err
					}
					return g.printKeyring(nodes)
				})
			},
		}
	}
	cmd.AddCommand(
		sub("list", "Show each node's primary key and installed keys (fingerprints)", client.GossipKeyList),
		sub("install KEY", "Add KEY to every node's keyring (accepted, not yet sent with)", client.GossipKeyInstall),
		sub("use KEY", "Make KEY, installed everywhere, every node's primary key", client.GossipKeyUse),
		sub("remove KEY", "Drop KEY, no longer primary anywhere, from every node's keyring", client.GossipKeyRemove),
	)
	return cmd
}

// errKeyringIncomplete is the error of a keyring operation that failed on
// some node (each node's error is printed).
type errKeyringIncomplete struct{ failed, total int }

func (e errKeyringIncomplete) Error() string {
	return fmt.Sprintf("gossip keyring operation failed on %d of %d nodes", e.failed, e.total)
}

// printKeyring prints each node's keyring, and fails if any node failed.
func (g *globals) printKeyring(nodes []*client.GossipKeyringNode) error {
	failed := 0
	for _, n := range nodes {
		if n.GetError() != "" {
			failed++
		}
	}
	if g.output == outJSON {
		out := make([]map[string]any, 0, len(nodes))
		for _, n := range nodes {
			out = append(out, map[string]any{"node_id": n.GetNodeId(), "primary": n.GetPrimary(), "keys": n.GetFingerprints(), "error": n.GetError()})
		}
		if err := writeJSON(g.stdout, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPRIMARY\tKEYS\tERROR")
		for _, n := range nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.GetNodeId(), n.GetPrimary(), strings.Join(n.GetFingerprints(), ","), n.GetError())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return errKeyringIncomplete{failed, len(nodes)}
	}
	return nil
}
