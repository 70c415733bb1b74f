package composetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/internal/certs"
)

// tlsKeys is how many keys each write phase of the TLS test writes.
const tlsKeys = 200

// TestComposeClusterTLS runs the TLS variant (docker-compose.tls.yml on top
// of docker-compose.yml): the one-shot `certs` service makes the
// certificates with `cairn-node certs`, node1..node3 start with TLS on gRPC
// and raft and require client certificates, and their health checks dial
// TLS. From the host, with the certificates copied out by
// `deploy/cluster.sh certs`, it writes keys with the CLI, kills the
// leader's container, writes more (an election and replication over TLS
// raft), brings it back and reads every key from every node (followers
// forward over mutual TLS). A CLI without --cacert, one without a client
// certificate and one with a certificate of another CA are refused.
func TestComposeClusterTLS(t *testing.T) {
	compose := preflight(t)
	h := newHarness(t, compose)
	h.files = append(h.files, "docker-compose.tls.yml")
	t.Logf("project %s, image %s, network %s.0/24 (TLS)", h.project, h.image, h.net)

	deadline := time.Now().Add(budget)
	if d, ok := t.Deadline(); ok && d.Add(-2*time.Minute).Before(deadline) {
		deadline = d.Add(-2 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	step := func(name string, f func()) {
		t.Helper()
		start := time.Now()
		t.Logf("== %s", name)
		f()
		t.Logf("   %s: %v", name, time.Since(start).Round(100*time.Millisecond))
	}
	total := time.Now()
	defer func() { t.Logf("total (before teardown): %v", time.Since(total).Round(100*time.Millisecond)) }()
	t.Cleanup(h.teardown)
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h.dumpLogs(ctx)
		}
	})

	step("build binaries and image", func() {
		dir := t.TempDir()
		if _, err := h.run(ctx, "bash", filepath.Join(h.root, "deploy/build-image.sh"), h.image, dir); err != nil {
			t.Fatal(err)
		}
		h.cli = filepath.Join(dir, "cairn")
	})
	step("compose up (TLS): certs, then node1..node3", func() {
		for attempt := 1; ; attempt++ {
			out, err := h.composeCmd(ctx, false, "up", "-d")
			if err == nil {
				return
			}
			if attempt < 5 && strings.Contains(out, "overlaps") {
				t.Logf("subnet %s.0/24 is taken; trying another", h.net)
				h.composeCmd(ctx, false, "down", "--volumes")
				h.pickNet()
				continue
			}
			t.Fatal(err)
		}
	})
	// Healthy means `cairn-node health` got SERVING over mutual TLS.
	step("wait until healthy (TLS health checks)", func() {
		h.waitHealthy(ctx, 90*time.Second, voters3...)
	})

	certDir := filepath.Join(t.TempDir(), "certs")
	step("copy the CA and the admin certificate out (deploy/cluster.sh certs)", func() {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(h.root, "deploy/cluster.sh"), "certs", certDir)
		cmd.Dir = h.root
		cmd.Env = append(h.env(), "CAIRN_TLS=1", "COMPOSE_PROJECT_NAME="+h.project, "CAIRN_COMPOSE="+strings.Join(h.compose, " "))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cluster.sh certs: %v\n%s", err, out)
		}
		ca, cert, key := filepath.Join(certDir, "ca.pem"), filepath.Join(certDir, "admin.pem"), filepath.Join(certDir, "admin-key.pem")
		h.cliArgs = []string{"--cacert", ca, "--cert", cert, "--key", key}
		var err error
		if h.tls, err = client.LoadTLS(ca, cert, key); err != nil {
			t.Fatal(err)
		}
	})

	all3 := h.endpoints(voters3...)
	var leader string
	step("a leader and 3 voters, seen through the TLS CLI", func() {
		leader = h.waitVoters(ctx, 60*time.Second, all3, voters3...)
		t.Logf("leader %s", leader)
	})

	step("clients without the right certificates are refused", func() {
		other := t.TempDir()
		if _, err := certs.Generate(certs.Options{Dir: other, Clients: []string{"admin"}}); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]struct {
			args []string
			want string
		}{
			"plaintext":                  {nil, "give --cacert"},
			"no client certificate":      {h.cliArgs[:2], ""},
			"another CA's client":        {[]string{h.cliArgs[0], h.cliArgs[1], "--cert", filepath.Join(other, "admin.pem"), "--key", filepath.Join(other, "admin-key.pem")}, ""},
			"another CA for the servers": {[]string{"--cacert", filepath.Join(other, "ca.pem"), h.cliArgs[2], h.cliArgs[3], h.cliArgs[4], h.cliArgs[5]}, "certificate signed by unknown authority"},
		} {
			a := append(append([]string{"--endpoints", h.port("node1"), "--timeout", "3s"}, c.args...), "put", "refused", "x")
			out, err := exec.CommandContext(ctx, h.cli, a...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("%s: cairn %v: %v: %s", name, a, err, out)
			}
			t.Logf("%s: refused: %s", name, strings.TrimSpace(string(out)))
		}
	})

	step(fmt.Sprintf("write %d keys over mutual TLS", tlsKeys), func() {
		if err := h.putKeys(ctx, all3, 0, tlsKeys, putWorkers); err != nil {
			t.Fatal(err)
		}
	})
	killed := leader
	step(fmt.Sprintf("kill the leader (%s), write %d more, start it again", killed, tlsKeys), func() {
		h.mustCompose(ctx, false, "kill", killed)
		if err := h.putKeys(ctx, all3, tlsKeys, 2*tlsKeys, putWorkers); err != nil {
			t.Fatal(err)
		}
		h.mustCompose(ctx, false, "start", killed)
		h.waitHealthy(ctx, 60*time.Second, killed)
		h.eventually(ctx, 60*time.Second, time.Second, killed+" caught up", func() error {
			kvs, err := h.scanCLI(ctx, h.port(killed), "serializable")
			if err != nil {
				return err
			}
			return h.checkKeys(kvs, 2*tlsKeys)
		})
	})
	step("read every key from every node (linearizable: followers forward over mTLS)", func() {
		for _, s := range voters3 {
			kvs, err := h.scanNode(ctx, h.port(s))
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if err := h.checkKeys(kvs, 2*tlsKeys); err != nil {
				t.Fatalf("linearizable scan at %s: %v", s, err)
			}
		}
		ms, err := h.members(ctx, all3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ms, func(m member) bool { return m.Leader }) {
			t.Fatalf("no leader: %+v", ms)
		}
	})
}
