package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd runs one etcd member with embed's defaults until SIGTERM.
func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	name := fs.String("name", "e1", "member name")
	dir := fs.String("data-dir", "", "data directory")
	client := fs.String("client-url", "http://127.0.0.1:2379", "client URL")
	peer := fs.String("peer-url", "http://127.0.0.1:2380", "peer URL")
	initial := fs.String("initial-cluster", "", "name=peerURL,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cu, err := url.Parse(*client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *initial
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd %s not ready after 60s", *name)
	}
	fmt.Fprintf(os.Stderr, "etcd %s ready\n", *name)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-e.Err():
		return err
	}
	return nil
}
