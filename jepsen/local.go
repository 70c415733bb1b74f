package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/internal/certs"
)

// localCluster runs cairn-node processes on this machine: each in a
// network namespace of its own when the harness may build them (root),
// else all on 127.0.0.1 with distinct ports (no partitions then).
type localCluster struct {
	bin     string
	dataDir string // node data directories (removed by Close)
	logDir  string // node logs (kept: part of the report)
	extra   []string
	net     *netns // nil without network control
	nodes   []NodeInfo
	args    [][]string  // each node's command line (without the binary)
	tls     *tls.Config // the clients' TLS configuration; nil: plaintext

	mu      sync.Mutex
	procs   []*proc  // nil: not running
	crashes []string // exits nobody asked for
	keepDir string   // if set, Close moves the data directories here
}

type proc struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	expected atomic.Bool   // the harness signalled it to exit
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// localConfig configures a local cluster.
type localConfig struct {
	Nodes   int
	Bin     string
	LogDir  string
	NetNS   bool     // build namespaces (needs root)
	Extra   []string // more cairn-node flags for every node
	BaseDir string   // where data directories go (a temp dir by default)
	// TLS makes a CA and certificates (package internal/certs, as
	// `cairn-node certs` does) in the work directory and runs the nodes
	// with TLS between them and mutual TLS for clients.
	TLS bool
}

// tlsClient is the name of the clients' certificate (TLS runs).
const tlsClient = "jepsen"

func newLocalCluster(cfg localConfig) (_ *localCluster, err error) {
	c, err := planLocalCluster(cfg)
	if err != nil {
		return nil, err
	}
	for i := range c.nodes {
		if err := c.Start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// planLocalCluster makes a local cluster's directories, network and
// certificates and the nodes' command lines, without starting them.
func planLocalCluster(cfg localConfig) (_ *localCluster, err error) {
	c := &localCluster{bin: cfg.Bin, logDir: cfg.LogDir, extra: cfg.Extra, procs: make([]*proc, cfg.Nodes)}
	if c.dataDir, err = os.MkdirTemp(cfg.BaseDir, "cairn-jepsen-data-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	if cfg.NetNS {
		if c.net, err = newNetns(cfg.Nodes); err != nil {
			return nil, err
		}
	}
	var gossip []string
	for i := range cfg.Nodes {
		host, base := "127.0.0.1", 17000+10*i+(os.Getpid()%300)*50
		if c.net != nil {
			host, base = c.net.nodeIP(i), 7379
		}
		addr := func(off int) string { return fmt.Sprintf("%s:%d", host, base+off) }
		c.nodes = append(c.nodes, NodeInfo{ID: fmt.Sprintf("n%d", i+1), GRPCAddr: addr(0), RaftAddr: addr(1)})
		gossip = append(gossip, addr(2))
	}
	for i, n := range c.nodes {
		var join []string
		for j, g := range gossip {
			if j != i {
				join = append(join, g)
			}
		}
		args := []string{
			"--id", n.ID, "--data-dir", filepath.Join(c.dataDir, n.ID),
			"--grpc-addr", n.GRPCAddr, "--raft-addr", n.RaftAddr, "--gossip-addr", gossip[i],
			"--bootstrap-expect", fmt.Sprint(cfg.Nodes), "--join", strings.Join(join, ","),
			// A stop is a restart here: the node keeps its place.
			"--leave-on-stop=false",
			// Re-promote a node the membership nemesis removed quickly.
			"--stabilization-time", "3s",
		}
		c.args = append(c.args, append(args, cfg.Extra...))
	}
	if cfg.TLS {
		if err := c.makeCerts(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// makeCerts writes a CA, a certificate per node (naming the node's host,
// which clients dial) and a client certificate into the work directory,
// adds the TLS flags to the nodes' command lines and sets c.tls.
func (c *localCluster) makeCerts() error {
	dir := filepath.Join(c.dataDir, "certs")
	var names, hosts []string
	for _, n := range c.nodes {
		names = append(names, n.ID)
		if h, _, err := net.SplitHostPort(n.GRPCAddr); err == nil && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if _, err := certs.Generate(certs.Options{Dir: dir, Nodes: names, Hosts: hosts, Clients: []string{tlsClient}}); err != nil {
		return err
	}
	ca := filepath.Join(dir, certs.CAFile)
	for i, n := range c.nodes {
		c.args[i] = append(c.args[i],
			"--tls-cert", filepath.Join(dir, certs.CertFile(n.ID)), "--tls-key", filepath.Join(dir, certs.KeyFile(n.ID)),
			"--tls-peer-ca", ca, "--tls-client-ca", ca)
	}
	var err error
	c.tls, err = client.LoadTLS(ca, filepath.Join(dir, certs.CertFile(tlsClient)), filepath.Join(dir, certs.KeyFile(tlsClient)))
	return err
}

// ClientTLS is the TLS configuration of the cluster's clients (nil:
// plaintext).
func (c *localCluster) ClientTLS() *tls.Config { return c.tls }

func (c *localCluster) Nodes() []NodeInfo  { return c.nodes }
func (c *localCluster) CanPartition() bool { return c.net != nil }

// Start starts node i unless it runs.
func (c *localCluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[i]; p != nil {
		select {
		case <-p.done:
		default:
			return nil // running
		}
	}
	logf, err := os.OpenFile(filepath.Join(c.logDir, c.nodes[i].ID+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== jepsen: start %s at %s: %s %s\n", c.nodes[i].ID, time.Now().UTC().Format(time.RFC3339Nano), c.bin, strings.Join(c.args[i], " "))
	var cmd *exec.Cmd
	if c.net != nil {
		// ip netns exec execs the node: the pid is the node's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", c.net.nsName(i), c.bin}, c.args[i]...)...)
	} else {
		cmd = exec.Command(c.bin, c.args[i]...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// The node dies with the harness, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", c.nodes[i].ID, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	c.procs[i] = p
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "==== jepsen: %s exited at %s: %v\n", c.nodes[i].ID, time.Now().UTC().Format(time.RFC3339Nano), err)
		logf.Close()
		if !p.expected.Load() {
			c.mu.Lock()
			c.crashes = append(c.crashes, fmt.Sprintf("%s exited by itself at %s: %v (see nodes/%s.log)",
				c.nodes[i].ID, time.Now().UTC().Format(time.RFC3339), err, c.nodes[i].ID))
			c.mu.Unlock()
		}
		close(p.done)
	}()
	return nil
}

func (c *localCluster) proc(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
		return p
	}
}

var errNotRunning = errors.New("node not running")

func (c *localCluster) signal(i int, sig syscall.Signal) error {
	p := c.proc(i)
	if p == nil {
		return errNotRunning
	}
	return p.cmd.Process.Signal(sig)
}

func (c *localCluster) Kill(i int) error {
	p := c.proc(i)
	if p == nil {
		return errNotRunning
	}
	p.expected.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Crashes lists the node exits the harness did not cause.
func (c *localCluster) Crashes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.crashes...)
}

// KeepData moves the data directories to dir at Close instead of
// removing them (for a run that failed).
func (c *localCluster) KeepData(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keepDir = dir
}

func (c *localCluster) Stop(i int) error {
	p := c.proc(i)
	if p == nil {
		return errNotRunning
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("stop %s: no exit 30s after SIGTERM; killed", c.nodes[i].ID)
	}
}

func (c *localCluster) Pause(i int) error  { return c.signal(i, syscall.SIGSTOP) }
func (c *localCluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *localCluster) Partition(cut [][2]int) error {
	if c.net == nil {
		return errors.New("partitions need network namespaces (run as root)")
	}
	blocked := make([][]int, len(c.nodes))
	for _, p := range cut {
		blocked[p[0]] = append(blocked[p[0]], p[1])
		blocked[p[1]] = append(blocked[p[1]], p[0])
	}
	var errs []error
	for i := range c.nodes {
		errs = append(errs, c.net.block(i, blocked[i]))
	}
	return errors.Join(errs...)
}

// Close kills every node, removes the network and the data directories.
// After a failed run (KeepData) it first sends SIGQUIT, so that every
// node's log ends with its goroutine dump.
func (c *localCluster) Close() error {
	c.mu.Lock()
	dump := c.keepDir != ""
	c.mu.Unlock()
	for i := range c.procs {
		if p := c.proc(i); p != nil {
			p.expected.Store(true)
			if dump {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-p.done:
				case <-time.After(5 * time.Second):
				}
			}
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
		}
	}
	if c.net != nil {
		c.net.teardown()
	}
	c.mu.Lock()
	keep := c.keepDir
	c.mu.Unlock()
	if keep != "" {
		if err := os.Rename(c.dataDir, keep); err == nil {
			return nil
		}
		// Another file system: copy.
		if err := exec.Command("cp", "-a", c.dataDir, keep).Run(); err != nil {
			return fmt.Errorf("keep data in %s: %w", keep, err)
		}
	}
	return os.RemoveAll(c.dataDir)
}
