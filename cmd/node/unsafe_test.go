package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestUnsafeLocalReadsIsHidden: the jepsen harness's must-fail flag sets
// cluster.Config.UnsafeLocalReads, is off by default, and is not listed by
// -h (no operator should find it there).
func TestUnsafeLocalReadsIsHidden(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := o.clusterConfig(&stderr); cfg.UnsafeLocalReads {
		t.Fatal("UnsafeLocalReads on by default")
	}
	o, err = parseFlags([]string{"--unsafe-local-reads"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := o.clusterConfig(&stderr); !cfg.UnsafeLocalReads {
		t.Fatal("--unsafe-local-reads did not set UnsafeLocalReads")
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(help.String(), "-data-dir") {
		t.Fatalf("usage lists no flags:\n%s", help.String())
	}
	if strings.Contains(help.String(), "unsafe") {
		t.Fatalf("usage lists the hidden flag:\n%s", help.String())
	}
}
