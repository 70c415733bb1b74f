package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
)

// TestCLIExamplesNameRealCommands: every command's examples run a command
// that exists, and the command itself (or one of its subcommands); `snapshot
// save --help` once showed `cairn save …`.
func TestCLIExamplesNameRealCommands(t *testing.T) {
	root := newRootCmd(new(strings.Builder), new(strings.Builder))
	// The root's persistent flags that take a value.
	valued := map[string]bool{}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Value.Type() != "bool" {
			valued["--"+f.Name] = true
			if f.Shorthand != "" {
				valued["-"+f.Shorthand] = true
			}
		}
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if strings.Contains(c.Use, "cairn") && c != root {
			t.Errorf("%s: Use %q names the program", c.CommandPath(), c.Use)
		}
		if name := strings.Fields(c.Use)[0]; name != c.Name() {
			t.Errorf("%s: Use %q does not start with its name", c.CommandPath(), c.Use)
		}
		if c.Example != "" && !strings.Contains(c.Example, "cairn ") {
			t.Errorf("%s: no example runs cairn", c.CommandPath())
		}
		for _, line := range strings.Split(c.Example, "\n") {
			words := strings.Fields(line)
			i := slices.Index(words, "cairn")
			if i < 0 {
				continue // a continuation: a here-document's body
			}
			args := words[i+1:]
			for len(args) > 0 && strings.HasPrefix(args[0], "-") {
				if valued[args[0]] {
					args = args[1:]
				}
				args = args[1:]
			}
			found, _, err := root.Find(args)
			if err != nil || found == root {
				t.Errorf("%s: example %q runs no command (%v)", c.CommandPath(), line, err)
				continue
			}
			if c != root && !strings.HasPrefix(found.CommandPath()+" ", c.CommandPath()+" ") {
				t.Errorf("%s: example %q runs %s", c.CommandPath(), line, found.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			if s.Name() != "help" && s.Name() != "completion" {
				walk(s)
			}
		}
	}
	walk(root)

	var out, errb strings.Builder
	if code := run([]string{"snapshot", "save", "--help"}, strings.NewReader(""), &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "cairn snapshot save FILE") || !strings.Contains(out.String(), "  cairn snapshot save cairn-") {
		t.Errorf("snapshot save --help: exit %d\n%s", code, out.String())
	}
}

// withInterceptor installs a unary client interceptor in the CLI's client
// for the rest of the test.
func withInterceptor(t *testing.T, i grpc.UnaryClientInterceptor) {
	testDialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(i)}
	t.Cleanup(func() { testDialOptions = nil })
}

// TestCLIScanTimeoutPerPage: --timeout bounds each page of a scan, not the
// whole scan (a scan of 467k keys once needed 13s and exited 1 after
// partial output at the default 5s).
func TestCLIScanTimeoutPerPage(t *testing.T) {
	nodes := testNodes(t)
	c, err := client.New(client.Config{Endpoints: strings.Split(endpoints(nodes), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const keys = 5000 // 5 pages of the default 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < keys; i += cairnpb.MaxTxnOps {
		var ops []client.Op
		for j := i; j < min(i+cairnpb.MaxTxnOps, keys); j++ {
			ops = append(ops, client.OpPut([]byte(fmt.Sprintf("pagescan/%05d", j)), []byte("v")))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Each page takes 1s more; --timeout 3s is less than the scan (5s at
	// least) and leaves each page 2s for the rest on a loaded machine.
	const delay = time.Second
	var pages sync.Map
	withInterceptor(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == cairnpb.KV_Scan_FullMethodName {
			pages.Store(string(req.(*cairnpb.ScanRequest).GetPageToken()), true)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	start := time.Now()
	r := cairn(t, "", "--timeout", "3s", "scan", "--prefix", "pagescan/", "--keys-only")
	if r.code != 0 {
		t.Fatalf("scan of %d keys in 5 pages, each delayed %v, --timeout 3s: exit %d after %v, %d lines\nstderr: %s",
			keys, delay, r.code, time.Since(start), strings.Count(r.stdout, "\n"), r.stderr)
	}
	if n := strings.Count(r.stdout, "pagescan/"); n != keys {
		t.Fatalf("scan printed %d keys, want %d", n, keys)
	}
	if took := time.Since(start); took < 5*delay {
		t.Fatalf("the scan took %v: the interceptor did not delay its pages", took)
	}
	// --page-size sets the pages.
	pages.Clear()
	r = cairn(t, "", "--timeout", "5s", "scan", "--prefix", "pagescan/", "--keys-only", "--limit", "4", "--page-size", "2")
	n := 0
	pages.Range(func(any, any) bool { n++; return true })
	if r.code != 0 || strings.Count(r.stdout, "pagescan/") != 4 || n != 2 {
		t.Fatalf("scan --limit 4 --page-size 2: exit %d, %d pages\n%s%s", r.code, n, r.stdout, r.stderr)
	}
}

// TestCLISnapshotTakeTimeout: `snapshot take` waits longer than one
// request's timeout by default (a 2 GiB snapshot takes 10–12s, and the
// command failed at the default 5s while the snapshot succeeded);
// --timeout still bounds it when set.
func TestCLISnapshotTakeTimeout(t *testing.T) {
	testNodes(t)
	var mu sync.Mutex
	var left []time.Duration
	withInterceptor(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == cairnpb.Cluster_Snapshot_FullMethodName {
			d := time.Duration(-1)
			if dl, ok := ctx.Deadline(); ok {
				d = time.Until(dl)
			}
			mu.Lock()
			left = append(left, d)
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	lastLeft := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if len(left) == 0 {
			t.Fatal("no Snapshot call")
		}
		return left[len(left)-1]
	}
	// The result does not matter here (raft may refuse a snapshot until
	// it applied the latest configuration entry): the call's deadline
	// does.
	// run, not cairn: cairn adds a --timeout of its own.
	run([]string{"--endpoints", endpoints(testNodes(t)), "snapshot", "take"}, strings.NewReader(""), io.Discard, io.Discard)
	if d := lastLeft(); d >= 0 && d < time.Minute {
		t.Fatalf("snapshot take without --timeout: the call had %v", d)
	}
	cairn(t, "", "--timeout", "3s", "snapshot", "take")
	if d := lastLeft(); d < 0 || d > 3*time.Second {
		t.Fatalf("snapshot take --timeout 3s: the call had %v", d)
	}
	// An unreachable node fails within --timeout, not the snapshot's bound.
	start := time.Now()
	if r := cairn(t, "", "--timeout", "500ms", "snapshot", "take", "--endpoint", "127.0.0.1:1"); r.code != 1 {
		t.Fatalf("snapshot take of an unreachable node: %+v", r)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("snapshot take of an unreachable node took %v", took)
	}
}

// TestCLIStatusUnreachable: status asks the nodes in parallel, each
// briefly, and shows one that does not answer as a row of its own with
// the reason below the table; members shows no last contact on the
// leader's own row.
func TestCLIStatusUnreachable(t *testing.T) {
	nodes := testNodes(t)
	r := cairn(t, "", "status", "--only-endpoints", "--endpoints", nodes[0].GRPCAddr()+",127.0.0.1:1")
	if r.code != 0 {
		t.Fatalf("status with an unreachable endpoint: %+v", r)
	}
	if !regexp.MustCompile(`(?m)^\? +127\.0\.0\.1:1 +unreachable +- +- +-`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^n1 +127\.0\.0\.1:\d+ +\w+ +\d+ +\d+ +\d+`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^\? \(127\.0\.0\.1:1\) unreachable: .*unavailable`).MatchString(r.stdout) {
		t.Fatalf("status with an unreachable endpoint:\n%s", r.stdout)
	}

	if err := waitLeader(nodes, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := ok(t, "", "members")
		leaderRow := regexp.MustCompile(`(?m)^(n\d) .* \* +(true|false) +(\S+)$`).FindStringSubmatch(out)
		if leaderRow != nil && leaderRow[2] == "true" {
			if leaderRow[3] != "-" {
				t.Fatalf("members: the leader's row shows last contact %q, want -:\n%s", leaderRow[3], out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members: no healthy leader row:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPrintStatus checks the status table's rows for a node that knows
// only a lower bound of the commit index and for an unreachable member,
// and that every row says when its answer arrived.
func TestPrintStatus(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: &out}
	sts := []nodeStatus{
		{addr: "10.0.0.1:7379", id: "n1", sampled: 2500 * time.Microsecond, st: &client.Status{NodeId: "n1", State: cairnpb.RaftState_FOLLOWER, Term: 3,
			CommitIndex: 13086, CommitIndexIsLowerBound: true, AppliedIndex: 13086, LastLeaderContactMs: -1}},
		{addr: "10.0.0.2:7379", id: "n2", gossip: "dead", err: errors.New("cairn: status: unavailable: connection refused")},
		{addr: "10.0.0.3:7379", id: "n3", sampled: 1200 * time.Microsecond, st: &client.Status{NodeId: "n3", State: cairnpb.RaftState_LEADER, Term: 3,
			CommitIndex: 13090, AppliedIndex: 13090, LeaderId: "n3"}},
	}
	if err := g.printStatus(sts); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^NODE +ADDRESS +STATE +TERM +COMMIT +APPLIED +SAMPLED +LAST SNAPSHOT +LEADER +VERSION`,
		`(?m)^n1 +10\.0\.0\.1:7379 +follower +3 +>=13086 +13086 +\+2\.5ms +0 +- `,
		`(?m)^n2 +10\.0\.0\.2:7379 +unreachable \(dead\) +- +- +- +- +- +-`,
		`(?m)^n3 +10\.0\.0\.3:7379 +leader +3 +13090 +13090 +\+1\.2ms +0 +n3 `,
		`(?m)^n2 \(10\.0\.0\.2:7379\) unreachable: cairn: status: unavailable: connection refused$`,
		`(?m)^>=N: the node has not heard from a leader since it started`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("status lacks %s:\n%s", re, out.String())
		}
	}
	if strings.Contains(out.String(), "*") {
		t.Errorf("a commit index marked as above the leader's:\n%s", out.String())
	}
}

// TestPrintStatusCommitAhead: a follower whose answer arrived after the
// leader's may report a commit index above it; the row is marked and the
// note under the table says why, with the times of the samples.
func TestPrintStatusCommitAhead(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: &out}
	status := func(id string, state cairnpb.RaftState, commit uint64) *client.Status {
		return &client.Status{NodeId: id, State: state, Term: 5, CommitIndex: commit, AppliedIndex: commit, LeaderId: "n1"}
	}
	sts := []nodeStatus{
		{addr: "10.0.0.1:7379", id: "n1", sampled: time.Millisecond, st: status("n1", cairnpb.RaftState_LEADER, 5000)},
		{addr: "10.0.0.2:7379", id: "n2", sampled: 4 * time.Millisecond, st: status("n2", cairnpb.RaftState_FOLLOWER, 5012)},
		{addr: "10.0.0.3:7379", id: "n3", sampled: 800 * time.Microsecond, st: status("n3", cairnpb.RaftState_FOLLOWER, 5003)},
		{addr: "10.0.0.4:7379", id: "n4", sampled: 900 * time.Microsecond, st: status("n4", cairnpb.RaftState_FOLLOWER, 4990)},
	}
	if err := g.printStatus(sts); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^n1 +10\.0\.0\.1:7379 +leader +5 +5000 +5000 +\+1\.0ms `,
		`(?m)^n2 +10\.0\.0\.2:7379 +follower +5 +5012\* +5012 +\+4\.0ms `,
		`(?m)^n3 +10\.0\.0\.3:7379 +follower +5 +5003\* +5003 +\+0\.8ms `,
		`(?m)^n4 +10\.0\.0\.4:7379 +follower +5 +4990 +4990 +\+0\.9ms `,
		`(?m)^\*: n2's commit index is above the leader's \(5012 > 5000\): each node reports its own, read when it answered; n2 answered 3ms after the leader, which had committed more by then$`,
		`(?m)^\*: n3's commit index is above the leader's \(5003 > 5000\): .*; n3 answered 200µs before the leader: .*newly elected`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("status lacks %s:\n%s", re, out.String())
		}
	}
	if n := strings.Count(out.String(), "*:"); n != 2 {
		t.Errorf("%d notes, want 2:\n%s", n, out.String())
	}
}

// TestStatusTargets: status asks every member and the endpoints that are
// not members' addresses; a member whose gRPC address gossip does not know
// is listed as such rather than dropped.
func TestStatusTargets(t *testing.T) {
	ms := &client.Members{Members: []*cairnpb.Member{
		{Id: "n1", GrpcAddr: "10.0.0.1:7379", Status: cairnpb.MemberStatus_ALIVE},
		{Id: "n2", GrpcAddr: "10.0.0.2:7379", Status: cairnpb.MemberStatus_DEAD},
		{Id: "n3", RaftAddr: "10.0.0.3:7380"},
	}}
	got := statusTargets([]string{"10.0.0.1:7379", "lb:7379"}, ms)
	var lines []string
	for _, s := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %v", s.id, s.addr, s.gossip, s.err))
	}
	want := []string{
		"n1 10.0.0.1:7379 alive <nil>",
		"n2 10.0.0.2:7379 dead <nil>",
		"n3   " + errNoGRPCAddr.Error(),
		" lb:7379  <nil>",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("targets:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got := statusTargets([]string{"a:1", "b:2"}, nil); len(got) != 2 || got[0].addr != "a:1" || got[1].addr != "b:2" {
		t.Fatalf("endpoints only: %+v", got)
	}
}
