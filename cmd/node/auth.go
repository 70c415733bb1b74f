package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/cairnkv/cairn/cluster"
)

// authFlags are the flags of authorization (README.md, "Security",
// "Authorization"; cluster/auth).
type authFlags struct {
	file          string
	peerTokenFile string
	insecureNoTLS bool
}

func (a *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.file, "auth-file", "", "authorization policy (JSON: certificate names and sha256 token hashes to roles read-only, read-write, admin, peer); "+
		"every call but health checks then needs a client certificate or a bearer token with the method's role. Default: no authorization")
	fs.StringVar(&a.peerTokenFile, "auth-peer-token-file", "", "file holding the bearer token this node sends on its calls to other nodes, for a cluster without TLS certificates: "+
		"--auth-file must give its hash the role peer; it should be mode 0600")
	fs.BoolVar(&a.insecureNoTLS, "insecure-auth-without-tls", false, "INSECURE: allow --auth-file without TLS (--tls-cert). "+
		"Without TLS the raft port accepts log entries (any write, any membership change) from anyone who can reach it, "+
		"and bearer tokens travel in plaintext: the tokens protect only the gRPC port. For trusted networks, tests and dev clusters only")
}

// apply sets c's authorization fields, reading the peer token file (the
// token is never logged).
func (a *authFlags) apply(c *cluster.Config, log *slog.Logger) error {
	c.AuthFile = a.file
	c.InsecureAuthWithoutTLS = a.insecureNoTLS
	if a.peerTokenFile == "" {
		return nil
	}
	if a.file == "" {
		return fmt.Errorf("--auth-peer-token-file needs --auth-file")
	}
	b, err := os.ReadFile(a.peerTokenFile)
	if err != nil {
		return fmt.Errorf("--auth-peer-token-file: %w", err)
	}
	cluster.WarnIfReadableByOthers(log, a.peerTokenFile, "peer token")
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return fmt.Errorf("--auth-peer-token-file %s: want one token (no spaces) in the file", a.peerTokenFile)
	}
	c.AuthPeerToken = tok
	return nil
}
