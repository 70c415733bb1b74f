package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/jepsen/history"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPartitionShapes checks every shape on clusters of 3 to 7 nodes: the
// cut is symmetric-free (each pair once, no self pair), and the shape's
// promise holds (halves and bridge leave the groups connected inside; a
// majorities ring lets every node reach a majority counting itself, with no
// majority side shared by all; an isolated leader reaches nobody).
func TestPartitionShapes(t *testing.T) {
	id := func(i int) string { return fmt.Sprintf("n%d", i+1) }
	for n := 3; n <= 7; n++ {
		for shape := range 4 {
			for seed := range 20 {
				rng := rand.New(rand.NewPCG(uint64(seed), 1))
				cut, what := partitionShape(shape, n, 0, rng, id)
				blocked := make(map[[2]int]bool)
				for _, p := range cut {
					if p[0] == p[1] {
						t.Fatalf("n=%d %s: self pair %v", n, what, p)
					}
					k := [2]int{min(p[0], p[1]), max(p[0], p[1])}
					if blocked[k] {
						t.Fatalf("n=%d %s: pair %v twice", n, what, p)
					}
					blocked[k] = true
				}
				reach := func(i int) int {
					c := 1
					for j := range n {
						if j != i && !blocked[[2]int{min(i, j), max(i, j)}] {
							c++
						}
					}
					return c
				}
				switch {
				case shape == 1:
					if reach(0) != 1 {
						t.Fatalf("n=%d %s: leader reaches %d nodes", n, what, reach(0)-1)
					}
				case shape == 2 && n >= 4:
					for i := range n {
						if reach(i) < n/2+1 {
							t.Fatalf("n=%d %s: n%d reaches %d, less than a majority", n, what, i+1, reach(i))
						}
					}
					if len(cut) == 0 {
						t.Fatalf("n=%d %s: no cut", n, what)
					}
				}
				if len(cut) == 0 && n > 2 {
					t.Fatalf("n=%d %s: empty cut", n, what)
				}
			}
		}
	}
}

// TestWriteOutcome pins which write errors count as "certainly not
// applied" (Fail) and which as indeterminate (Info).
func TestWriteOutcome(t *testing.T) {
	withAttempts := func(code codes.Code, attempts int) error {
		return &client.Error{Op: "put", Status: status.New(code, "x"), Attempts: attempts}
	}
	c, err := client.New(client.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, refused := c.Put(context.Background(), nil, []byte("v")) // empty key: refused by the client
	deadline := &client.Error{Op: "put", Status: status.New(codes.Unavailable, "no leader"), Context: context.DeadlineExceeded, Attempts: 5}
	for _, c := range []struct {
		name string
		err  error
		want history.Outcome
	}{
		{"nil", nil, history.OK},
		{"invalid argument, never sent", refused, history.Fail},
		{"deadline after retries", deadline, history.Info},
		{"unavailable", withAttempts(codes.Unavailable, 1), history.Info},
		{"internal", withAttempts(codes.Internal, 1), history.Info},
		{"resource exhausted", withAttempts(codes.ResourceExhausted, 1), history.Info},
		{"plain context error", context.DeadlineExceeded, history.Info},
		{"other error", errors.New("connection reset"), history.Info},
	} {
		if got := writeOutcome(c.err); got != c.want {
			t.Errorf("%s: %v: got %s, want %s", c.name, c.err, got, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--nemesis", "all", "--seed", "7", "--workload", "bank"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.nemeses) != 5 || cfg.seed != 7 || cfg.workload != "bank" {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg, err = parseFlags([]string{"--scenario", "remove-leader"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workload != "register" || cfg.seed != 7 || len(cfg.nemeses) != 1 || cfg.nemeses[0] != "membership" {
		t.Fatalf("scenario remove-leader parsed as %+v", cfg)
	}
	if cfg, _ := parseFlags([]string{"--scenario", "unsafe-local-reads"}); !cfg.unsafeReads {
		t.Fatal("scenario unsafe-local-reads does not set unsafe reads")
	}
	for _, bad := range [][]string{{"--nemesis", "clock"}, {"--mode", "vm"}, {"--nodes", "0"}, {"extra"}, {"--scenario", "nope"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
