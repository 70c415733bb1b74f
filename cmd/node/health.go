package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/cairnkv/cairn/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// runHealth implements `cairn-node health`: it asks a node's standard gRPC
// health service about the whole server and succeeds if it is SERVING.
// It needs no shell or other tool, so a scratch container image can use it
// as its health check.
func runHealth(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-node health", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("grpc-addr", cluster.DefaultGRPCAddr, "gRPC address of the node to check")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	var tf clientTLSFlags
	tf.register(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: cairn-node health [--grpc-addr host:port] [--timeout 3s] [--cacert CA --cert CERT --key KEY]\n\nExits 0 if the node's gRPC health check says SERVING.\n\nFlags:")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return &exitError{2, fmt.Errorf("health: %v", err)}
	}
	if fs.NArg() > 0 {
		return &exitError{2, fmt.Errorf("health: unexpected argument %q", fs.Arg(0))}
	}
	tlsCfg, err := tf.config()
	if err != nil {
		return &exitError{2, fmt.Errorf("health: %w", err)}
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("health: %s: %w", *addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("health: %s: %w", *addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %s: %v", *addr, resp.GetStatus())
	}
	fmt.Fprintf(stdout, "%s: %v\n", *addr, resp.GetStatus())
	return nil
}
