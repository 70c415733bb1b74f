package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/internal/testnet"
)

// A three-node cluster runs on the certificates `cairn-node certs` makes:
// nodes join and replicate over TLS raft, a client with the admin
// certificate (client.LoadTLS) writes through any node and reads every
// node's state, and a client without a certificate is refused.
func TestCertsClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"certs", "--dir", pki, "--nodes", "n1,n2,n3", "--clients", "admin"}, &out, &errb); code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errb.String())
	}
	f := func(name string) string { return filepath.Join(pki, name) }
	tlsArgs := func(id string) []string {
		return []string{"--id", id, "--data-dir", filepath.Join(dir, id), "--raft-addr", testnet.Addr(t), "--metrics-addr", "",
			"--tls-cert", f(id + ".pem"), "--tls-key", f(id + "-key.pem"), "--tls-peer-ca", f("ca.pem"), "--tls-client-ca", f("ca.pem")}
	}
	n1 := serve(t, tlsArgs("n1")...)
	n2 := serve(t, append(tlsArgs("n2"), "--join", n1.gossipAddr)...)
	n3 := serve(t, append(tlsArgs("n3"), "--join", n1.gossipAddr)...)

	tlsCfg, err := client.LoadTLS(f("ca.pem"), f("admin.pem"), f("admin-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: []string{n3.grpcAddr}, TLS: tlsCfg, RequestTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const keys = 20
	for i := range keys {
		if _, err := c.Put(ctx, []byte(fmt.Sprintf("k%02d", i)), []byte("tls")); err != nil {
			t.Fatalf("put over mTLS: %v", err)
		}
	}
	for _, n := range []*serving{n1, n2, n3} {
		waitUntil(t, 60*time.Second, n.grpcAddr+" has every key", func() bool {
			for i := range keys {
				kv, err := c.Get(ctx, []byte(fmt.Sprintf("k%02d", i)), client.WithSerializable(), client.WithEndpoint(n.grpcAddr))
				if err != nil || string(kv.Value) != "tls" {
					return false
				}
			}
			return true
		})
	}

	// Without a client certificate, and in plaintext, the nodes refuse.
	for name, cfg := range map[string]client.Config{
		"no client certificate": {Endpoints: []string{n2.grpcAddr}, TLS: mustLoadTLS(t, f("ca.pem"), "", ""), RequestTimeout: 2 * time.Second},
		"plaintext":             {Endpoints: []string{n2.grpcAddr}, RequestTimeout: 2 * time.Second},
	} {
		bad, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Get(ctx, []byte("k00")); err == nil {
			t.Errorf("%s: read succeeded", name)
		}
		bad.Close()
	}
}

func mustLoadTLS(t *testing.T, ca, cert, key string) *tls.Config {
	t.Helper()
	cfg, err := client.LoadTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
