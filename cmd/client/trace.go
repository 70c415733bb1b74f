package main

import "github.com/spf13/cobra"

// newTraceCmd is the parent of the block-cache trace commands.
func newTraceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "trace",
		Short:   "Record a node's block-cache accesses and analyze the trace",
		Example: `  cairn trace start --node 127.0.0.1:7379 --duration 60s --out node1.trace`,
		Args:    usageArgs(cobra.NoArgs),
		RunE:    groupRunE,
	}
	cmd.AddCommand(newTraceStartCmd(g))
	return cmd
}
