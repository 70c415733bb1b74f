package client

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// LoadTLS builds the Config.TLS of a client from PEM files:
//
//   - caFile, the CA that signed the nodes' certificates (a cluster's
//     ca.pem from `cairn-node certs`); empty: the system's roots;
//   - certFile and keyFile, the client's own certificate and key, for a
//     cluster that requires client certificates (a node started with
//     --tls-client-ca); both or neither.
//
// The nodes' certificates must name the addresses the client dials (the
// endpoints and the leader's advertised gRPC address) as SANs.
// LoadTLS("", "", "") is TLS verified against the system's roots; a
// plaintext client leaves Config.TLS nil.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case certFile != "" && keyFile == "":
		return nil, fmt.Errorf("cairn: TLS: certificate %s given without its key file", certFile)
	case certFile == "" && keyFile != "":
		return nil, fmt.Errorf("cairn: TLS: key %s given without its certificate file", keyFile)
	case certFile != "":
		if err := checkPEM(certFile, "certificate"); err != nil {
			return nil, err
		}
		if err := checkPEM(keyFile, "key"); err != nil {
			return nil, err
		}
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("cairn: TLS: certificate %s and key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if caFile != "" {
		if err := checkPEM(caFile, "CA"); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("cairn: TLS: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("cairn: TLS: CA file %s: no valid PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// checkPEM fails unless name, the what file ("CA", "certificate" or
// "key"), is readable and holds a PEM block of a certificate (for a CA or a
// certificate) or a key (whose type ends with "PRIVATE KEY": RSA, EC and
// PKCS#8 keys), so a swapped or wrong file gets an error that names it. It
// never shows the file's contents (a key is a secret).
func checkPEM(name, what string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("cairn: TLS: %s file: %w", what, err)
	}
	want, noun := "CERTIFICATE", "certificate"
	if what == "key" {
		want, noun = "PRIVATE KEY", "key"
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if len(blk.Type) >= len(want) && blk.Type[len(blk.Type)-len(want):] == want {
			return nil
		}
	}
	if blk, _ := pem.Decode(b); blk != nil {
		return fmt.Errorf("cairn: TLS: %s file %s holds a PEM %q block, not a %s", what, name, blk.Type, noun)
	}
	return fmt.Errorf("cairn: TLS: %s file %s: %w", what, name, errNotPEM)
}

var errNotPEM = errors.New("not PEM (want a -----BEGIN ...----- block)")
