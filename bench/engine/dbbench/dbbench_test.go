package dbbench

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var seed = flag.Uint64("seed", 0, "workload seed (0: from the clock)")

// TestWorkloads runs every benchmark against every engine on 2,000 keys
// and checks what the reads saw. Run itself fails a read that misses a
// present key, finds a missing one or scans the wrong count; this test
// checks the counts it reports too, in both value shapes (in the large one
// Badger's value log and Pebble's blob files are used).
func TestWorkloads(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", s, s)
	const num = 2000
	shapes := []struct {
		name      string
		valueSize int
		cfg       func(*Config)
	}{
		{"100B", 100, func(c *Config) { c.BadgerValueThreshold = 1024 }}, // Badger's default 1 MiB is above its batch limit with a 1 MiB memtable
		{"4KiB", 4096, func(c *Config) { c.BadgerValueThreshold = 1024; c.PebbleValueSepMin = 1024 }},
	}
	for _, shape := range shapes {
		for _, engine := range Engines() {
			t.Run(shape.name+"/"+engine, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.CacheBytes, cfg.MemTableBytes = 4<<20, 1<<20 // several flushes
				shape.cfg(&cfg)
				rep, err := Run(Options{
					Engine: engine, Dir: filepath.Join(t.TempDir(), "db"),
					Num: num, ValueSize: shape.valueSize, Config: cfg, Seed: s,
				})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := len(rep.Results), len(DefaultBenchmarks); got != want {
					t.Fatalf("%d results, want %d", got, want)
				}
				for _, res := range rep.Results {
					name, _, _ := strings.Cut(res.Name, "@")
					switch name {
					case "readrandom", "readrandom2", "readwhilewriting":
						if res.Found != res.Ops || res.Missing != 0 || res.Ops < num-1 {
							t.Errorf("%s: found %d missing %d of %d", res.Name, res.Found, res.Missing, res.Ops)
						}
					case "readmissing":
						if res.Found != 0 || res.Missing != num {
							t.Errorf("%s: found %d missing %d", res.Name, res.Found, res.Missing)
						}
					case "readseq":
						if res.Ops != num || res.Found != num {
							t.Errorf("%s: scanned %d keys, want %d", res.Name, res.Ops, num)
						}
					case "seekrandom":
						if res.Found != num {
							t.Errorf("%s: %d seeks landed, want %d", res.Name, res.Found, num)
						}
					case "fillsync":
						if res.Ops != num/100 {
							t.Errorf("fillsync wrote %d keys, want %d", res.Ops, num/100)
						}
					}
					if res.OpsSec <= 0 || res.DirBytes <= 0 {
						t.Errorf("%s: ops/s %v, dir bytes %d", res.Name, res.OpsSec, res.DirBytes)
					}
				}
				if !strings.HasSuffix(rep.Results[len(rep.Results)-1].Name, "@compacted") {
					t.Errorf("last result %q is not marked @compacted", rep.Results[len(rep.Results)-1].Name)
				}
			})
		}
	}
}

// TestReadsFailOnWrongData checks the checks: a DB holding fewer keys than
// the workload believes makes readrandom and readseq fail.
func TestReadsFailOnWrongData(t *testing.T) {
	for _, bench := range []string{"readrandom", "readseq"} {
		dir := filepath.Join(t.TempDir(), "db")
		r := &runner{o: Options{Engine: "cairn", Dir: dir, Num: 100, Reads: 100, ValueSize: 10, Config: DefaultConfig()}}
		r.pool = make([]byte, valuePoolBytes+10)
		r.rng = newTestRand()
		if err := r.open(true, false); err != nil {
			t.Fatal(err)
		}
		var res Result
		if err := r.fill(&res, 50, nil, false); err != nil {
			t.Fatal(err)
		}
		r.present = 100 // lie: only 50 were written
		if _, err := r.run(bench); err == nil {
			t.Errorf("%s passed on a DB missing half the keys", bench)
		}
		r.db.Close()
	}
}

// TestVersions checks that the engines' module versions are recorded.
func TestVersions(t *testing.T) {
	v := Versions()
	for _, m := range []string{"github.com/cockroachdb/pebble/v2", "github.com/dgraph-io/badger/v4", "github.com/syndtr/goleveldb"} {
		if v[m] == "" {
			t.Logf("no version for %s (test binaries may lack build info): %v", m, v)
		}
	}
}
