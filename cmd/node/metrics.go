package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cairnkv/cairn/cluster"
	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/monitor"
)

// defaultMetricsAddr is --metrics-addr's default (9379: the gRPC port's
// neighbour in the 9xxx range Prometheus exporters use).
const defaultMetricsAddr = "127.0.0.1:9379"

// metricsServer is the HTTP server of --metrics-addr (package monitor).
type metricsServer struct {
	mon   *monitor.Monitor
	lis   net.Listener
	srv   *http.Server
	pprof bool // --pprof: it serves /debug/pprof/
}

// listenMetrics prepares the metrics server: it listens on --metrics-addr
// (before the node starts, so that an address in use fails fast) and adds
// the gRPC metrics interceptors to cfg. It returns nil if the address is
// empty, or if it is the default and in use (logged).
func (o *options) listenMetrics(cfg *cluster.Config) (*metricsServer, error) {
	if o.metricsAddr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		if !o.explicitlySet["metrics-addr"] {
			cfg.Logger.Warn("not serving metrics: the default metrics address is in use; give this node its own --metrics-addr (empty disables)",
				"metrics_addr", o.metricsAddr, "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("metrics address %s: %w", o.metricsAddr, err)
	}
	// monitor.New also installs the process-wide bridge of raft's and
	// memberlist's go-metrics (monitor/gometrics.go), which renames and
	// filters them on the way.
	mon, err := monitor.New(monitor.Options{Pprof: o.pprof, Logger: cfg.Logger})
	if err != nil {
		lis.Close()
		return nil, err
	}
	cfg.GRPCServerOptions = append(cfg.GRPCServerOptions, mon.GRPCServerOptions()...)
	engine := lsm.Options{}
	if cfg.Engine != nil {
		engine = *cfg.Engine
	}
	engine.EventListener = mon.EventListener(engine.EventListener)
	cfg.Engine = &engine
	return &metricsServer{mon: mon, lis: lis, pprof: o.pprof}, nil
}

// serve serves the node's endpoints until close.
func (m *metricsServer) serve(n *cluster.Node, log *slog.Logger) error {
	h, err := m.mon.Handler(n)
	if err != nil {
		return err
	}
	if m.pprof {
		// pprof's /debug/pprof/cmdline would show --gossip-key.
		h = redactDebug(h, false)
	}
	m.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := m.srv.Serve(m.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return nil
}

// addr returns the address it listens on.
func (m *metricsServer) addr() string { return m.lis.Addr().String() }

// close stops the server (waiting up to ctx for requests in flight) or,
// if it never served, its listener.
func (m *metricsServer) close(ctx context.Context) {
	if m.srv == nil {
		m.lis.Close()
		return
	}
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
}
