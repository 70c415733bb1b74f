package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// dockerCluster is the docker-compose cluster of docker-compose.yml, run
// as a compose project of the harness's own ("cjepsen<pid>", on a subnet
// of its own, with no published ports) so that it neither meets nor
// disturbs a cluster started with `make cluster-up`. The harness dials the
// containers' IPs on the compose network (a Linux host reaches them).
// Kills are `docker kill`, pauses `docker pause`, graceful stops `docker
// stop`; partitions are nft or iptables rules run in each container's
// network namespace from the host (nsenter --net=/proc/PID/ns/net), so the
// image needs no tools. A container that restarts gets a fresh namespace,
// without the rules.
type dockerCluster struct {
	project string
	env     []string
	nodes   []NodeInfo
	nft     bool
	ips     []string
	logDir  string
}

func newDockerCluster(ctx context.Context, cfg config, logDir string, logln func(string, ...any)) (_ *dockerCluster, err error) {
	if cfg.nodes != 3 && cfg.nodes != 5 {
		return nil, fmt.Errorf("docker mode runs the compose file's 3 nodes, or 5 with its scale profile (--nodes %d)", cfg.nodes)
	}
	if cfg.unsafeReads {
		return nil, errors.New("--unsafe-local-reads is for local mode only")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, errors.New("docker mode: no docker command")
	}
	if os.Geteuid() != 0 {
		logln("jepsen: not root: no partitions in docker mode (nsenter needs root)")
	}
	pid := os.Getpid()
	subnet, err := pickSubnet(pid + 100)
	if err != nil {
		return nil, err
	}
	d := &dockerCluster{project: fmt.Sprintf("cjepsen%d", pid), logDir: logDir}
	_, errN := exec.LookPath("nft")
	d.nft = errN == nil
	d.env = append(os.Environ(), "COMPOSE_PROJECT_NAME="+d.project, "CAIRN_NET="+subnet)
	if os.Getenv("CAIRN_IMAGE") == "" {
		// An image of its own: building cairn:latest would replace the one
		// `make cluster-up` or the compose test may be using.
		d.env = append(d.env, "CAIRN_IMAGE=cairn-jepsen:latest")
	}
	for i := 1; i <= 5; i++ {
		d.env = append(d.env, fmt.Sprintf("CAIRN_NODE%d_PORT=", i)) // set but empty: no fixed host port
	}
	if os.Getenv("CAIRN_JEPSEN_SKIP_IMAGE") == "" {
		logln("jepsen: building the image (make docker)")
		if out, err := d.cmd("make", "docker").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("make docker: %v\n%s", err, out)
		}
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	args := []string{"compose", "up", "-d"}
	if cfg.nodes == 5 {
		args = []string{"compose", "--profile", "scale", "up", "-d"}
	}
	if out, err := d.cmd("bash", append([]string{"deploy/cluster.sh"}, args...)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compose up: %v\n%s", err, out)
	}
	for i := range cfg.nodes {
		ip := fmt.Sprintf("%s.%d", subnet, 11+i)
		d.ips = append(d.ips, ip)
		d.nodes = append(d.nodes, NodeInfo{ID: fmt.Sprintf("node%d", i+1), GRPCAddr: ip + ":7379", RaftAddr: ip + ":7380"})
	}
	return d, nil
}

func (d *dockerCluster) cmd(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = d.env
	return c
}

func (d *dockerCluster) Nodes() []NodeInfo { return d.nodes }

// container is node i's container name (compose v2 naming; v1 uses "_").
func (d *dockerCluster) container(i int) string {
	out, err := d.cmd("bash", "deploy/cluster.sh", "compose", "--profile", "scale", "ps", "-a", "-q", d.nodes[i].ID).Output()
	if id := strings.TrimSpace(string(out)); err == nil && id != "" {
		return strings.Fields(id)[0]
	}
	return fmt.Sprintf("%s-%s-1", d.project, d.nodes[i].ID)
}

func (d *dockerCluster) docker(args ...string) error {
	if out, err := d.cmd("docker", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *dockerCluster) Kill(i int) error   { return d.docker("kill", d.container(i)) }
func (d *dockerCluster) Stop(i int) error   { return d.docker("stop", "-t", "35", d.container(i)) }
func (d *dockerCluster) Pause(i int) error  { return d.docker("pause", d.container(i)) }
func (d *dockerCluster) Resume(i int) error { return d.docker("unpause", d.container(i)) }

// Start starts node i's container unless it runs (a paused one is left
// to Resume).
func (d *dockerCluster) Start(i int) error {
	c := d.container(i)
	out, err := d.cmd("docker", "inspect", "-f", "{{.State.Running}}", c).Output()
	if err == nil && strings.TrimSpace(string(out)) == "true" {
		return nil
	}
	return d.docker("start", c)
}

func (d *dockerCluster) CanPartition() bool {
	_, err := exec.LookPath("nsenter")
	return os.Geteuid() == 0 && err == nil
}

func (d *dockerCluster) pid(i int) (string, error) {
	out, err := d.cmd("docker", "inspect", "-f", "{{.State.Pid}}", d.container(i)).Output()
	p := strings.TrimSpace(string(out))
	if err != nil || p == "" || p == "0" {
		return "", fmt.Errorf("%s: not running", d.nodes[i].ID)
	}
	return p, nil
}

func (d *dockerCluster) Partition(cut [][2]int) error {
	blocked := make([][]string, len(d.nodes))
	for _, p := range cut {
		blocked[p[0]] = append(blocked[p[0]], d.ips[p[1]])
		blocked[p[1]] = append(blocked[p[1]], d.ips[p[0]])
	}
	var errs []error
	for i := range d.nodes {
		pid, err := d.pid(i)
		if err != nil {
			if len(blocked[i]) > 0 {
				errs = append(errs, err)
			}
			continue
		}
		errs = append(errs, blockIPs([]string{"nsenter", "--net=/proc/" + pid + "/ns/net"}, d.nft, blocked[i]))
	}
	return errors.Join(errs...)
}

// Close saves the nodes' logs and removes the project's containers,
// network and volumes.
func (d *dockerCluster) Close() error {
	if d.logDir != "" {
		_ = os.MkdirAll(d.logDir, 0o755)
		for i, n := range d.nodes {
			out, _ := d.cmd("docker", "logs", "-t", d.container(i)).CombinedOutput()
			_ = os.WriteFile(d.logDir+"/"+n.ID+".log", out, 0o644)
		}
	}
	for i := range d.nodes {
		_ = d.docker("unpause", d.container(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "deploy/cluster.sh", "compose", "--profile", "scale", "down", "-v", "-t", "5")
	c.Env = d.env
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("compose down: %v: %s", err, out)
	}
	return nil
}
