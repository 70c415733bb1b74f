package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
)

// nodeStatus is one node's Status, or why it could not be had.
type nodeStatus struct {
	addr string
	id   string // the member's ID as the leader knows it ("" if unknown)
	// gossip is the member's gossip status as the leader knows it (""
	// if unknown), shown for a node that does not answer.
	gossip string
	st     *client.Status
	err    error
	// sampled is when its Status arrived, after the questions went out
	// together: the node read its indexes at some moment before then.
	sampled time.Duration
}

// statusNodeTimeout bounds each node's Status in `cairn status` (and
// --timeout, if shorter): the nodes are asked in parallel, and one that
// does not answer is shown as unreachable (or refused) without holding up
// the others.
const statusNodeTimeout = time.Second

func newStatusCmd(g *globals) *cobra.Command {
	var onlyEndpoints bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every node's raft state and storage engine shape",
		Long: `Show the status of every member of the cluster (found through the leader),
or with --only-endpoints of the --endpoints only: raft state, term, commit
and applied index, leader; then each node's storage engine: memtables, WAL,
write amplification, stalls, block cache hit ratio, and the LSM shape (files
and bytes per level). -o json prints the full Status of each node.

The nodes are asked in parallel, each for at most 1s (or --timeout if
shorter); one that does not answer is listed as unreachable, one that
refuses the credentials (--token, --cert) as refused, one whose TLS
handshake fails (a certificate that does not verify) as tls error, with the
reason below the table. The command fails (exit 1) only if no node answers. A commit index shown as >=N is a lower bound: the
node has not heard from a leader since it started, and N is its applied
index.

Each node reports its own term and indexes, read when it answered; SAMPLED
is when its answer arrived, after the questions went out together. The log
moves on between samples, so a follower that answered after the leader may
show a commit index above the leader's: it is marked with * and explained
below the table.`,
		Example: `  cairn status
  cairn status --endpoints 127.0.0.1:7379 --only-endpoints
  cairn status -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				var ms *client.Members
				if !onlyEndpoints {
					ms, _ = c.Members(ctx) // without it: the endpoints only
				}
				sts := statusAll(ctx, c, statusTargets(g.endpointList(), ms), min(g.timeout, statusNodeTimeout))
				if g.output == outJSON {
					return g.printStatusJSON(sts)
				}
				return g.printStatus(sts)
			})
		},
	}
	cmd.Flags().BoolVar(&onlyEndpoints, "only-endpoints", false, "show the --endpoints only, not every member")
	return cmd
}

// errNoGRPCAddr is the status of a member whose gRPC address is unknown.
var errNoGRPCAddr = errors.New("no gRPC address known (gossip has not seen the node)")

// statusTargets lists the nodes `cairn status` asks: every member (ms nil:
// none), and the endpoints that are not the address of one. A member whose
// gRPC address is unknown is listed with errNoGRPCAddr.
func statusTargets(endpoints []string, ms *client.Members) []nodeStatus {
	var out []nodeStatus
	known := map[string]bool{}
	for _, m := range ms.GetMembers() {
		gossip := strings.ToLower(m.GetStatus().String())
		if m.GetStatus() == cairnpb.MemberStatus_MEMBER_STATUS_UNKNOWN {
			gossip = ""
		}
		t := nodeStatus{addr: m.GetGrpcAddr(), id: m.GetId(), gossip: gossip}
		if t.addr == "" {
			t.err = errNoGRPCAddr
		}
		known[t.addr] = true
		out = append(out, t)
	}
	for _, a := range endpoints {
		if !known[a] {
			known[a] = true
			out = append(out, nodeStatus{addr: a})
		}
	}
	return out
}

// statusAll asks every target (but those with an error already) for its
// Status, in parallel, each within perNode. It returns them sorted by node
// ID, without an endpoint that turned out to be a member listed already.
func statusAll(ctx context.Context, c *client.Client, targets []nodeStatus, perNode time.Duration) []nodeStatus {
	out := slices.Clone(targets)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range out {
		if out[i].err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One node that does not answer must not take the whole
			// timeout from the others.
			sctx, cancel := context.WithTimeout(ctx, perNode)
			defer cancel()
			out[i].st, out[i].err = c.Status(sctx, client.WithEndpoint(out[i].addr))
			out[i].sampled = time.Since(start)
			if id := out[i].st.GetNodeId(); id != "" {
				out[i].id = id
			}
		}()
	}
	wg.Wait()
	// Drop an endpoint (a target with no ID before asking) that is a
	// member whose own row answered.
	answered := map[string]bool{}
	for i, s := range out {
		if targets[i].id != "" && s.st != nil {
			answered[s.id] = true
		}
	}
	kept := out[:0]
	for i, s := range out {
		if targets[i].id == "" && s.st != nil && answered[s.id] {
			continue
		}
		kept = append(kept, s)
	}
	out = kept
	// By ID, nodes of unknown ID last.
	key := func(s nodeStatus) string {
		if s.id == "" {
			return "\xff\x00" + s.addr
		}
		return s.id + "\x00" + s.addr
	}
	slices.SortFunc(out, func(a, b nodeStatus) int { return strings.Compare(key(a), key(b)) })
	return out
}

func orQuestion(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// commitText shows a commit index, as ">=N" when the node only knows a
// lower bound (it has not heard from a leader since it started).
func commitText(st *client.Status) string {
	if st.GetCommitIndexIsLowerBound() {
		return fmt.Sprintf(">=%d", st.GetCommitIndex())
	}
	return fmt.Sprint(st.GetCommitIndex())
}

func stateName(s cairnpb.RaftState) string {
	if s == cairnpb.RaftState_RAFT_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(s.String())
}

// failure names why a node gave no Status: "refused" when it answered
// but refused our credentials (Unauthenticated, PermissionDenied: the node
// is up), "tls error" when the TLS handshake with it failed for good (a
// certificate that does not verify, or ours refused), else "unreachable".
func failure(err error) string {
	switch {
	case errors.Is(err, client.ErrUnauthenticated), errors.Is(err, client.ErrPermissionDenied):
		return "refused"
	case errors.Is(err, client.ErrTLSHandshake):
		return "tls error"
	}
	return "unreachable"
}

// statusFailed is the error of a status that no node answered: the
// failures by kind, and the reason of the first node that refused (the
// node is up: the reason is the one to act on), else of the first.
func statusFailed(sts []nodeStatus) error {
	counts := map[string]int{}
	var kinds []string
	first := sts[0].err
	if i := slices.IndexFunc(sts, func(s nodeStatus) bool { return failure(s.err) != "unreachable" }); i >= 0 {
		first = sts[i].err
	}
	for _, s := range sts {
		k := failure(s.err)
		if counts[k] == 0 {
			kinds = append(kinds, k)
		}
		counts[k]++
	}
	if len(kinds) == 1 {
		switch kinds[0] {
		case "refused":
			return fmt.Errorf("status: refused by every node (%v)", first)
		case "tls error":
			return fmt.Errorf("status: the TLS handshake failed with every node (%v)", first)
		}
		return fmt.Errorf("status: no node answered (%v)", first)
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	return fmt.Errorf("status: no node answered: %s (%v)", strings.Join(parts, ", "), first)
}

func (g *globals) printStatus(sts []nodeStatus) error {
	tw := newTable(g.stdout)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tTERM\tCOMMIT\tAPPLIED\tSAMPLED\tLAST SNAPSHOT\tLEADER\tVERSION")
	failed := 0
	var unreachable []nodeStatus
	leader := leaderOf(sts)
	var ahead []nodeStatus
	for i, s := range sts {
		if s.err != nil {
			failed++
			unreachable = append(unreachable, s)
			state := failure(s.err)
			if state == "unreachable" && s.gossip != "" && s.gossip != "alive" {
				state += " (" + s.gossip + ")" // gossip's verdict: left, dead, suspect
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", orQuestion(s.id), orDash(s.addr), state)
			continue
		}
		st := s.st
		commit := commitText(st)
		if leader >= 0 && i != leader && st.GetCommitIndex() > sts[leader].st.GetCommitIndex() {
			commit += "*"
			ahead = append(ahead, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\n", st.GetNodeId(), s.addr, stateName(st.GetState()),
			st.GetTerm(), commit, st.GetAppliedIndex(), sampledText(s.sampled), st.GetLastSnapshotIndex(), orDash(st.GetLeaderId()), st.GetVersion())
	}
	tw.Flush()
	// The reasons go below the table, which they would otherwise stretch.
	for _, s := range unreachable {
		g.printf("%s (%s) %s: %v\n", orQuestion(s.id), orDash(s.addr), failure(s.err), s.err)
	}
	if slices.ContainsFunc(sts, func(s nodeStatus) bool { return s.st.GetCommitIndexIsLowerBound() }) {
		g.printf(">=N: the node has not heard from a leader since it started; N is its applied index\n")
	}
	if len(ahead) > 0 {
		l := sts[leader]
		for _, s := range ahead {
			id, d := s.st.GetNodeId(), absDuration(s.sampled-l.sampled)
			g.printf("*: %s's commit index is above the leader's (%d > %d): each node reports its own, read when it answered; ",
				id, s.st.GetCommitIndex(), l.st.GetCommitIndex())
			if s.sampled >= l.sampled {
				g.printf("%s answered %v after the leader, which had committed more by then\n", id, d)
			} else {
				g.printf("%s answered %v before the leader: read at nearly the same moment, or the leader is newly elected and has not committed an entry of its term yet\n", id, d)
			}
		}
	}

	// The engines.
	g.printf("\n")
	tw = newTable(g.stdout)
	fmt.Fprintln(tw, "ENGINE\tMEMTABLES\tWAL\tWRITE AMP\tFLUSHES\tCOMPACTIONS\tSTALLS\tBLOCK CACHE\tHIT RATIO")
	maxLevel := -1
	for _, s := range sts {
		e := s.st.GetEngine()
		if s.err != nil || e == nil {
			continue
		}
		for _, l := range e.GetLevels() {
			maxLevel = max(maxLevel, int(l.GetLevel()))
		}
		fmt.Fprintf(tw, "%s\t%d (%s)\t%s\t%.2f\t%d\t%d\t%d\t%s\t%s\n", s.st.GetNodeId(), e.GetMemtables(), humanBytes(e.GetMemtableBytes()),
			humanBytes(e.GetWalBytes()), e.GetWriteAmplification(), e.GetFlushes(), e.GetCompactions(), e.GetWriteStalls(),
			humanBytes(e.GetBlockCacheSizeBytes()), ratio(e.GetBlockCacheHits(), e.GetBlockCacheMisses()))
	}
	tw.Flush()

	// The LSM shape: files and bytes per level.
	if maxLevel >= 0 {
		g.printf("\n")
		tw = newTable(g.stdout)
		fmt.Fprint(tw, "LSM")
		for l := 0; l <= maxLevel; l++ {
			fmt.Fprintf(tw, "\tL%d", l)
		}
		fmt.Fprintln(tw)
		for _, s := range sts {
			e := s.st.GetEngine()
			if s.err != nil || e == nil {
				continue
			}
			cells := make([]string, maxLevel+1)
			for i := range cells {
				cells[i] = "-"
			}
			for _, l := range e.GetLevels() {
				if l.GetNumFiles() > 0 {
					cells[l.GetLevel()] = fmt.Sprintf("%d files, %s", l.GetNumFiles(), humanBytes(l.GetSizeBytes()))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\n", s.st.GetNodeId(), strings.Join(cells, "\t"))
		}
		tw.Flush()
	}
	for _, s := range sts {
		if e := s.st.GetEngine().GetBackgroundError(); e != "" {
			g.printf("\n%s: engine background error: %s\n", s.st.GetNodeId(), e)
		}
	}
	if failed == len(sts) {
		return statusFailed(sts)
	}
	return nil
}

// leaderOf returns the index of the node that answered as leader in the
// highest term, -1 if none did.
func leaderOf(sts []nodeStatus) int {
	l := -1
	for i, s := range sts {
		if s.err == nil && s.st.GetState() == cairnpb.RaftState_LEADER && (l < 0 || s.st.GetTerm() > sts[l].st.GetTerm()) {
			l = i
		}
	}
	return l
}

// sampledText shows when a node's answer arrived, after the questions
// went out: "+1.2ms".
func sampledText(d time.Duration) string {
	return fmt.Sprintf("+%.1fms", float64(max(d, 0))/float64(time.Millisecond))
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		d = -d
	}
	return d.Round(10 * time.Microsecond)
}

func ratio(hits, misses uint64) string {
	if hits+misses == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(hits)/float64(hits+misses))
}

func (g *globals) printStatusJSON(sts []nodeStatus) error {
	out := make([]json.RawMessage, 0, len(sts))
	failed := 0
	for _, s := range sts {
		if s.err != nil {
			failed++
			m := map[string]string{"grpc_addr": s.addr, "error": s.err.Error(), "failure": failure(s.err)}
			if s.id != "" {
				m["node_id"] = s.id
			}
			b, _ := json.Marshal(m)
			out = append(out, b)
			continue
		}
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(s.st)
		if err != nil {
			return err
		}
		out = append(out, b)
	}
	if err := writeJSON(g.stdout, out); err != nil {
		return err
	}
	if failed == len(sts) {
		return statusFailed(sts)
	}
	return nil
}

func newMembersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the cluster's members",
		Long: `List the cluster's members as the leader sees them: ID, addresses, place in
the raft configuration (voter, non-voter, or none: known by gossip only),
gossip status, and (the leader knows it) health and time since last contact.`,
		Example: `  cairn members
  cairn members -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				ms, err := c.Members(ctx)
				if err != nil {
					return err
				}
				if g.output == outJSON {
					b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(ms)
					if err != nil {
						return err
					}
					g.printf("%s\n", b)
					return nil
				}
				tw := newTable(g.stdout)
				fmt.Fprintln(tw, "ID\tGRPC ADDRESS\tRAFT ADDRESS\tSUFFRAGE\tSTATUS\tLEADER\tHEALTHY\tLAST CONTACT")
				for _, m := range ms.GetMembers() {
					suffrage := map[cairnpb.Suffrage]string{cairnpb.Suffrage_VOTER: "voter", cairnpb.Suffrage_NONVOTER: "non-voter"}[m.GetSuffrage()]
					if suffrage == "" {
						suffrage = "none"
					}
					status := strings.ToLower(m.GetStatus().String())
					if m.GetStatus() == cairnpb.MemberStatus_MEMBER_STATUS_UNKNOWN {
						status = "unknown"
					}
					// The leader's own row has no contact; a member the
					// leader could not poll has none either.
					contact := "-"
					if !m.GetLeader() && (m.GetLastContactMs() > 0 || m.GetHealthy()) {
						contact = (time.Duration(m.GetLastContactMs()) * time.Millisecond).String()
					}
					leader := ""
					if m.GetLeader() {
						leader = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", m.GetId(), orDash(m.GetGrpcAddr()), orDash(m.GetRaftAddr()),
						suffrage, status, leader, m.GetHealthy(), contact)
				}
				tw.Flush()
				g.printf("configuration index %d\n", ms.GetConfigIndex())
				return nil
			})
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newMemberCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Add or remove a member of the raft configuration",
		Long: `Change the raft configuration by hand. Nodes normally need none of this:
a node started with --join is added by the leader once it has caught up, and
one that leaves gracefully is removed.`,
		Example: `  cairn member add n4 10.0.0.4:7380
  cairn member add replica1 10.0.0.9:7380 --non-voter
  cairn member remove n4`,
		Args: usageArgs(cobra.NoArgs),
		RunE: groupRunE,
	}
	var nonVoter bool
	var prevIndex uint64
	add := &cobra.Command{
		Use:     "add ID RAFT_ADDRESS",
		Short:   "Add a server to the raft configuration",
		Example: `  cairn member add n4 10.0.0.4:7380`,
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				opts := []client.Option{client.IfConfigIndex(prevIndex)}
				if nonVoter {
					opts = append(opts, client.AsNonVoter())
				}
				idx, err := c.AddMember(ctx, args[0], args[1], opts...)
				if err != nil {
					return err
				}
				return g.configChanged(fmt.Sprintf("added %s", args[0]), idx)
			})
		},
	}
	add.Flags().BoolVar(&nonVoter, "non-voter", false, "add without a vote (a read replica)")
	add.Flags().Uint64Var(&prevIndex, "if-config-index", 0, "fail unless the configuration is still the one at this index (see 'cairn members')")
	var rmPrevIndex uint64
	remove := &cobra.Command{
		Use:     "remove ID",
		Aliases: []string{"rm"},
		Short:   "Remove a server from the raft configuration",
		Example: `  cairn member remove n4`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				idx, err := c.RemoveMember(ctx, args[0], client.IfConfigIndex(rmPrevIndex))
				if err != nil {
					return err
				}
				return g.configChanged(fmt.Sprintf("removed %s", args[0]), idx)
			})
		},
	}
	remove.Flags().Uint64Var(&rmPrevIndex, "if-config-index", 0, "fail unless the configuration is still the one at this index")
	cmd.AddCommand(add, remove)
	return cmd
}

func (g *globals) configChanged(what string, index uint64) error {
	if g.output == outJSON {
		return writeJSON(g.stdout, map[string]any{"config_index": index})
	}
	g.printf("%s (configuration index %d)\n", what, index)
	return nil
}

func newLeaderCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "leader",
		Short:   "Move raft leadership",
		Example: `  cairn leader transfer n2`,
		Args:    usageArgs(cobra.NoArgs),
		RunE:    groupRunE,
	}
	transfer := &cobra.Command{
		Use:   "transfer [ID]",
		Short: "Hand leadership to another voter (the most up-to-date one if no ID)",
		Long: `Hand leadership to another voter (the most up-to-date one if no ID).

A transfer that does not happen (raft's transfer times out because the target
did not win its election in time, or another transfer is in progress) leaves
leadership where it was and is reported as unavailable; the command retries it
until --timeout and then reports the last attempt's error.`,
		Example: `  cairn leader transfer
  cairn leader transfer n2`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				leader, err := c.TransferLeader(ctx, id)
				if err != nil {
					return err
				}
				if g.output == outJSON {
					return writeJSON(g.stdout, map[string]any{"leader_id": leader})
				}
				g.printf("leader is now %s\n", leader)
				return nil
			})
		},
	}
	cmd.AddCommand(transfer)
	return cmd
}
