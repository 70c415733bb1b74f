// Command cairn-node runs one cairn server.
//
// With no flags it starts a single-node cluster with its data in
// ./cairn-data, serving gRPC on 127.0.0.1:7379 (raft on 127.0.0.1:7380,
// gossip on 127.0.0.1:7381):
//
//	go run ./cmd/node
//
// Three nodes that form a cluster by themselves:
//
//	cairn-node --id n1 --data-dir d1 --grpc-addr 127.0.0.1:7379 --raft-addr 127.0.0.1:7380 --gossip-addr 127.0.0.1:7381 --bootstrap-expect 3
//	cairn-node --id n2 --data-dir d2 --grpc-addr 127.0.0.1:7389 --raft-addr 127.0.0.1:7390 --gossip-addr 127.0.0.1:7391 --bootstrap-expect 3 --join 127.0.0.1:7381
//	cairn-node --id n3 --data-dir d3 --grpc-addr 127.0.0.1:7399 --raft-addr 127.0.0.1:7400 --gossip-addr 127.0.0.1:7401 --bootstrap-expect 3 --join 127.0.0.1:7381
//
// A node started with --join and without --bootstrap-expect joins an
// existing cluster (the leader adds it). Each node serves its status page,
// Prometheus metrics, /healthz and /readyz on --metrics-addr (default
// 127.0.0.1:9379, package monitor; give each node on one host its own).
// `cairn-node health` checks a node's gRPC health service, SERVING once the
// node is ready, for container health checks.
// `cairn-node restore --from BACKUP --data-dir DIR --id ID` seeds a data
// directory from a backup, for the first node of a new cluster (README,
// "Restore a cluster from a backup").
// `cairn-node certs --dir DIR --nodes n1,n2,n3 --clients admin` writes a
// development CA and node and client certificates for TLS (README,
// "Security").
//
// --tls-cert, --tls-key and --tls-peer-ca (and, to require client
// certificates, --tls-client-ca) turn on TLS for the gRPC and raft ports and
// between nodes (README, "Security").
//
// Every flag can also come from a JSON file given with --config, whose keys
// are the flag names ({"id": "n1", "join": ["a:7381", "b:7381"], ...});
// flags on the command line win.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cairnkv/cairn/cluster"
)

const usageLine = "usage: cairn-node [flags] | cairn-node health [--grpc-addr host:port] [--cacert CA [--cert CERT --key KEY]] | cairn-node restore --from BACKUP --data-dir DIR --id ID | cairn-node certs --dir DIR --nodes n1,n2,n3 (-h for help)"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal stops the process at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// run runs the command line args until ctx is cancelled (a signal) and
// returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "health" {
		err = runHealth(args[1:], stdout, stderr)
	} else if len(args) > 0 && args[0] == "restore" {
		err = runRestore(args[1:], stdout, stderr)
	} else if len(args) > 0 && args[0] == "certs" {
		err = runCerts(args[1:], stdout, stderr)
	} else {
		err = runServer(ctx, args, stdout, stderr)
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "cairn-node: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// runServer starts a node and shuts it down gracefully when ctx is
// cancelled.
func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := opts.clusterConfig(stderr)
	if err == nil {
		// Before the metrics listener: a bad configuration changes nothing.
		err = cfg.Validate()
	}
	if err != nil {
		return &exitError{2, err}
	}
	metrics, err := opts.listenMetrics(&cfg)
	if err != nil {
		return err
	}
	node, err := cluster.New(cfg, nil)
	if err != nil {
		if metrics != nil {
			metrics.close(context.Background())
		}
		return &exitError{2, err}
	}
	if err := node.Start(); err != nil {
		if metrics != nil {
			metrics.close(context.Background())
		}
		return err
	}
	metricsNote := ""
	if metrics != nil {
		if err := metrics.serve(node, cfg.Logger); err != nil {
			metrics.close(context.Background())
			node.Shutdown(context.Background())
			return err
		}
		metricsNote = ", metrics http://" + metrics.addr() + "/"
	}
	fmt.Fprintf(stdout, "cairn-node %s: serving gRPC on %s (raft %s, gossip %s, data %s%s)\n",
		cfg.ID, node.GRPCAddr(), node.RaftAddr(), node.GossipAddr(), cfg.DataDir, metricsNote)
	var failed error
	select {
	case <-ctx.Done():
		fmt.Fprintln(stderr, "cairn-node: shutting down (signal again to stop at once)")
	case failed = <-node.Failed():
		// Another node holds this ID, or the data directory belongs to
		// another cluster: stop, saying why (the error is printed by run).
		fmt.Fprintln(stderr, "cairn-node: stopping: the node cannot go on")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = node.Shutdown(sctx)
	if metrics != nil {
		metrics.close(sctx)
	}
	if failed != nil {
		return failed
	}
	return err
}
