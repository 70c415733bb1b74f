package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCLIKeyValue(t *testing.T) {
	testNodes(t)
	if out := ok(t, "", "put", "kv/greeting", "hello"); out != "OK\n" {
		t.Fatalf("put: %q", out)
	}
	if out := ok(t, "", "get", "kv/greeting"); out != "hello\n" {
		t.Fatalf("get: %q", out)
	}
	var kv kvJSON
	if err := json.Unmarshal([]byte(ok(t, "", "get", "kv/greeting", "-o", "json", "--consistency", "serializable")), &kv); err != nil || kv.Key != "kv/greeting" || *kv.Value != "hello" || kv.Version != 1 {
		t.Fatalf("get -o json: %+v %v", kv, err)
	}
	// Binary values: from stdin, printed escaped, raw or in hex.
	bin := "a\x00\xff\nb\\"
	ok(t, bin, "put", "kv/bin", "-")
	if out := ok(t, "", "get", "kv/bin"); out != `a\x00\xff\nb\\`+"\n" {
		t.Fatalf("escaped get: %q", out)
	}
	if out := ok(t, "", "get", "kv/bin", "-o", "raw"); out != bin {
		t.Fatalf("raw get: %q", out)
	}
	if out := ok(t, "", "--hex", "get", hex.EncodeToString([]byte("kv/bin"))); out != hex.EncodeToString([]byte(bin))+"\n" {
		t.Fatalf("hex get: %q", out)
	}
	ok(t, "", "--hex", "put", "6b762f00", "ff")
	if out := ok(t, "", "scan", "--prefix", "kv/", "--keys-only"); !strings.Contains(out, `kv/\x00`) {
		t.Fatalf("scan with a binary key: %q", out)
	}
	if out := ok(t, "", "put", "kv/greeting", "hi", "--prev-kv"); !strings.Contains(out, "previous value: hello") {
		t.Fatalf("put --prev-kv: %q", out)
	}

	// Scans.
	for _, k := range []string{"s/a", "s/b", "s/c", "s/d"} {
		ok(t, "", "put", k, "v"+k)
	}
	out := ok(t, "", "scan", "--prefix", "s/")
	if !regexp.MustCompile(`(?s)^KEY +VALUE +VERSION +MOD_INDEX\ns/a +vs/a +1 +\d+\ns/b.*s/c.*s/d +vs/d +1 +\d+\n$`).MatchString(out) {
		t.Fatalf("scan table:\n%s", out)
	}
	var kvs []kvJSON
	if err := json.Unmarshal([]byte(ok(t, "", "scan", "s/b", "s/d", "-o", "json")), &kvs); err != nil || len(kvs) != 2 || kvs[0].Key != "s/b" || kvs[1].Key != "s/c" {
		t.Fatalf("range scan json: %+v %v", kvs, err)
	}
	if err := json.Unmarshal([]byte(ok(t, "", "scan", "s/", "s0", "--reverse", "--limit", "1", "-o", "json")), &kvs); err != nil || len(kvs) != 1 || kvs[0].Key != "s/d" {
		t.Fatalf("reverse scan: %+v %v", kvs, err)
	}
	if err := json.Unmarshal([]byte(ok(t, "", "scan", "--prefix", "nothing/", "-o", "json")), &kvs); err != nil || len(kvs) != 0 {
		t.Fatalf("empty scan: %+v %v", kvs, err)
	}

	// Deletes.
	if out := ok(t, "", "del", "s/a"); out != "1\n" {
		t.Fatalf("del: %q", out)
	}
	if out := ok(t, "", "del", "s/a"); out != "0\n" {
		t.Fatalf("del again: %q", out)
	}
	ok(t, "", "del", "--range", "s/b", "s/c")
	if out := ok(t, "", "scan", "--prefix", "s/", "--keys-only", "-o", "json"); strings.Contains(out, "s/b") || !strings.Contains(out, "s/c") {
		t.Fatalf("after del --range: %s", out)
	}
	ok(t, "", "del", "--prefix", "s/")
	if out := ok(t, "", "scan", "--prefix", "s/", "-o", "json"); out != "[]\n" {
		t.Fatalf("after del --prefix: %q", out)
	}

	// Compare and swap.
	ok(t, "", "cas", "kv/greeting", "hi", "howdy")
	r := cairn(t, "", "cas", "kv/greeting", "hi", "yo")
	if r.code != 1 || !strings.Contains(r.stderr, "compare failed") {
		t.Fatalf("failed cas: %+v", r)
	}
	ok(t, "", "cas", "--if-absent", "kv/lock", "me")
	if r := cairn(t, "", "cas", "--if-absent", "kv/lock", "you"); r.code != 1 {
		t.Fatalf("cas --if-absent on an existing key: %+v", r)
	}

	// Transactions, in both syntaxes.
	out = ok(t, `
# move the greeting
if value(kv/greeting) == howdy
if version("kv/greeting") > 1
if !exists(kv/nothing)
then put kv/greeting "good\tday"
then get kv/greeting
then del kv/lock
else get kv/greeting
`, "txn")
	if out != "then\nput kv/greeting: OK (version 4)\nget kv/greeting: good\\tday\ndel kv/lock: deleted\n" {
		t.Fatalf("txn:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "t.json")
	os.WriteFile(file, []byte(`{"if": [{"target": "value", "key": "kv/greeting", "op": "==", "value": "nope"}],
		"then": [{"op": "put", "key": "kv/x", "value": "1"}],
		"else": [{"op": "get", "key": "kv/greeting"}, {"op": "get", "key": "kv/absent"}]}`), 0o644)
	var tr struct {
		Succeeded bool             `json:"succeeded"`
		Branch    string           `json:"branch"`
		Results   []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(ok(t, "", "txn", "--file", file, "-o", "json")), &tr); err != nil || tr.Succeeded || tr.Branch != "else" || len(tr.Results) != 2 || tr.Results[1]["found"] != false {
		t.Fatalf("json txn: %+v %v", tr, err)
	}
	if r := cairn(t, "then frobnicate x\n", "txn"); r.code != 2 || !strings.Contains(r.stderr, "line 1: unknown operation") {
		t.Fatalf("bad txn: %+v", r)
	}
}

func TestCLIAdmin(t *testing.T) {
	nodes := testNodes(t)
	ok(t, "", "put", "admin/k", "v")
	out := ok(t, "", "status")
	for _, want := range []string{"NODE", "leader", "follower", "ENGINE", "WRITE AMP", "HIT RATIO", "LSM", "L0", "n1", "n2", "n3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	var sts []map[string]any
	if err := json.Unmarshal([]byte(ok(t, "", "status", "-o", "json")), &sts); err != nil || len(sts) != 3 || sts[0]["node_id"] != "n1" || sts[0]["engine"] == nil {
		t.Fatalf("status -o json: %v %v", sts, err)
	}
	if err := json.Unmarshal([]byte(ok(t, "", "status", "--only-endpoints", "--endpoints", nodes[1].GRPCAddr(), "-o", "json")), &sts); err != nil || len(sts) != 1 || sts[0]["node_id"] != "n2" {
		t.Fatalf("status --only-endpoints: %v %v", sts, err)
	}
	out = ok(t, "", "members")
	if !regexp.MustCompile(`(?m)^n1 +127\.0\.0\.1:\d+ +127\.0\.0\.1:\d+ +voter +alive`).MatchString(out) || !strings.Contains(out, "*") {
		t.Fatalf("members:\n%s", out)
	}
	if out := ok(t, "", "member", "add", "ghost", "127.0.0.1:1", "--non-voter"); !strings.HasPrefix(out, "added ghost") {
		t.Fatalf("member add: %q", out)
	}
	if out := ok(t, "", "members"); !regexp.MustCompile(`(?m)^ghost .* non-voter`).MatchString(out) {
		t.Fatalf("members after add:\n%s", out)
	}
	ok(t, "", "member", "remove", "ghost")
	if r := cairn(t, "", "member", "remove", "ghost"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("remove a non-member: %+v", r)
	}
	if out := ok(t, "", "leader", "transfer"); !strings.HasPrefix(out, "leader is now n") {
		t.Fatalf("leader transfer: %q", out)
	}
	if err := waitLeader(nodes, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ok(t, "", "leader", "transfer", "n1")
	if err := waitLeader(nodes, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// raft refuses a snapshot until the node applied the latest
	// configuration entry (reported as Internal): wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := cairn(t, "", "snapshot", "take", "--endpoint", nodes[2].GRPCAddr())
		if r.code == 0 {
			if !strings.HasPrefix(r.stdout, "snapshot at raft index") {
				t.Fatalf("snapshot take: %q", r.stdout)
			}
			break
		}
		if !strings.Contains(r.stderr, "configuration entry") || time.Now().After(deadline) {
			t.Fatalf("snapshot take: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Save, check, restore.
	for i := range 50 {
		ok(t, "", "put", "restore/"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('0'+i/26)), strings.Repeat("v", i))
	}
	before := ok(t, "", "scan", "--prefix", "restore/", "--keys-only")
	dir := t.TempDir()
	save := filepath.Join(dir, "snap.cairn")
	r := cairn(t, "", "snapshot", "save", save, "--progress", "always")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "saved a backup of n") || !strings.Contains(r.stderr, "backup") || !strings.Contains(r.stderr, "100%") {
		t.Fatalf("snapshot save: %+v", r)
	}
	if _, err := os.Stat(save + ".part"); !os.IsNotExist(err) {
		t.Fatalf("the .part file is left: %v", err)
	}
	if out := ok(t, "", "snapshot", "status", save); !regexp.MustCompile(`checksums +OK`).MatchString(out) {
		t.Fatalf("snapshot status:\n%s", out)
	}
	bk := filepath.Join(dir, "backup.cairn")
	if out := ok(t, "", "backup", bk); !strings.Contains(out, "restore it with: cairn snapshot restore "+bk) {
		t.Fatalf("backup: %q", out)
	}
	ok(t, "", "del", "--prefix", "restore/")
	if out := ok(t, "", "scan", "--prefix", "restore/", "-o", "json"); out != "[]\n" {
		t.Fatalf("not deleted: %s", out)
	}
	if out := ok(t, "", "snapshot", "restore", bk); !strings.HasPrefix(out, "restored ") {
		t.Fatalf("restore: %q", out)
	}
	after := ok(t, "", "scan", "--prefix", "restore/", "--keys-only")
	if strings.Count(after, "\n") != 51 || stripVersions(after) != stripVersions(before) {
		t.Fatalf("after restore:\n%s\nbefore:\n%s", after, before)
	}
	ext := filepath.Join(dir, "extract")
	if out := ok(t, "", "snapshot", "restore", bk, "--extract", ext); !strings.HasPrefix(out, "installed the backup") {
		t.Fatalf("extract: %q", out)
	}
	if _, err := os.Stat(filepath.Join(ext, "engine", "CURRENT")); err != nil {
		t.Fatal(err)
	}
	// A damaged backup is refused.
	b, _ := os.ReadFile(bk)
	b[len(b)/2] ^= 1
	bad := filepath.Join(dir, "bad.cairn")
	os.WriteFile(bad, b, 0o644)
	if r := cairn(t, "", "snapshot", "status", bad); r.code != 1 || !strings.Contains(r.stderr, "checksum") {
		t.Fatalf("status of a damaged backup: %+v", r)
	}
}

// stripVersions keeps the keys column of a keys-only scan table.
func stripVersions(table string) string {
	var keys []string
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			keys = append(keys, f[0])
		}
	}
	return strings.Join(keys, "\n")
}

// A bench run through two leadership transfers reports no errors.
func TestCLIBenchThroughLeaderChanges(t *testing.T) {
	nodes := testNodes(t)
	admin, err := client.New(client.Config{Endpoints: strings.Split(endpoints(nodes), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// Each transfer waits until the bench has written through the current
	// leader (the applied index moved on), not for a fixed time.
	applied := func() uint64 {
		var m uint64
		for _, n := range nodes {
			m = max(m, n.AppliedIndex())
		}
		return m
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 2 {
			from := applied()
			for deadline := time.Now().Add(10 * time.Second); applied() < from+50 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := admin.TransferLeader(ctx, ""); err != nil {
				t.Errorf("transfer: %v", err)
			}
			cancel()
		}
	}()
	r := cairn(t, "", "bench", "mixed", "--duration", "3s", "--clients", "8", "--keys", "200", "--value-size", "100",
		"--json", "--progress", "always", "--timeout", "10s")
	wg.Wait()
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report %q: %v", r.stdout, err)
	}
	if rep.Errors != 0 || rep.Ops < 20 || rep.LatencyMs.Count != int(rep.Ops) || rep.LatencyMs.P50 <= 0 || rep.LatencyMs.Max < rep.LatencyMs.P999 || rep.LatencyMs.P999 < rep.LatencyMs.P50 {
		t.Fatalf("report: %+v", rep)
	}
	if !strings.Contains(r.stderr, "mixed: ") || !strings.Contains(r.stderr, "ops/s") {
		t.Fatalf("no progress line on stderr: %q", r.stderr)
	}
	t.Logf("%d ops, %.0f ops/s, p99 %.2fms, max %.2fms through 2 leader changes", rep.Ops, rep.OpsPerSec, rep.LatencyMs.P99, rep.LatencyMs.Max)
	// The table report.
	out := ok(t, "", "bench", "put", "--duration", "300ms", "--clients", "2", "--progress", "never")
	for _, want := range []string{"throughput", "ops/s", "p50", "p99.9", "max"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestCLIErrors(t *testing.T) {
	nodes := testNodes(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"get", "missing/key"}, 1, `cairn: get "missing/key": not found`},
		{[]string{"put", "", "v"}, 2, "empty key"},
		{[]string{"get", ""}, 2, "empty key"},
		{[]string{"put", "k"}, 2, "accepts 2 arg(s)"},
		{[]string{"get", "--frobnicate", "k"}, 2, "unknown flag: --frobnicate"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"get", "k", "-o", "yaml"}, 2, "output format"},
		{[]string{"put", "k", "v", "-o", "raw"}, 2, "-o raw is for get only"},
		{[]string{"get", "k", "--consistency", "eventual"}, 2, "consistency"},
		{[]string{"--hex", "get", "zz"}, 2, "not hex"},
		{[]string{"scan", "--prefix", "a", "b"}, 2, "exclude each other"},
		{[]string{"bench", "frob"}, 2, "want put, get or mixed"},
		{[]string{"member"}, 2, "needs a subcommand"},
		{[]string{"--endpoints", "no-port", "get", "k"}, 2, "endpoint"},
		{[]string{"--endpoints", "127.0.0.1:1", "--timeout", "300ms", "get", "k"}, 1, "unavailable"},
	} {
		r := cairn(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("cairn %s: exit %d, stderr %q; want exit %d and %q on one line", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.msg)
		}
	}
	// $CAIRN_ENDPOINTS stands in for --endpoints.
	t.Setenv(envEndpoints, nodes[0].GRPCAddr())
	if out := ok(t, "", "put", "env/k", "v"); out != "OK\n" {
		t.Fatalf("put with %s: %q", envEndpoints, out)
	}
	t.Setenv(envEndpoints, "127.0.0.1:1")
	if r := cairn(t, "", "--timeout", "200ms", "get", "env/k"); r.code != 1 {
		t.Fatalf("%s of an unreachable node: %+v", envEndpoints, r)
	}
	if out := ok(t, "", "--endpoints", nodes[1].GRPCAddr(), "get", "env/k"); out != "v\n" {
		t.Fatalf("--endpoints over %s: %q", envEndpoints, out)
	}
}

// Every command has help with examples, and completion scripts work.
func TestCLIHelp(t *testing.T) {
	root := newRootCmd(new(strings.Builder), new(strings.Builder))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() != "help" && c.Name() != "completion" && c.Parent() == root || c.HasParent() && c.Parent().Parent() == root {
			if c.Example == "" && !strings.HasPrefix(c.Parent().Name(), "completion") {
				t.Errorf("%s has no examples", c.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for _, args := range [][]string{{"--help"}, {"put", "--help"}, {"txn", "--help"}, {"bench", "--help"}, {"snapshot", "save", "--help"}} {
		var out, errb strings.Builder
		if code := run(args, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "Examples:") {
			t.Errorf("cairn %v: exit %d\n%s", args, code, out.String())
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		var out, errb strings.Builder
		if code := run([]string{"completion", shell}, strings.NewReader(""), &out, &errb); code != 0 || out.Len() < 100 {
			t.Errorf("completion %s: exit %d, %d bytes", shell, code, out.Len())
		}
	}
}

// The built binary works, exit codes included.
func TestBinary(t *testing.T) {
	nodes := testNodes(t)
	bin := filepath.Join(t.TempDir(), "cairn")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	runBin := func(stdin string, args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), envEndpoints+"="+endpoints(nodes))
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := runBin("from stdin", "put", "bin/k", "-"); code != 0 || out != "OK\n" {
		t.Fatalf("put: %d %q", code, out)
	}
	if out, code := runBin("", "get", "bin/k"); code != 0 || out != "from stdin\n" {
		t.Fatalf("get: %d %q", code, out)
	}
	if out, code := runBin("", "get", "bin/missing"); code != 1 || !strings.Contains(out, "not found") {
		t.Fatalf("get missing: %d %q", code, out)
	}
	if out, code := runBin("", "get"); code != 2 {
		t.Fatalf("get without a key: %d %q", code, out)
	}
}

// flakyTransferServer fails its first `fail` TransferLeader calls as a node
// does when raft's leadership transfer times out.
type flakyTransferServer struct {
	cairnpb.UnimplementedClusterServer
	fail  int
	calls atomic.Int32
}

func (s *flakyTransferServer) TransferLeader(ctx context.Context, req *cairnpb.TransferLeaderRequest) (*cairnpb.TransferLeaderResponse, error) {
	if int(s.calls.Add(1)) <= s.fail {
		return nil, status.Error(codes.Unavailable, "cluster: leadership transfer did not complete: timed out: n2 did not win an election within raft's election timeout; leadership stays here, retry")
	}
	return &cairnpb.TransferLeaderResponse{LeaderId: "n2"}, nil
}

// `cairn leader transfer` retries a transfer that timed out within its
// --timeout, and reports one that keeps timing out as unavailable, not as an
// internal error.
func TestCLILeaderTransferRetries(t *testing.T) {
	serve := func(fail int) (*flakyTransferServer, string) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fs := &flakyTransferServer{fail: fail}
		srv := grpc.NewServer()
		cairnpb.RegisterClusterServer(srv, fs)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		return fs, lis.Addr().String()
	}
	fs, addr := serve(2)
	if out := ok(t, "", "--endpoints", addr, "--timeout", "30s", "leader", "transfer", "n2"); out != "leader is now n2\n" {
		t.Fatalf("leader transfer: %q", out)
	}
	if c := fs.calls.Load(); c != 3 {
		t.Fatalf("%d TransferLeader calls, want 3", c)
	}
	fs, addr = serve(1 << 30)
	r := cairn(t, "", "--endpoints", addr, "--timeout", "1s", "leader", "transfer", "n2")
	if r.code != 1 || !strings.Contains(r.stderr, "unavailable: cluster: leadership transfer did not complete: timed out") ||
		strings.Contains(r.stderr, "internal") || fs.calls.Load() < 2 {
		t.Fatalf("a transfer that keeps timing out: %+v after %d calls", r, fs.calls.Load())
	}
	t.Logf("stderr: %s", r.stderr)
}
