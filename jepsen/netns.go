package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The local cluster's network: one Linux network namespace per node, each
// with a veth pair whose other end is in a bridge in the host namespace.
// The harness (in the host namespace) reaches every node through the
// bridge's own address; nodes reach each other through the bridge. A
// partition is a set of nft (or iptables) drop rules inside the nodes'
// namespaces, so it is a real packet drop that only the nodes see.
//
// Every name the harness creates carries namePrefix and the harness's pid:
// namespace "cjep<pid>-n<i>", bridge "cjb<pid>", host-side veth
// "cjv<pid>n<i>", the FORWARD rule's comment "cjep<pid>". The startup sweep
// removes leftovers whose pid is no longer alive (a harness killed with
// SIGKILL cannot clean up after itself).

const namePrefix = "cjep"

// netns is the network of one local cluster run.
type netns struct {
	pid    int
	subnet string // "10.77.S": nodes are .11, .12, ...; the bridge is .1
	nodes  int
	nft    bool // nft available (else iptables inside the namespaces)
	// made records what exists, for teardown in reverse order.
	bridge    bool
	forward   bool // the host FORWARD accept rule
	namespace []bool
	veth      []bool
}

func (n *netns) nsName(i int) string   { return fmt.Sprintf("%s%d-n%d", namePrefix, n.pid, i+1) }
func (n *netns) bridgeName() string    { return fmt.Sprintf("cjb%d", n.pid) }
func (n *netns) vethHost(i int) string { return fmt.Sprintf("cjv%dn%d", n.pid, i+1) }
func (n *netns) vethNode(i int) string { return fmt.Sprintf("cjp%dn%d", n.pid, i+1) }
func (n *netns) nodeIP(i int) string   { return fmt.Sprintf("%s.%d", n.subnet, 11+i) }
func (n *netns) hostIP() string        { return n.subnet + ".1" }
func (n *netns) comment() string       { return fmt.Sprintf("%s%d", namePrefix, n.pid) }

// run runs a command, returning its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// haveNetControl reports whether this process can build namespaces: root,
// and the ip command.
func haveNetControl() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "no ip command (apt-get install iproute2)"
	}
	_, errN := exec.LookPath("nft")
	_, errI := exec.LookPath("iptables")
	if errN != nil && errI != nil {
		return false, "neither nft nor iptables (apt-get install nftables)"
	}
	return true, ""
}

// pickSubnet returns a 10.77.S prefix no interface of the host uses.
func pickSubnet(pid int) (string, error) {
	addrs, _ := output("ip", "-o", "addr")
	routes, _ := output("ip", "route")
	for k := range 200 {
		s := fmt.Sprintf("10.77.%d", (pid+k)%200+20)
		if !strings.Contains(addrs, s+".") && !strings.Contains(routes, s+".") {
			return s, nil
		}
	}
	return "", fmt.Errorf("no free 10.77.x.0/24 subnet")
}

// newNetns builds the network of an n-node cluster. On error it removes
// what it made.
func newNetns(nodes int) (_ *netns, err error) {
	n := &netns{pid: os.Getpid(), nodes: nodes,
		namespace: make([]bool, nodes), veth: make([]bool, nodes)}
	_, errN := exec.LookPath("nft")
	n.nft = errN == nil
	if n.subnet, err = pickSubnet(n.pid); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.teardown()
		}
	}()
	br := n.bridgeName()
	if err := run("ip", "link", "add", br, "type", "bridge"); err != nil {
		return nil, err
	}
	n.bridge = true
	if err := run("ip", "addr", "add", n.hostIP()+"/24", "dev", br); err != nil {
		return nil, err
	}
	if err := run("ip", "link", "set", br, "up"); err != nil {
		return nil, err
	}
	// With br_netfilter loaded (Docker loads it) bridged frames traverse
	// the host's iptables FORWARD chain, whose policy Docker sets to DROP:
	// accept our bridge's own traffic, first in the chain.
	if _, err := exec.LookPath("iptables"); err == nil {
		if err := run("iptables", "-I", "FORWARD", "1", "-i", br, "-o", br, "-m", "comment",
			"--comment", n.comment(), "-j", "ACCEPT"); err != nil {
			fmt.Fprintf(os.Stderr, "jepsen: warning: %v (nodes may not reach each other)\n", err)
		} else {
			n.forward = true
		}
	}
	for i := range nodes {
		ns := n.nsName(i)
		if err := run("ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		n.namespace[i] = true
		if err := run("ip", "link", "add", n.vethHost(i), "type", "veth", "peer", "name", n.vethNode(i)); err != nil {
			return nil, err
		}
		n.veth[i] = true
		for _, args := range [][]string{
			{"link", "set", n.vethNode(i), "netns", ns},
			{"link", "set", n.vethHost(i), "master", br},
			{"link", "set", n.vethHost(i), "up"},
			{"-n", ns, "addr", "add", n.nodeIP(i) + "/24", "dev", n.vethNode(i)},
			{"-n", ns, "link", "set", n.vethNode(i), "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := run("ip", args...); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// block makes node i drop every packet from and to the nodes in from
// (replacing any earlier rule): an empty from heals node i.
func (n *netns) block(i int, from []int) error {
	var ips []string
	for _, j := range from {
		ips = append(ips, n.nodeIP(j))
	}
	return blockIPs([]string{"ip", "netns", "exec", n.nsName(i)}, n.nft, ips)
}

// blockIPs runs nft (or iptables) through enter (a command that runs its
// arguments inside a network namespace: ip netns exec, nsenter) so that
// the namespace drops every packet from and to ips, replacing the rules it
// set before; no ips: accept everything again.
func blockIPs(enter []string, nft bool, ips []string) error {
	cmdIn := func(args ...string) *exec.Cmd {
		all := append(append([]string(nil), enter...), args...)
		return exec.Command(all[0], all[1:]...)
	}
	if nft {
		var b strings.Builder
		// Create then delete, so the table exists for the delete, then
		// build it afresh: one atomic nft transaction.
		b.WriteString("table inet cjepsen {}\ndelete table inet cjepsen\n")
		if len(ips) > 0 {
			set := strings.Join(ips, ", ")
			fmt.Fprintf(&b, "table inet cjepsen {\n chain in { type filter hook input priority -10; policy accept; ip saddr { %s } drop; }\n chain out { type filter hook output priority -10; policy accept; ip daddr { %s } drop; }\n}\n", set, set)
		}
		cmd := cmdIn("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft via %s: %v: %s", strings.Join(enter, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	runIn := func(args ...string) error {
		if out, err := cmdIn(args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if err := runIn("iptables", "-F", chain); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		if err := runIn("iptables", "-A", "INPUT", "-s", ip, "-j", "DROP"); err != nil {
			return err
		}
		if err := runIn("iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// teardown removes everything n made; it reports, and goes on past,
// failures.
func (n *netns) teardown() {
	warn := func(err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "jepsen: cleanup: %v\n", err)
		}
	}
	for i := range n.nodes {
		if n.namespace[i] {
			killNamespacePids(n.nsName(i))
			warn(run("ip", "netns", "del", n.nsName(i)))
			n.namespace[i] = false
		}
		if n.veth[i] {
			// Deleting the namespace deletes the pair; this catches a pair
			// that never moved into it.
			_ = run("ip", "link", "del", n.vethHost(i))
			n.veth[i] = false
		}
	}
	if n.forward {
		warn(run("iptables", "-D", "FORWARD", "-i", n.bridgeName(), "-o", n.bridgeName(), "-m", "comment",
			"--comment", n.comment(), "-j", "ACCEPT"))
		n.forward = false
	}
	if n.bridge {
		warn(run("ip", "link", "del", n.bridgeName()))
		n.bridge = false
	}
}

// killNamespacePids SIGKILLs every process left in a namespace.
func killNamespacePids(ns string) {
	out, err := output("ip", "netns", "pids", ns)
	if err != nil {
		return
	}
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscallKill(pid)
		}
	}
}

// sweepLeftovers removes the namespaces, links and FORWARD rules of
// harness runs whose process is gone. It returns what it removed.
func sweepLeftovers() []string {
	var removed []string
	alive := func(pid int) bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err == nil && pid != 0
	}
	pidOf := func(name, prefix string) int {
		rest := strings.TrimPrefix(name, prefix)
		end := strings.IndexAny(rest, "-n")
		if end < 0 {
			end = len(rest)
		}
		pid, err := strconv.Atoi(rest[:end])
		if err != nil {
			return 0
		}
		return pid
	}
	if out, err := output("ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], namePrefix) {
				continue
			}
			if pid := pidOf(f[0], namePrefix); pid != 0 && !alive(pid) {
				killNamespacePids(f[0])
				if run("ip", "netns", "del", f[0]) == nil {
					removed = append(removed, "netns "+f[0])
				}
			}
		}
	}
	if out, err := output("ip", "-o", "link", "show"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimSuffix(f[1], ":")
			if at := strings.IndexByte(name, '@'); at >= 0 {
				name = name[:at]
			}
			for _, p := range []string{"cjb", "cjv"} {
				if strings.HasPrefix(name, p) {
					if pid := pidOf(name, p); pid != 0 && !alive(pid) {
						if run("ip", "link", "del", name) == nil {
							removed = append(removed, "link "+name)
						}
					}
				}
			}
		}
	}
	if out, err := output("iptables", "-S", "FORWARD"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			i := strings.Index(line, "--comment "+namePrefix)
			if !strings.HasPrefix(line, "-A FORWARD") || i < 0 {
				continue
			}
			c := strings.Fields(line[i+len("--comment "):])[0]
			if pid := pidOf(c, namePrefix); pid != 0 && !alive(pid) {
				args := append([]string{"-D"}, strings.Fields(strings.TrimPrefix(line, "-A "))...)
				if run("iptables", args...) == nil {
					removed = append(removed, "iptables rule "+c)
				}
			}
		}
	}
	return removed
}
