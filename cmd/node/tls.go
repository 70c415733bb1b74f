package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"strings"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/cluster"
)

// tlsFlags are the node's TLS files (cluster.TLSConfig; README.md,
// "Security").
type tlsFlags struct {
	cert, key, peerCA, clientCA string
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate of the node (server and client authentication usages, signed by --tls-peer-ca): turns on TLS for the gRPC port, raft and every connection between nodes")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key of --tls-cert (should be mode 0600)")
	fs.StringVar(&f.peerCA, "tls-peer-ca", "", "PEM cluster CA: raft and node-to-node connections require a node certificate signed by it (required with --tls-cert)")
	fs.StringVar(&f.clientCA, "tls-client-ca", "", "PEM client CA: gRPC clients must present a certificate signed by it (or by --tls-peer-ca); without it clients need no certificate")
}

// apply sets c.TLS, refusing a combination of flags that makes no sense.
// The files themselves are checked by cluster.New.
func (f *tlsFlags) apply(c *cluster.Config) error {
	switch {
	case f.cert == "" && f.key == "" && f.peerCA == "" && f.clientCA == "":
		return nil
	case f.cert != "" && f.key == "":
		return errors.New("--tls-cert needs --tls-key")
	case f.cert == "" && f.key != "":
		return errors.New("--tls-key needs --tls-cert")
	case f.cert == "":
		return errors.New("--tls-peer-ca and --tls-client-ca need --tls-cert and --tls-key (the node's own certificate)")
	case f.peerCA == "":
		return errors.New("--tls-cert needs --tls-peer-ca (the cluster CA that verifies the other nodes)")
	}
	c.TLS = cluster.TLSConfig{CertFile: f.cert, KeyFile: f.key, PeerCAFile: f.peerCA, ClientCAFile: f.clientCA}
	return nil
}

// clientTLSFlags are the TLS flags of a subcommand that dials a node
// (health), named as in the cairn CLI.
type clientTLSFlags struct {
	caCert, cert, key, serverName string
}

func (f *clientTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.caCert, "cacert", "", "PEM CA verifying the node's certificate (the cluster CA, --tls-peer-ca): dial with TLS")
	fs.StringVar(&f.cert, "cert", "", "PEM client certificate, for a node with --tls-client-ca (the node's own --tls-cert works too)")
	fs.StringVar(&f.key, "key", "", "PEM private key of --cert")
	fs.StringVar(&f.serverName, "server-name", "", "name to verify the node's certificate against (default: the host of --grpc-addr)")
}

// config returns the TLS configuration the flags describe, nil for
// plaintext. The files are read as the cairn CLI reads them
// (client.LoadTLS); an error is one line naming the file and what is wrong
// with it.
func (f *clientTLSFlags) config() (*tls.Config, error) {
	switch {
	case f.caCert == "" && (f.cert != "" || f.key != "" || f.serverName != ""):
		return nil, errors.New("--cert, --key and --server-name need --cacert")
	case f.caCert == "":
		return nil, nil
	case (f.cert == "") != (f.key == ""):
		return nil, errors.New("--cert and --key go together")
	}
	cfg, err := client.LoadTLS(f.caCert, f.cert, f.key)
	if err != nil {
		// "TLS: CA file x.pem: ...", without the client library's
		// "cairn: " (the command's own prefix is "cairn-node: ").
		return nil, errors.New(strings.TrimPrefix(err.Error(), "cairn: "))
	}
	cfg.ServerName = f.serverName
	cfg.MinVersion = tls.VersionTLS13 // a node serves nothing older (cluster.TLSConfig)
	return cfg, nil
}
