package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairnkv/cairn/internal/certs"
)

const certsUsage = "usage: cairn-node certs --dir DIR --nodes n1,n2,n3 [--hosts h1,h2,...] [--clients admin,reader] [--days N] [--force | --skip-existing]"

// runCerts implements `cairn-node certs`: a development CA and the node and
// client certificates of a cluster (package internal/certs; README,
// "Security").
func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-node certs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "directory the files go to (created, mode 0700, if missing)")
	var nodes, hosts, clients listFlag
	fs.Var(&nodes, "nodes", "comma-separated node names: each gets NAME.pem and NAME-key.pem, for server and client auth, with SANs NAME, localhost, 127.0.0.1, ::1 and --hosts")
	fs.Var(&hosts, "hosts", "comma-separated extra host names or IP addresses in every node certificate (the addresses nodes and clients dial)")
	fs.Var(&clients, "clients", "comma-separated client names: each gets NAME.pem (CN=NAME, client auth) and NAME-key.pem")
	days := fs.Int("days", int(certs.DefaultValidity/(24*time.Hour)), "days the new certificates (and a new CA) are valid")
	force := fs.Bool("force", false, "overwrite existing files, the CA included (certificates of the old CA stop working)")
	skip := fs.Bool("skip-existing", false, "keep certificates that already exist (and chain to the CA) instead of failing: makes the command idempotent")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s\n\nWrites a development CA (ca.pem, ca-key.pem; reused if DIR has one) and the node and client\n"+
				"certificates signed by it, ECDSA P-256, key files mode 0600. Existing files are not overwritten\n"+
				"unless --force.\n\nFlags:\n", certsUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return flag.ErrHelp
		}
		return &exitError{2, fmt.Errorf("certs: %v", err)}
	}
	switch {
	case fs.NArg() > 0:
		return &exitError{2, fmt.Errorf("certs: unexpected argument %q", fs.Arg(0))}
	case *dir == "":
		return &exitError{2, errors.New("certs: --dir is required")}
	case len(nodes) == 0 && len(clients) == 0:
		return &exitError{2, errors.New("certs: give --nodes, --clients or both")}
	case *days <= 0:
		return &exitError{2, fmt.Errorf("certs: --days %d: must be positive", *days)}
	case *days > 100*365:
		return &exitError{2, fmt.Errorf("certs: --days %d: at most %d", *days, 100*365)}
	case *force && *skip:
		return &exitError{2, errors.New("certs: --force and --skip-existing: give one of them")}
	}
	res, err := certs.Generate(certs.Options{
		Dir: *dir, Nodes: nodes, Hosts: hosts, Clients: clients,
		Validity: time.Duration(*days) * 24 * time.Hour, Force: *force, SkipExisting: *skip,
	})
	if err != nil {
		return err
	}
	ca := "a new CA"
	if res.ReusedCA {
		ca = "the CA in " + filepath.Join(*dir, certs.CAFile)
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintf(stdout, "kept existing certificates of %s\n", strings.Join(res.Skipped, ", "))
	}
	if len(res.Written) == 0 {
		fmt.Fprintf(stdout, "nothing to write in %s\n", *dir)
		return nil
	}
	fmt.Fprintf(stdout, "wrote %d files in %s, signed by %s:\n", len(res.Written), *dir, ca)
	for _, p := range res.Written {
		fmt.Fprintf(stdout, "  %s\n", p)
	}
	return nil
}
