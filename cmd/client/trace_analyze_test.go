package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/trace"
)

// memTrace is a trace.RecordReader over records in memory, standing in
// for the trace file reader.
type memTrace struct{ recs []trace.Record }

func (m *memTrace) Header() trace.Header { return trace.Header{MajorVersion: 1} }

func (m *memTrace) Next() (trace.Record, error) {
	if len(m.recs) == 0 {
		return trace.Record{}, io.EOF
	}
	r := m.recs[0]
	m.recs = m.recs[1:]
	return r, nil
}

// withTraceFiles makes openTraceFile serve the given traces by path.
func withTraceFiles(t *testing.T, files map[string][]trace.Record) {
	old := openTraceFile
	t.Cleanup(func() { openTraceFile = old })
	openTraceFile = func(path string) (trace.RecordReader, error) {
		recs, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("open %s: no such file", path)
		}
		return &memTrace{recs: recs}, nil
	}
}

// cyclicTrace reads k data blocks of 4KiB in turn, rounds times.
func cyclicTrace(k, rounds int) []trace.Record {
	var recs []trace.Record
	for i := 0; i < k*rounds; i++ {
		recs = append(recs, trace.Record{
			Type: trace.BlockData, Caller: trace.CallerGet, Level: 1, FileNumber: 9,
			BlockKey: fmt.Appendf(nil, "b%d", i%k), BlockSize: 4096, CacheHit: i >= k,
		})
	}
	return recs
}

func runTraceCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTraceAnalyzeCLI(t *testing.T) {
	withTraceFiles(t, map[string][]trace.Record{"t1": cyclicTrace(256, 10)})
	dir := t.TempDir()
	csvPath, plotPath := filepath.Join(dir, "mrc.csv"), filepath.Join(dir, "mrc.png")
	// 256 blocks of 4096 bytes and 0 overhead: 1MiB holds them all.
	code, out, errs := runTraceCLI("trace", "analyze", "t1", "--sizes", "512KiB,1MiB", "--policies", "lru,s3fifo",
		"--entry-overhead", "0", "--csv", csvPath, "--plot", plotPath, "--live-cache-size", "2MiB", "--top", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"accesses 2560", "distinct blocks 256 (1MiB)", "Top 3 blocks", "Reuse distance", "Simulated miss ratios", "100.00%", "10.00%"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	want := "size_bytes,policy,miss_ratio,accesses,misses\n" +
		"524288,lru,1.000000,2560,2560\n1048576,lru,0.100000,2560,256\n2097152,lru,0.100000,2560,256\n"
	if !strings.HasPrefix(string(b), want) || strings.Count(string(b), "\n") != 7 {
		t.Errorf("csv:\n%s\nwant it to start with\n%s", b, want)
	}
	f, err := os.Open(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("plot: %v", err)
	}

	// Sizes derived from the trace; JSON output.
	code, out, errs = runTraceCLI("trace", "analyze", "t1", "-o", "json", "--entry-overhead", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var js traceJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if js.Accesses != 2560 || js.UniqueBlocks != 256 || js.ByType["data"].Accesses != 2560 || len(js.Curve) == 0 {
		t.Errorf("json: %+v", js)
	}
	// 1MiB of blocks: sizes 64KiB..2MiB, 3 policies.
	if n := len(js.Curve); n != 3*6 || js.Curve[0].Size != 64<<10 || js.Curve[5].Size != 2<<20 {
		t.Errorf("derived sizes: %+v", js.Curve)
	}
}

func TestTraceAnalyzeCLIErrors(t *testing.T) {
	withTraceFiles(t, map[string][]trace.Record{"t1": cyclicTrace(4, 2), "empty": nil})
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"trace", "analyze"}, exitUsage, "accepts 1 arg"},
		{[]string{"trace", "analyze", "t1", "--sizes", "8XB"}, exitUsage, "unknown unit"},
		{[]string{"trace", "analyze", "t1", "--sizes", "0"}, exitUsage, "must be positive"},
		{[]string{"trace", "analyze", "t1", "--policies", "lfu"}, exitUsage, "unknown cache policy"},
		{[]string{"trace", "analyze", "t1", "--types", "data,foo"}, exitUsage, "unknown block type"},
		{[]string{"trace", "analyze", "t1", "--live-cache-size", "0"}, exitUsage, "must be positive"},
		{[]string{"trace", "analyze", "missing", "--sizes", "1MiB"}, exitError, "no such file"},
		{[]string{"trace", "analyze", "empty"}, exitError, "no accesses to simulate"},
		{[]string{"trace", "analyze", "t1", "--types", "blob"}, exitError, "no accesses to simulate"},
		{[]string{"trace"}, exitUsage, "needs a subcommand"},
	} {
		code, _, errs := runTraceCLI(c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("cairn %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, errs, c.code, c.msg)
		}
	}
}

// A real trace file, binary and human-readable, through trace.OpenFile;
// a truncated one fails with a clear error.
func TestTraceAnalyzeFile(t *testing.T) {
	dir := t.TempDir()
	recs := cyclicTrace(64, 4)
	var bin, human bytes.Buffer
	bw, hw := trace.NewWriter(&bin), trace.NewHumanWriter(&human)
	if err := bw.WriteHeader(trace.Header{MajorVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if err := hw.WriteHeader(trace.Header{MajorVersion: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := bw.WriteRecord(&recs[i]); err != nil {
			t.Fatal(err)
		}
		if err := hw.WriteRecord(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := hw.Flush(); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"bin.trace": bin.Bytes(), "human.csv": human.Bytes(), "cut.trace": bin.Bytes()[:bin.Len()-7]}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"bin.trace", "human.csv"} {
		code, out, errs := runTraceCLI("trace", "analyze", filepath.Join(dir, name), "--sizes", "256KiB", "--entry-overhead", "0", "--policies", "lru")
		if code != 0 || !strings.Contains(out, "accesses 256") || !strings.Contains(out, "25.00%") {
			t.Errorf("%s: exit %d, stderr %s\n%s", name, code, errs, out)
		}
	}
	code, _, errs := runTraceCLI("trace", "analyze", filepath.Join(dir, "cut.trace"), "--sizes", "256KiB")
	if code != exitError || !strings.Contains(errs, "corrupt") {
		t.Errorf("truncated trace: exit %d, stderr %q", code, errs)
	}
}
