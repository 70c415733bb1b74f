package membership

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
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
		if actual == "" || strings.Contains(actual, "\n\n") {
			t.Fatalf("%s: output is empty or has a blank line:\n%s", c.pos, actual)
		}
		out.WriteString(actual + "\n")
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
