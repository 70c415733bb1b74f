package composetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// harness drives one compose project: the Compose tool, the project's
// settings, and the host's cairn CLI.
type harness struct {
	t       *testing.T
	root    string   // repository root
	compose []string // the Compose command: "docker compose" or "docker-compose"
	project string   // compose project name, unique per run
	image   string   // image tag, unique per run
	net     string   // CAIRN_NET: the first three octets of the project's /24
	cli     string   // the cairn CLI on the host
	// files are the compose files, relative to root (docker-compose.yml,
	// and docker-compose.tls.yml for the TLS variant).
	files []string
	// cliArgs go before every CLI command (the TLS variant's certificates).
	cliArgs []string
	// tls is the TLS configuration of the test's own gRPC calls (nil:
	// plaintext).
	tls *tls.Config

	// hostPorts are the host ports the services' gRPC ports are published
	// on (CAIRN_NODEn_PORT), fixed for the run: a port Docker picks
	// itself changes when a container restarts.
	hostPorts [5]int
}

// truthy reports whether an environment variable is set to a true value.
func truthy(name string) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && v
}

// preflight skips the test unless it was asked for and the machine can run
// it, and returns the Compose command. Under CI=true a missing engine or
// Compose tool fails the test instead.
func preflight(t *testing.T) []string {
	if os.Getenv("CAIRN_COMPOSE_TEST") == "" {
		t.Skip("the compose cluster test builds an image and starts containers: " +
			"run it with CAIRN_COMPOSE_TEST=1 (make compose-test)")
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if truthy("CI") {
			t.Fatalf("CI=true and %s: the compose test must run on CI", msg)
		}
		t.Skipf("skipping the compose cluster test: %s", msg)
	}
	if runtime.GOOS != "linux" {
		unavailable("the host is %s, not linux (the CLI dials nodes at their container IPs)", runtime.GOOS)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable("no docker command: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput()
	if err != nil {
		unavailable("no Docker engine answers (docker version: %v: %s)", err, bytes.TrimSpace(out))
	}
	t.Logf("docker engine %s", bytes.TrimSpace(out))
	var compose []string
	switch {
	case os.Getenv("CAIRN_COMPOSE") != "":
		compose = strings.Fields(os.Getenv("CAIRN_COMPOSE"))
	case exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil:
		compose = []string{"docker", "compose"}
	default:
		if _, err := exec.LookPath("docker-compose"); err != nil {
			unavailable("neither 'docker compose' nor 'docker-compose' is installed")
		}
		compose = []string{"docker-compose"}
	}
	out, err = exec.CommandContext(ctx, compose[0], append(compose[1:], "version")...).CombinedOutput()
	if err != nil {
		unavailable("%s version: %v: %s", strings.Join(compose, " "), err, bytes.TrimSpace(out))
	}
	first, _, _ := strings.Cut(string(out), "\n")
	t.Logf("compose: %s (%s)", strings.Join(compose, " "), strings.TrimSpace(first))
	return compose
}

func newHarness(t *testing.T, compose []string) *harness {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	id := fmt.Sprintf("%08x", rand.Uint32())
	h := &harness{
		t:       t,
		root:    root,
		compose: compose,
		project: "cairntest" + id,
		image:   "cairn-composetest:" + id,
		files:   []string{"docker-compose.yml"},
	}
	h.pickNet()
	h.pickPorts()
	return h
}

// pickPorts picks free host ports for the nodes' gRPC ports.
func (h *harness) pickPorts() {
	h.t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range h.hostPorts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.t.Fatal(err)
		}
		ls = append(ls, l)
		h.hostPorts[i] = l.Addr().(*net.TCPAddr).Port
	}
}

// pickNet picks a random /24 for the project's network, in the part of
// 172.16.0.0/12 that Docker hands out last.
func (h *harness) pickNet() {
	h.net = fmt.Sprintf("172.%d.%d", 28+rand.IntN(4), rand.IntN(256))
}

// env is the environment of every compose command: the project's image
// and subnet, random host ports, and nothing from the caller's environment
// that would change which files or profiles compose reads.
func (h *harness) env() []string {
	env := append(os.Environ(),
		"CAIRN_IMAGE="+h.image,
		"CAIRN_NET="+h.net,
		"CAIRN_PUBLISH_ADDR=127.0.0.1",
		"COMPOSE_FILE=",
		"COMPOSE_PROFILES=",
		"COMPOSE_PROJECT_NAME=",
	)
	for i, p := range h.hostPorts {
		env = append(env, fmt.Sprintf("CAIRN_NODE%d_PORT=%d", i+1, p))
	}
	return env
}

// run runs a command in the repository root and returns its combined
// output; the error includes the output.
func (h *harness) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = h.root
	cmd.Env = h.env()
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 40))
	}
	return out.String(), nil
}

// composeCmd runs a Compose command on the project; profile "scale" makes
// node4 and node5 part of it.
func (h *harness) composeCmd(ctx context.Context, scale bool, args ...string) (string, error) {
	a := append([]string(nil), h.compose[1:]...)
	for _, f := range h.files {
		a = append(a, "-f", filepath.Join(h.root, f))
	}
	a = append(a, "-p", h.project)
	if scale {
		a = append(a, "--profile", "scale")
	}
	return h.run(ctx, h.compose[0], append(a, args...)...)
}

// mustCompose is composeCmd failing the test on an error.
func (h *harness) mustCompose(ctx context.Context, scale bool, args ...string) string {
	h.t.Helper()
	out, err := h.composeCmd(ctx, scale, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// containerID returns the ID of service's container.
func (h *harness) containerID(ctx context.Context, service string) (string, error) {
	out, err := h.composeCmd(ctx, true, "ps", "-q", service)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.Contains(id, "\n") {
		return "", fmt.Errorf("service %s: want one container, have %q", service, id)
	}
	return id, nil
}

// containerState is the part of `docker inspect` the test reads.
type containerState struct {
	State struct {
		Status  string `json:"Status"`
		Running bool   `json:"Running"`
		Pid     int    `json:"Pid"`
		Health  *struct {
			Status string `json:"Status"`
		} `json:"Health"`
	} `json:"State"`
	RestartCount int `json:"RestartCount"`
}

func (h *harness) inspect(ctx context.Context, service string) (containerState, error) {
	id, err := h.containerID(ctx, service)
	if err != nil {
		return containerState{}, err
	}
	out, err := h.run(ctx, "docker", "inspect", id)
	if err != nil {
		return containerState{}, err
	}
	var st []containerState
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		return containerState{}, fmt.Errorf("docker inspect %s: %v: %s", service, err, tail(out, 5))
	}
	return st[0], nil
}

// waitHealthy waits until every one of services is running and healthy.
func (h *harness) waitHealthy(ctx context.Context, timeout time.Duration, services ...string) {
	h.t.Helper()
	h.eventually(ctx, timeout, time.Second, "containers healthy", func() error {
		for _, s := range services {
			st, err := h.inspect(ctx, s)
			if err != nil {
				return err
			}
			if !st.State.Running || st.State.Health == nil || st.State.Health.Status != "healthy" {
				health := "no health check"
				if st.State.Health != nil {
					health = st.State.Health.Status
				}
				return fmt.Errorf("%s: %s, %s", s, st.State.Status, health)
			}
		}
		return nil
	})
}

// port returns the host address of service's published gRPC port.
func (h *harness) port(service string) string {
	h.t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(service, "node"))
	if err != nil || n < 1 || n > len(h.hostPorts) {
		h.t.Fatalf("no service %q", service)
	}
	return fmt.Sprintf("127.0.0.1:%d", h.hostPorts[n-1])
}

// endpoints returns the host addresses of services' gRPC ports, joined for
// --endpoints.
func (h *harness) endpoints(services ...string) string {
	h.t.Helper()
	var eps []string
	for _, s := range services {
		eps = append(eps, h.port(s))
	}
	return strings.Join(eps, ",")
}

// cairn runs the CLI against endpoints.
func (h *harness) cairn(ctx context.Context, endpoints string, args ...string) (string, error) {
	a := append(append([]string{"--endpoints", endpoints, "--timeout", "30s"}, h.cliArgs...), args...)
	cmd := exec.CommandContext(ctx, h.cli, a...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("cairn %s: %w: %s", strings.Join(a, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.String(), nil
}

// member is one entry of `cairn members -o json`.
type member struct {
	ID       string `json:"id"`
	Suffrage string `json:"suffrage"`
	Status   string `json:"status"`
	Leader   bool   `json:"leader"`
	Healthy  bool   `json:"healthy"`
}

func (h *harness) members(ctx context.Context, endpoints string) ([]member, error) {
	out, err := h.cairn(ctx, endpoints, "members", "-o", "json")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Members []member `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return nil, fmt.Errorf("cairn members -o json: %v: %s", err, out)
	}
	return resp.Members, nil
}

// waitVoters waits until the configuration is exactly voters, every one of
// them alive and healthy in the leader's view, and returns the leader's ID.
func (h *harness) waitVoters(ctx context.Context, timeout time.Duration, endpoints string, voters ...string) string {
	h.t.Helper()
	var leader string
	h.eventually(ctx, timeout, time.Second, fmt.Sprintf("voters %v", voters), func() error {
		ms, err := h.members(ctx, endpoints)
		if err != nil {
			return err
		}
		var have []string
		leader = ""
		for _, m := range ms {
			if m.Leader {
				leader = m.ID
			}
			if m.Suffrage != "VOTER" {
				continue
			}
			have = append(have, m.ID)
			if m.Status != "ALIVE" || !m.Healthy {
				return fmt.Errorf("voter %s: %s, healthy=%v", m.ID, m.Status, m.Healthy)
			}
		}
		slices.Sort(have)
		if !slices.Equal(have, voters) {
			return fmt.Errorf("voters %v (members %+v)", have, ms)
		}
		if leader == "" {
			return errors.New("no leader")
		}
		return nil
	})
	return leader
}

// eventually calls f every interval until it succeeds, failing the test
// with f's last error after timeout.
func (h *harness) eventually(ctx context.Context, timeout, interval time.Duration, what string, f func() error) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			h.t.Fatalf("waiting %v for %s: %v", timeout, what, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// key and value of the i-th key the test writes.
func key(i int) string { return fmt.Sprintf("key-%04d", i) }
func (h *harness) value(i int) string {
	return fmt.Sprintf("value-%04d-%s", i, h.project)
}

// putKeys writes keys [from, to) with `cairn put`, workers at a time.
func (h *harness) putKeys(ctx context.Context, endpoints string, from, to, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := h.cairn(ctx, endpoints, "put", key(i), h.value(i)); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for i := from; i < to; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// kv is a key and its value.
type kv struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// checkKeys reports whether kvs is exactly keys [0, n) with their values.
func (h *harness) checkKeys(kvs []kv, n int) error {
	if len(kvs) != n {
		missing := 0
		seen := map[string]bool{}
		for _, e := range kvs {
			seen[e.Key] = true
		}
		first := -1
		for i := range n {
			if !seen[key(i)] {
				missing++
				if first < 0 {
					first = i
				}
			}
		}
		return fmt.Errorf("%d keys, want %d (%d missing, the first %s)", len(kvs), n, missing, key(max(first, 0)))
	}
	for i, e := range kvs {
		if e.Key != key(i) || e.Value != h.value(i) {
			return fmt.Errorf("entry %d is %q=%q, want %q=%q", i, e.Key, e.Value, key(i), h.value(i))
		}
	}
	return nil
}

// scanCLI lists the test's keys with `cairn scan`.
func (h *harness) scanCLI(ctx context.Context, endpoints, consistency string) ([]kv, error) {
	out, err := h.cairn(ctx, endpoints, "scan", "--prefix", "key-", "--consistency", consistency, "-o", "json")
	if err != nil {
		return nil, err
	}
	var kvs []kv
	if err := json.Unmarshal([]byte(out), &kvs); err != nil {
		return nil, fmt.Errorf("cairn scan -o json: %v", err)
	}
	return kvs, nil
}

// scanNode lists the test's keys with linearizable gRPC Scans sent to one
// node (not to the leader: the node itself forwards them).
func (h *harness) scanNode(ctx context.Context, addr string) ([]kv, error) {
	creds := insecure.NewCredentials()
	if h.tls != nil {
		creds = credentials.NewTLS(h.tls)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	kvc := cairnpb.NewKVClient(conn)
	var kvs []kv
	var token []byte
	for {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := kvc.Scan(cctx, &cairnpb.ScanRequest{
			Prefix:      []byte("key-"),
			PageToken:   token,
			Consistency: cairnpb.Consistency_LINEARIZABLE,
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("Scan at %s: %w", addr, err)
		}
		for _, e := range resp.GetKvs() {
			kvs = append(kvs, kv{string(e.GetKey()), string(e.GetValue())})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return kvs, nil
		}
	}
}

// dumpLogs prints the last lines of every node's log.
func (h *harness) dumpLogs(ctx context.Context) {
	out, err := h.composeCmd(ctx, true, "logs", "--no-color", "--tail", "60")
	if err != nil {
		h.t.Logf("compose logs: %v", err)
	}
	h.t.Logf("last log lines of the nodes:\n%s", out)
}

// teardown removes the project's containers, network and volumes, and the
// image, and checks that nothing of the project is left.
func (h *harness) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	// Killing first makes `down` quick; a graceful stop is not under test.
	if _, err := h.composeCmd(ctx, true, "kill"); err != nil {
		h.t.Logf("teardown: %v", err)
	}
	if _, err := h.composeCmd(ctx, true, "down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
		h.t.Errorf("teardown: %v", err)
	}
	label := "label=com.docker.compose.project=" + h.project
	for _, what := range [][]string{
		{"ps", "-a", "-q", "--filter", label},
		{"volume", "ls", "-q", "--filter", label},
		{"network", "ls", "-q", "--filter", label},
	} {
		out, err := h.run(ctx, "docker", what...)
		if err != nil {
			h.t.Errorf("teardown: %v", err)
		} else if s := strings.TrimSpace(out); s != "" {
			h.t.Errorf("teardown left docker %s behind: %s", what[0], strings.ReplaceAll(s, "\n", " "))
		}
	}
	if out, err := h.run(ctx, "docker", "image", "rm", "-f", h.image); err != nil && !strings.Contains(out, "No such image") {
		h.t.Errorf("teardown: %v", err)
	}
	h.t.Logf("teardown (project %s, volumes, image): %v", h.project, time.Since(start).Round(100*time.Millisecond))
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
