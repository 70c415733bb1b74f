package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
)

// envEndpoints is the environment variable that sets --endpoints.
const envEndpoints = "CAIRN_ENDPOINTS"

// envToken is the environment variable that sets --token (preferred: a
// flag's value shows in the process list).
const envToken = "CAIRN_TOKEN"

// The environment variables of the TLS flags --cacert, --cert and --key.
const (
	envCACert = "CAIRN_CACERT"
	envCert   = "CAIRN_CERT"
	envKey    = "CAIRN_KEY"
)

// globals are the flags every command has, and the command's outputs.
type globals struct {
	endpoints string
	token     string
	timeout   time.Duration
	output    string
	hex       bool
	// TLS files (README, "Security"): the CA of the nodes' certificates,
	// and the client's certificate and key for a cluster that requires
	// one. All empty: plaintext.
	tlsCA, tlsCert, tlsKey string

	stdout, stderr io.Writer
	flags          *pflag.FlagSet // the root's persistent flags
}

// Output formats.
const (
	outTable = "table"
	outJSON  = "json"
	outRaw   = "raw"
)

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "cairn",
		Short: "cairn is the command-line client of a cairn cluster",
		Long: `cairn reads and writes a cairn cluster's keys, administers its members, takes
backups and generates load.

It talks to the nodes given by --endpoints (comma-separated host:port gRPC
addresses; default $` + envEndpoints + `, else 127.0.0.1:7379, the address of a node
started with no flags). With --cacert (the CA of the nodes' certificates) it
talks TLS; --cert and --key add a client certificate, for nodes started with
--tls-client-ca ($` + envCACert + `, $` + envCert + `, $` + envKey + `). It finds the leader by itself and retries through
leader changes until --timeout; a retried write is applied at most once.
A cluster with an authorization policy needs a bearer token: --token, or
better $` + envToken + ` (a flag shows in the process list).

Keys and values are arbitrary bytes. Output escapes bytes that are not
printable UTF-8 (\xNN, \n, \\); with --hex, keys and values are hex both in
arguments and in output;
-o json prints JSON; 'get -o raw' prints a value's exact bytes.

Exit codes: 0 success; 1 failure (one line on stderr says why), including
'get' of a missing key and a failed 'cas'; 2 usage error.`,
		Example: `  cairn put greeting hello
  cairn get greeting
  echo -n "from stdin" | cairn put note -
  cairn scan --prefix user/ --limit 10
  cairn --endpoints 10.0.0.1:7379,10.0.0.2:7379 status
  CAIRN_ENDPOINTS=10.0.0.1:7379 cairn members
  cairn --cacert certs/ca.pem --cert certs/admin.pem --key certs/admin-key.pem status
  cairn bench put --clients 16 --duration 10s`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch g.output {
			case outTable, outJSON:
			case outRaw:
				if cmd.Name() != "get" {
					return usagef("-o raw is for get only")
				}
			default:
				return usagef("output format %q: want table or json", g.output)
			}
			if g.timeout <= 0 {
				return usagef("--timeout must be positive")
			}
			cert, key := g.setting("cert", envCert), g.setting("key", envKey)
			if (cert == "") != (key == "") {
				return usagef("--cert and --key go together (or $%s and $%s)", envCert, envKey)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.endpoints, "endpoints", client.DefaultEndpoint, "comma-separated gRPC addresses of cluster nodes (or $"+envEndpoints+")")
	pf.StringVar(&g.token, "token", "", "bearer token of a cluster with an authorization policy (or $"+envToken+", which keeps it out of the process list); "+
		"sent over plaintext unless the connection uses TLS")
	pf.DurationVar(&g.timeout, "timeout", 5*time.Second, "how long one request may take, retries included (scan: each page; bench: each operation; "+
		"snapshot take: 10m, snapshot save and backup: 24h, unless set)")
	pf.StringVarP(&g.output, "output", "o", outTable, "output format: table or json (get: also raw)")
	pf.BoolVar(&g.hex, "hex", false, "keys and values are hex, in arguments and in output")
	pf.StringVar(&g.tlsCA, "cacert", "", "PEM file of the CA that signed the nodes' certificates: talk TLS (or $"+envCACert+")")
	pf.StringVar(&g.tlsCert, "cert", "", "PEM file of this client's certificate, for nodes that require one (or $"+envCert+"; with --key)")
	pf.StringVar(&g.tlsKey, "key", "", "PEM file of this client's private key (or $"+envKey+"; with --cert)")
	g.flags = pf
	root.RegisterFlagCompletionFunc("output", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return []string{outTable, outJSON, outRaw}, cobra.ShellCompDirectiveNoFileComp
	})

	root.AddCommand(
		newPutCmd(g), newGetCmd(g), newDelCmd(g), newScanCmd(g), newTxnCmd(g), newCasCmd(g),
		newStatusCmd(g), newMembersCmd(g), newMemberCmd(g), newLeaderCmd(g),
		newSnapshotCmd(g), newBackupCmd(g), newBenchCmd(g), newTraceCmd(g),
		newGossipKeyCmd(g),
	)
	for _, c := range root.Commands() {
		setUsageErrors(c)
	}
	return root
}

// setUsageErrors makes flag errors of cmd and its children usage errors.
func setUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	for _, c := range cmd.Commands() {
		setUsageErrors(c)
	}
}

// usageArgs wraps an argument validator so that its errors are usage
// errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// groupRunE is the RunE of a command that only groups subcommands.
func groupRunE(cmd *cobra.Command, args []string) error {
	return usagef("%s needs a subcommand (see '%s --help')", cmd.CommandPath(), cmd.CommandPath())
}

// endpointList returns the endpoints: the flag if set, else the
// environment variable, else the default.
func (g *globals) endpointList() []string {
	s := g.endpoints
	if !g.flags.Changed("endpoints") {
		if env := strings.TrimSpace(os.Getenv(envEndpoints)); env != "" {
			s = env
		}
	}
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// bearerToken returns the token: the flag if set, else the environment
// variable.
func (g *globals) bearerToken() string {
	if g.flags.Changed("token") {
		return g.token
	}
	return strings.TrimSpace(os.Getenv(envToken))
}

// withClient runs f with a client of the endpoints, closed afterwards.
func (g *globals) withClient(f func(c *client.Client) error) error {
	eps := g.endpointList()
	if len(eps) == 0 {
		return usagef("no endpoints (set --endpoints or $%s)", envEndpoints)
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return err
	}
	c, err := client.New(client.Config{Endpoints: eps, TLS: tlsCfg, Token: g.bearerToken(), MaxRetryBackoff: 500 * time.Millisecond, DialOptions: testDialOptions})
	if err != nil {
		return usageError{err}
	}
	defer c.Close()
	return tlsHint(f(c), tlsCfg != nil)
}

// tlsHint adds a hint to an error that looks like plaintext talking to a
// TLS port or TLS talking to a plaintext one, whose gRPC messages do not
// say so.
func tlsHint(err error, usingTLS bool) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case !usingTLS && strings.Contains(msg, "error reading server preface"):
		return fmt.Errorf("%w (a node serving TLS closes plaintext connections like this: give --cacert, or $%s)", err, envCACert)
	case usingTLS && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("%w (the node does not serve TLS: drop --cacert, --cert and --key)", err)
	}
	return err
}

// setting returns the string flag name if set, else the environment
// variable env.
func (g *globals) setting(name, env string) string {
	if g.flags.Changed(name) {
		v, _ := g.flags.GetString(name)
		return v
	}
	return strings.TrimSpace(os.Getenv(env))
}

// tlsConfig returns the client's TLS configuration: nil (plaintext) unless
// --cacert, --cert or --key (or their environment variables) is set.
// --cert and --key without --cacert verify the nodes against the system's
// roots.
func (g *globals) tlsConfig() (*tls.Config, error) {
	ca, cert, key := g.setting("cacert", envCACert), g.setting("cert", envCert), g.setting("key", envKey)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	return client.LoadTLS(ca, cert, key)
}

// testDialOptions are added to the client's (tests: interceptors).
var testDialOptions []grpc.DialOption

// ctx returns a context bounded by --timeout.
func (g *globals) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.timeout)
}

// longCtx returns the context of an operation that may take long (a
// snapshot, a backup): bounded by --timeout if it was set, else by def.
func (g *globals) longCtx(def time.Duration) (context.Context, context.CancelFunc) {
	if g.flags.Changed("timeout") {
		return g.ctx()
	}
	return context.WithTimeout(context.Background(), def)
}

func (g *globals) printf(format string, args ...any) {
	fmt.Fprintf(g.stdout, format, args...)
}
