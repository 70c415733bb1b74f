package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

// securityFlags are the flags of the limits a node puts on its clients and
// of the gossip key file (README.md, "Security").
type securityFlags struct {
	requestTimeout       time.Duration
	maxRequestTimeout    time.Duration
	maxConcurrentStreams uint
	maxConnsPerIP        int
	gossipKeyFile        string
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&s.requestTimeout, "request-timeout", 10*time.Second, "deadline of a request that arrives without one")
	fs.DurationVar(&s.maxRequestTimeout, "max-request-timeout", cluster.DefaultMaxRequestTimeout, "longest deadline a request may have: a later one is cut to this (streams such as backup and trace are not cut)")
	fs.UintVar(&s.maxConcurrentStreams, "max-concurrent-streams", cluster.DefaultMaxConcurrentStreams, "calls one client connection may have open at once (more wait for a free one)")
	fs.IntVar(&s.maxConnsPerIP, "max-conns-per-ip", cluster.DefaultMaxConnsPerIP, "gRPC connections one remote IP address may have open at once; further ones are closed as soon as they are accepted (-1: no cap)")
	fs.StringVar(&s.gossipKeyFile, "gossip-key-file", "", "file holding the base64 gossip key (instead of --gossip-key, which shows in the process list); it should be mode 0600")
}

// apply sets the limits in c and, with --gossip-key-file, its gossip key
// (gossipKey is --gossip-key's value). A key file, or a --config file
// that sets gossip-key, readable by others is used with a warning.
func (s *securityFlags) apply(c *cluster.Config, gossipKey, configFile string, log *slog.Logger) error {
	switch {
	case s.requestTimeout <= 0:
		return fmt.Errorf("--request-timeout %v: must be positive", s.requestTimeout)
	case s.maxRequestTimeout < s.requestTimeout:
		return fmt.Errorf("--max-request-timeout %v is below --request-timeout %v", s.maxRequestTimeout, s.requestTimeout)
	case s.maxConcurrentStreams == 0 || s.maxConcurrentStreams > 1<<31:
		return fmt.Errorf("--max-concurrent-streams %d: must be between 1 and 2^31", s.maxConcurrentStreams)
	}
	c.RequestTimeout, c.MaxRequestTimeout = s.requestTimeout, s.maxRequestTimeout
	c.MaxConcurrentStreams = uint32(s.maxConcurrentStreams)
	c.MaxConnsPerIP = s.maxConnsPerIP // checked by cluster.Config.Validate
	if gossipKey != "" && configFile != "" && configHasKey(configFile, "gossip-key") {
		cluster.WarnIfReadableByOthers(log, configFile, "config (it holds --gossip-key)")
	}
	if s.gossipKeyFile == "" {
		return nil
	}
	if gossipKey != "" {
		return fmt.Errorf("--gossip-key and --gossip-key-file: give one of them")
	}
	b, err := os.ReadFile(s.gossipKeyFile)
	if err != nil {
		return fmt.Errorf("--gossip-key-file: %w", err)
	}
	cluster.WarnIfReadableByOthers(log, s.gossipKeyFile, "gossip key")
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || (len(k) != 16 && len(k) != 24 && len(k) != 32) {
		// Never echo the file's contents: it is a secret.
		return fmt.Errorf("--gossip-key-file %s: must hold base64 of 16, 24 or 32 bytes", s.gossipKeyFile)
	}
	c.GossipKey = k
	return nil
}

// configHasKey reports whether the JSON config file name sets key.
func configHasKey(name, key string) bool {
	b, err := os.ReadFile(name)
	if err != nil {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}
