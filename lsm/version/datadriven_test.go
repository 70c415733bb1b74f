package version

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of data-driven tests in testdata/")

// A data-driven test file is a sequence of cases:
//
//	# comments and blank lines between cases are kept
//	command arg=value ...
//	input line
//	...
//	----
//	expected output
//	...
//	<blank line or end of file>
//
// Expected output may not contain blank lines. With -rewrite the file is
// rewritten with the actual output.
type ddCase struct {
	pos      string // file:line of the command
	cmd      string
	args     map[string]string
	input    []string
	expected string
}

// runDataDriven runs fn on each case of path and compares its output.
func runDataDriven(t *testing.T, path string, fn func(t *testing.T, c *ddCase) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			i++
			continue
		}
		c := &ddCase{pos: fmt.Sprintf("%s:%d", path, i+1), args: map[string]string{}}
		fields := strings.Fields(line)
		c.cmd = fields[0]
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			c.args[k] = v
		}
		out.WriteString(line + "\n")
		i++
		for ; i < len(lines) && lines[i] != "----"; i++ {
			c.input = append(c.input, lines[i])
			out.WriteString(lines[i] + "\n")
		}
		if i == len(lines) {
			t.Fatalf("%s: no ---- separator", c.pos)
		}
		out.WriteString("----\n")
		i++
		var exp []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			exp = append(exp, lines[i])
		}
		c.expected = strings.Join(exp, "\n")
		actual := strings.TrimRight(fn(t, c), "\n")
		if strings.Contains(actual, "\n\n") {
			t.Fatalf("%s: output has a blank line:\n%s", c.pos, actual)
		}
		if actual != "" {
			out.WriteString(actual + "\n")
		}
		if !*rewrite && actual != c.expected {
			t.Errorf("%s: %s\nexpected:\n%s\nactual:\n%s", c.pos, line, c.expected, actual)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// parseKey parses "a#5,SET" into an encoded internal key. The sequence
// number "inf" stands for base.SeqNumMax, so "c#inf,RANGEDEL" is the
// range-delete sentinel of c.
func parseKey(s string) ([]byte, error) {
	ukey, rest, ok := strings.Cut(s, "#")
	if !ok {
		return nil, fmt.Errorf("key %q: want ukey#seq,KIND", s)
	}
	seqStr, kindStr, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("key %q: want ukey#seq,KIND", s)
	}
	var seq base.SeqNum
	if seqStr == "inf" {
		seq = base.SeqNumMax
	} else {
		n, err := strconv.ParseUint(seqStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("key %q: %v", s, err)
		}
		seq = base.SeqNum(n)
	}
	kinds := map[string]base.Kind{"DEL": base.KindDelete, "SET": base.KindSet, "RANGEDEL": base.KindRangeDelete, "BLOBIDX": base.KindBlobIndex}
	kind, ok := kinds[kindStr]
	if !ok {
		return nil, fmt.Errorf("key %q: unknown kind", s)
	}
	return base.MakeInternalKey(nil, []byte(ukey), seq, kind), nil
}

// parseFile parses "5: a#5,SET-c#3,SET [seqs=3-5] [size=100]". Without
// seqs, the sequence numbers are those of the bounds (ignoring "inf").
func parseFile(s string) (*FileMetadata, error) {
	numStr, rest, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("file %q: want num: smallest-largest", s)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(numStr), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("file %q: %v", s, err)
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return nil, fmt.Errorf("file %q: no bounds", s)
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return nil, fmt.Errorf("file %q: want smallest-largest", s)
	}
	m := &FileMetadata{FileNum: base.FileNum(n), Size: 1}
	if m.Smallest, err = parseKey(lo); err != nil {
		return nil, err
	}
	if m.Largest, err = parseKey(hi); err != nil {
		return nil, err
	}
	var seqs []base.SeqNum
	for _, k := range [][]byte{m.Smallest, m.Largest} {
		if s := base.DecodeTrailer(k).SeqNum(); s != base.SeqNumMax {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) > 0 {
		m.SmallestSeq, m.LargestSeq = min(seqs[0], seqs[len(seqs)-1]), max(seqs[0], seqs[len(seqs)-1])
	}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "seqs":
			a, b, _ := strings.Cut(v, "-")
			x, err1 := strconv.ParseUint(a, 10, 64)
			y, err2 := strconv.ParseUint(b, 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("file %q: bad seqs", s)
			}
			m.SmallestSeq, m.LargestSeq = base.SeqNum(x), base.SeqNum(y)
		case "size":
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("file %q: bad size", s)
			}
			m.Size = x
		default:
			return nil, fmt.Errorf("file %q: unknown field %q", s, k)
		}
	}
	return m, nil
}

// parseLevel parses "L3".
func parseLevel(s string) (int, error) {
	if !strings.HasPrefix(s, "L") {
		return 0, fmt.Errorf("level %q: want Ln", s)
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil {
		return 0, fmt.Errorf("level %q: %v", s, err)
	}
	return n, nil
}

// parseEdit parses lines "add L1 5: a#5,SET-c#3,SET", "del L1 5",
// "move L1 L2 5" (delete and add the same metadata, which must be in v) and
// "log-num 7" into an edit.
func parseEdit(v *Version, lines []string) (*VersionEdit, error) {
	e := &VersionEdit{}
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		switch op {
		case "add":
			lv, fileStr, _ := strings.Cut(rest, " ")
			level, err := parseLevel(lv)
			if err != nil {
				return nil, err
			}
			m, err := parseFile(fileStr)
			if err != nil {
				return nil, err
			}
			e.AddFile(level, m)
		case "del":
			var lv string
			var n uint64
			if _, err := fmt.Sscanf(rest, "%s %d", &lv, &n); err != nil {
				return nil, fmt.Errorf("%q: %v", line, err)
			}
			level, err := parseLevel(lv)
			if err != nil {
				return nil, err
			}
			e.DeleteFile(level, base.FileNum(n))
		case "move":
			var from, to string
			var n uint64
			if _, err := fmt.Sscanf(rest, "%s %s %d", &from, &to, &n); err != nil {
				return nil, fmt.Errorf("%q: %v", line, err)
			}
			fl, err := parseLevel(from)
			if err != nil {
				return nil, err
			}
			tl, err := parseLevel(to)
			if err != nil {
				return nil, err
			}
			m, _, ok := v.File(base.FileNum(n))
			if !ok {
				return nil, fmt.Errorf("%q: no file %d", line, n)
			}
			e.DeleteFile(fl, base.FileNum(n))
			e.AddFile(tl, m)
		case "log-num":
			n, err := strconv.ParseUint(rest, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", line, err)
			}
			e.LogNumber = base.FileNum(n)
		default:
			return nil, fmt.Errorf("unknown edit line %q", line)
		}
	}
	return e, nil
}
