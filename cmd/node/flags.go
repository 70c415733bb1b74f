package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/cluster/membership"
	"github.com/cairnkv/cairn/lsm"
)

// options are the server's flags.
type options struct {
	id, dataDir                             string
	grpcAddr, raftAddr, gossipAddr          string
	advGRPCAddr, advRaftAddr, advGossipAddr string
	join                                    listFlag
	bootstrapExpect                         int
	gossipKey                               string
	nonVoter                                bool
	unsafeLocalReads                        bool
	maxValueSize, memtableSize, cacheSize   sizeFlag
	logLevel, logFormat                     string
	metricsAddr                             string
	pprof                                   bool
	configFile                              string
	raftStorage                             raftStorageFlags
	security                                securityFlags
	tls                                     tlsFlags
	auth                                    authFlags
	policy                                  policyFlags
	fs                                      *flag.FlagSet
	explicitlySet                           map[string]bool // flags the command line or the file set
}

func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("cairn-node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.id, "id", "", "node ID, unique in the cluster (default: the one recorded in --data-dir, else the host name)")
	fs.StringVar(&o.dataDir, "data-dir", "./cairn-data", "data directory")
	fs.StringVar(&o.grpcAddr, "grpc-addr", cluster.DefaultGRPCAddr, "gRPC listen address")
	fs.StringVar(&o.raftAddr, "raft-addr", cluster.DefaultRaftAddr, "raft listen address")
	fs.StringVar(&o.gossipAddr, "gossip-addr", cluster.DefaultGossipAddr, "gossip (memberlist) listen address, TCP and UDP")
	fs.StringVar(&o.advGRPCAddr, "advertise-grpc-addr", "", "gRPC address other nodes and clients dial (default: the listen address)")
	fs.StringVar(&o.advRaftAddr, "advertise-raft-addr", "", "raft address other nodes dial (default: the listen address)")
	fs.StringVar(&o.advGossipAddr, "advertise-gossip-addr", "", "gossip address other nodes dial (default: the listen address)")
	fs.Var(&o.join, "join", "comma-separated gossip addresses of nodes to join")
	fs.IntVar(&o.bootstrapExpect, "bootstrap-expect", 1, "form a new cluster once this many servers are seen (default 1 without --join, 0 with it: join an existing cluster)")
	fs.StringVar(&o.gossipKey, "gossip-key", "", "base64 key (16, 24 or 32 bytes) encrypting gossip; the same on every node (recommended; it shows in the process list: prefer --gossip-key-file). Once the node has a keyring file (data-dir/gossip.keyring), that wins")
	fs.BoolVar(&o.nonVoter, "non-voter", false, "stay a non-voting member (a read replica)")
	// Hidden (printUsage skips "unsafe-" flags): for the jepsen harness's
	// must-fail check only.
	fs.BoolVar(&o.unsafeLocalReads, "unsafe-local-reads", false, "BREAKS LINEARIZABILITY: serve linearizable reads locally, without read-index (jepsen must-fail check only)")
	o.maxValueSize = sizeFlag(cairnpb.DefaultMaxValueSize)
	fs.Var(&o.maxValueSize, "max-value-size", "largest value a write may carry (same on every node), e.g. 16MiB")
	o.memtableSize = 16 << 20
	fs.Var(&o.memtableSize, "memtable-size", "engine memtable size, e.g. 64MiB")
	o.cacheSize = 64 << 20
	fs.Var(&o.cacheSize, "cache-size", "engine block cache size, e.g. 1GiB")
	o.policy.register(fs)
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text (logfmt) or json; raft's and memberlist's logs go to the same stream, every line with the node ID")
	fs.StringVar(&o.metricsAddr, "metrics-addr", defaultMetricsAddr, "HTTP address of the status page (/), Prometheus metrics (/metrics), /healthz and /readyz; empty disables it. The default is best effort: if its port is taken (a second node on the host) the node logs a warning and serves none; an address given explicitly must be free")
	fs.BoolVar(&o.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the metrics address")
	fs.StringVar(&o.configFile, "config", "", "JSON file of flag values (keys are flag names; command-line flags win)")
	o.raftStorage.register(fs)
	o.security.register(fs)
	o.tls.register(fs)
	o.auth.register(fs)
	fs.Usage = func() {} // errors are reported in one line; -h prints printUsage
	return fs
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "%s\n\nFlags:\n", usageLine)
	// PrintDefaults of a copy without the hidden flags.
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "unsafe-") {
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	shown.SetOutput(w)
	shown.PrintDefaults()
}

// parseFlags parses args and the --config file. Errors are exitErrors with
// code 2 (flag.ErrHelp for -h, after printing the usage).
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := newFlagSet(o)
	o.fs = fs
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stderr)
			return nil, err
		}
		return nil, &exitError{2, fmt.Errorf("%v (%s)", err, usageLine)}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{2, fmt.Errorf("unexpected argument %q (%s)", fs.Arg(0), usageLine)}
	}
	o.explicitlySet = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.explicitlySet[f.Name] = true })
	if o.configFile != "" {
		if err := o.loadConfigFile(); err != nil {
			return nil, &exitError{2, err}
		}
	}
	return o, nil
}

// loadConfigFile sets every flag the file names and the command line did
// not.
func (o *options) loadConfigFile() error {
	b, err := os.ReadFile(o.configFile)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("config file %s: %w", o.configFile, err)
	}
	for name, raw := range m {
		f := o.fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("config file %s: unknown key %q", o.configFile, name)
		}
		if o.explicitlySet[name] {
			continue
		}
		var value string
		var s string
		var list []string
		var num json.Number
		switch {
		case json.Unmarshal(raw, &s) == nil:
			value = s
		case json.Unmarshal(raw, &list) == nil:
			value = strings.Join(list, ",")
		case json.Unmarshal(raw, &num) == nil:
			value = num.String()
		default:
			value = strings.TrimSpace(string(raw)) // true, false
		}
		if err := o.fs.Set(name, value); err != nil {
			return fmt.Errorf("config file %s: %s: %v", o.configFile, name, err)
		}
		o.explicitlySet[name] = true
	}
	return nil
}

var hostIDChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// clusterConfig turns the options into a cluster.Config.
func (o *options) clusterConfig(stderr io.Writer) (cluster.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cluster.Config{}, fmt.Errorf("log level %q: use debug, info, warn or error", o.logLevel)
	}
	id := o.id
	if id == "" {
		if b, err := os.ReadFile(filepath.Join(o.dataDir, "node-id")); err == nil {
			id = strings.TrimSpace(string(b))
		}
	}
	if id == "" {
		if h, err := os.Hostname(); err == nil {
			id = hostIDChars.ReplaceAllString(strings.Split(h, ".")[0], "-")
		}
	}
	if id == "" {
		id = "node1"
	}
	expect := o.bootstrapExpect
	if !o.explicitlySet["bootstrap-expect"] && len(o.join) > 0 {
		expect = 0
	}
	var gossipKey []byte
	if o.gossipKey != "" {
		k, err := base64.StdEncoding.DecodeString(o.gossipKey)
		if err != nil || (len(k) != 16 && len(k) != 24 && len(k) != 32) {
			return cluster.Config{}, fmt.Errorf("--gossip-key must be base64 of 16, 24 or 32 bytes")
		}
		gossipKey = k
	}
	var handler slog.Handler
	switch o.logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return cluster.Config{}, fmt.Errorf("log format %q: use text or json", o.logFormat)
	}
	if o.pprof && o.metricsAddr == "" {
		return cluster.Config{}, fmt.Errorf("--pprof needs a --metrics-addr to serve on")
	}
	logger := slog.New(handler)
	if err := o.raftStorage.check(); err != nil {
		return cluster.Config{}, err
	}
	cfg := cluster.Config{
		GossipKey:           gossipKey,
		ID:                  id,
		DataDir:             o.dataDir,
		GRPCAddr:            o.grpcAddr,
		RaftAddr:            o.raftAddr,
		GossipAddr:          o.gossipAddr,
		AdvertiseGRPCAddr:   o.advGRPCAddr,
		AdvertiseRaftAddr:   o.advRaftAddr,
		AdvertiseGossipAddr: o.advGossipAddr,
		Join:                o.join,
		BootstrapExpect:     expect,
		NonVoter:            o.nonVoter,
		UnsafeLocalReads:    o.unsafeLocalReads,
		MaxValueSize:        int(o.maxValueSize),
		Engine: &lsm.Options{
			MemTableSizeBytes: int64(o.memtableSize),
			CacheSizeBytes:    int64(o.cacheSize),
		},
		Policy:              o.policy.policy(),
		SkipLeaveOnShutdown: !o.policy.leaveOnStop,
		Logger:              logger,
		RaftLogLevel:        max(level, slog.LevelInfo),
	}
	o.raftStorage.apply(&cfg)
	if err := o.security.apply(&cfg, o.gossipKey, o.configFile, logger); err != nil {
		return cluster.Config{}, err
	}
	if err := o.tls.apply(&cfg); err != nil {
		return cluster.Config{}, err
	}
	if err := o.auth.apply(&cfg, logger); err != nil {
		return cluster.Config{}, err
	}
	return cfg, nil
}

// raftStorageFlags are the flags of the raft log store and of raft
// snapshots and log compaction (cluster.Config's RaftLogStore and
// Snapshot* fields).
type raftStorageFlags struct {
	logStore          string
	snapshotThreshold uint64
	snapshotInterval  time.Duration
	trailingLogs      uint64
	snapshotRetain    int
	// trailingBytes and snapshotThresholdBytes: 0 is no byte bound.
	trailingBytes, snapshotThresholdBytes sizeFlag
	walSegmentSize                        sizeFlag
}

func (r *raftStorageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.logStore, "raft-log-store", "", "raft log store: wal or boltdb (default: boltdb for a data directory that already has raft/raft.db, else wal)")
	fs.Uint64Var(&r.snapshotThreshold, "raft-snapshot-threshold", cluster.DefaultSnapshotThreshold, "take a raft snapshot once this many log entries were written since the last one")
	fs.DurationVar(&r.snapshotInterval, "raft-snapshot-interval", cluster.DefaultSnapshotInterval, "how often raft checks the snapshot threshold (each wait is random between this and twice this); at least 5ms")
	fs.Uint64Var(&r.trailingLogs, "raft-trailing-logs", cluster.DefaultTrailingLogs, "log entries kept after a snapshot, so a follower slightly behind catches up from the log instead of a snapshot")
	fs.IntVar(&r.snapshotRetain, "raft-snapshot-retain", cluster.DefaultSnapshotRetain, "raft snapshots kept on disk (at least 1)")
	r.trailingBytes = cluster.DefaultTrailingLogBytes
	fs.Var(&r.trailingBytes, "raft-trailing-bytes", "bytes of log entries kept after a snapshot, e.g. 64MiB (the fewer entries of this and --raft-trailing-logs win; at least 16; the leader keeps more for a live follower behind); 0: entries only")
	r.snapshotThresholdBytes = cluster.DefaultSnapshotThresholdBytes
	fs.Var(&r.snapshotThresholdBytes, "raft-snapshot-threshold-bytes", "take a raft snapshot once the log entries applied since the last one hold this many bytes, e.g. 128MiB, even if fewer than --raft-snapshot-threshold (checked every 250ms); 0: entries only")
	r.walSegmentSize = cluster.DefaultRaftWALSegmentSize
	fs.Var(&r.walSegmentSize, "raft-wal-segment-size", "size of a raft-wal segment file, 1MiB to 1GiB, e.g. 16MiB: each is preallocated and log compaction removes whole ones, so smaller takes less disk, larger means fewer files and rotations; applies to new segments")
}

// check reports the first bad value, naming its flag.
func (r *raftStorageFlags) check() error {
	switch {
	case r.logStore != "" && r.logStore != cluster.LogStoreWAL && r.logStore != cluster.LogStoreBoltDB:
		return fmt.Errorf("--raft-log-store %q: unknown raft log store (use %s or %s)", r.logStore, cluster.LogStoreWAL, cluster.LogStoreBoltDB)
	case r.snapshotThreshold == 0:
		return fmt.Errorf("--raft-snapshot-threshold 0: must be at least 1")
	case r.snapshotInterval < 5*time.Millisecond:
		return fmt.Errorf("--raft-snapshot-interval %v: must be at least 5ms", r.snapshotInterval)
	case r.trailingLogs == 0:
		return fmt.Errorf("--raft-trailing-logs 0: must be at least 1")
	case r.snapshotRetain < 1:
		return fmt.Errorf("--raft-snapshot-retain %d: must keep at least 1 snapshot", r.snapshotRetain)
	case r.walSegmentSize < cluster.MinRaftWALSegmentSize || r.walSegmentSize > cluster.MaxRaftWALSegmentSize:
		return fmt.Errorf("--raft-wal-segment-size %d: must be 1MiB to 1GiB", r.walSegmentSize)
	}
	return nil
}

func (r *raftStorageFlags) apply(c *cluster.Config) {
	c.RaftLogStore = r.logStore
	c.SnapshotThreshold = r.snapshotThreshold
	c.SnapshotInterval = r.snapshotInterval
	c.TrailingLogs = r.trailingLogs
	c.SnapshotRetain = r.snapshotRetain
	c.TrailingLogBytes, c.SnapshotThresholdBytes = byteBound(r.trailingBytes), byteBound(r.snapshotThresholdBytes)
	c.RaftWALSegmentSize = int64(r.walSegmentSize)
}

// byteBound turns a byte bound flag into cluster.Config's: 0 (none) is -1.
func byteBound(s sizeFlag) int64 {
	if s == 0 {
		return -1
	}
	return int64(s)
}

// policyFlags are the operator's membership policy: how the leader's
// reconcile loop grows and shrinks the raft configuration
// (membership.Policy), and whether a graceful stop leaves it. The policy in
// force is the leader's, so set these alike on every node; leave-on-stop is
// each node's own.
type policyFlags struct {
	deadServerGrace   time.Duration
	minVoters         int
	maxVoters         int
	stabilizationTime time.Duration
	maxPending        int
	leaveOnStop       bool
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	def := membership.DefaultPolicy()
	fs.DurationVar(&p.deadServerGrace, "dead-server-grace", def.FailedGracePeriod,
		"membership: how long a server that failed (gossip says dead, or it is unknown to gossip) stays in the raft configuration before the leader removes it; it is never removed while raft still reaches it, nor below --min-voters")
	fs.IntVar(&p.minVoters, "min-voters", def.MinQuorum,
		"membership: the leader never removes or demotes voters below this many (so with the default 3 and no spare, a failed voter of a 3-voter cluster stays a voter until it returns or is removed by hand; with a caught-up non-voter, the spare takes its place at once and the lost voter is demoted); 0 allows shrinking to the leader alone")
	fs.IntVar(&p.maxVoters, "max-voters", def.MaxVoters,
		"membership: at most this many voters (an even number counts as the odd one below it); other members stay non-voters, read replicas that take over when a voter goes; 0 means no cap")
	fs.DurationVar(&p.stabilizationTime, "stabilization-time", def.StabilizationTime,
		"membership: how long a non-voter must have been healthy and caught up before the leader promotes it to voter")
	fs.IntVar(&p.maxPending, "max-pending-nonvoters", def.MaxPendingNonVoters,
		"membership: the leader adds new members (as non-voters) only while fewer than this many non-voters are still catching up; the others wait until those are ready, which bounds the snapshot and log traffic joining nodes put on the leader (members started with --non-voter do not count); -1 means no cap")
	fs.BoolVar(&p.leaveOnStop, "leave-on-stop", true,
		"membership: a graceful stop (SIGTERM, SIGINT) announces a leave, and the leader removes the node from the configuration at once (floor permitting); with false, a stop looks like a failure: the node stays for --dead-server-grace, as for a restart")
}

// policy returns the reconcile policy the flags describe; the settings
// without a flag keep their defaults.
func (p *policyFlags) policy() membership.Policy {
	pol := membership.DefaultPolicy()
	pol.FailedGracePeriod = p.deadServerGrace
	pol.MinQuorum = p.minVoters
	pol.MaxVoters = p.maxVoters
	pol.StabilizationTime = p.stabilizationTime
	pol.MaxPendingNonVoters = p.maxPending
	return pol
}

// listFlag is a comma-separated list; repeating the flag appends.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// sizeFlag is a byte size: a number with an optional unit (B, KiB, MiB,
// GiB, or KB, MB, GB as powers of 1024 too).
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, e.g. 64MiB", v)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", v, err)
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB or GiB)", v, t[i:])
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q too large", v)
	}
	return n << shift, nil
}
