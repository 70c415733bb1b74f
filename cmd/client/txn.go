package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cairnkv/cairn/client"
	"github.com/spf13/cobra"
)

const txnSyntax = `A transaction is read from FILE (or stdin), one clause per line:

  if value(KEY) OP VALUE        OP: ==  !=  >  <   (bytewise; false if KEY is absent)
  if version(KEY) OP N          also mod(KEY) and create(KEY): raft indexes
  if exists(KEY)                or !exists(KEY)
  then put KEY VALUE
  then get KEY
  then del KEY
  then del-range START END      END "" means no upper bound
  then del-prefix PREFIX
  else ...                      the same operations, applied if a condition fails

KEY and VALUE are bare words or double-quoted strings with Go escapes
("a b", "\x00\xff", "line\n"). Blank lines and lines starting with # are
ignored. If every condition holds (no conditions hold), the 'then'
operations are applied, else the 'else' ones: in order, atomically.

A JSON file works too:

  {"if":   [{"target": "value", "key": "k", "op": "==", "value": "v1"},
            {"target": "version", "key": "k", "op": ">", "value": 2},
            {"target": "exists", "key": "k", "value": true}],
   "then": [{"op": "put", "key": "k", "value": "v2"}, {"op": "get", "key": "k"}],
   "else": [{"op": "del-prefix", "key": "tmp/"}]}

Prints which branch was applied (then/else) and each operation's result.`

// txnSpec is a parsed transaction.
type txnSpec struct {
	cmps       []client.Cmp
	then, els  []client.Op
	thenLabels []string // for printing results
	elseLabels []string
}

func newTxnCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "txn [--file FILE]",
		Short: "Apply a transaction: if conditions, then operations, else others",
		Long:  "Apply a transaction atomically.\n\n" + txnSyntax,
		Example: `  cairn txn <<'EOF'
  if value(config/mode) == slow
  then put config/mode fast
  else get config/mode
  EOF
  cairn txn --file move.txn
  cairn txn --file move.json -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			var src []byte
			var err error
			if file == "" || file == "-" {
				src, err = io.ReadAll(cmd.InOrStdin())
			} else {
				src, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			spec, err := parseTxn(src)
			if err != nil {
				return usageError{fmt.Errorf("txn: %w", err)}
			}
			return g.withClient(func(c *client.Client) error {
				ctx, cancel := g.ctx()
				defer cancel()
				res, err := c.Txn(ctx).If(spec.cmps...).Then(spec.then...).Else(spec.els...).Commit()
				if err != nil {
					return err
				}
				return g.printTxn(spec, res)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the transaction from FILE (default stdin)")
	return cmd
}

func (g *globals) printTxn(spec *txnSpec, res *client.TxnResult) error {
	labels := spec.thenLabels
	branch := "then"
	if !res.Succeeded {
		labels, branch = spec.elseLabels, "else"
	}
	if g.output == outJSON {
		var results []map[string]any
		for _, r := range res.Results {
			m := map[string]any{"op": r.Type.String()}
			switch r.Type {
			case client.OpTypeGet:
				if r.KV != nil {
					m["kv"] = g.kvJSON(r.KV)
				} else {
					m["found"] = false
				}
			case client.OpTypePut:
				m["version"], m["mod_index"] = r.Version, r.ModIndex
			case client.OpTypeDelete:
				m["deleted"] = r.Deleted
			}
			results = append(results, m)
		}
		return writeJSON(g.stdout, map[string]any{"succeeded": res.Succeeded, "branch": branch, "results": results})
	}
	g.printf("%s\n", branch)
	for i, r := range res.Results {
		label := r.Type.String()
		if i < len(labels) {
			label = labels[i]
		}
		switch r.Type {
		case client.OpTypeGet:
			if r.KV == nil {
				g.printf("%s: (not found)\n", label)
			} else {
				g.printf("%s: %s\n", label, g.bytesText(r.KV.Value))
			}
		case client.OpTypePut:
			g.printf("%s: OK (version %d)\n", label, r.Version)
		case client.OpTypeDelete:
			g.printf("%s: %s\n", label, map[bool]string{true: "deleted", false: "not found"}[r.Deleted])
		default:
			g.printf("%s: OK\n", label)
		}
	}
	return nil
}

// parseTxn parses the text or JSON form of a transaction.
func parseTxn(src []byte) (*txnSpec, error) {
	if t := bytes.TrimSpace(src); len(t) > 0 && t[0] == '{' {
		return parseTxnJSON(t)
	}
	spec := &txnSpec{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		toks, err := lexTxn(text)
		if err == nil {
			err = spec.clause(toks)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(spec.cmps)+len(spec.then)+len(spec.els) == 0 {
		return nil, fmt.Errorf("empty transaction")
	}
	return spec, nil
}

// token is a lexed word: quoted strings are words whose text is unquoted.
type token struct {
	text   string
	quoted bool
}

// lexTxn splits a line into words, quoted strings and the punctuation
// ( ) == != > < ! .
func lexTxn(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string %s", s[i:])
			}
			u, err := strconv.Unquote(s[i : j+1])
			if err != nil {
				return nil, fmt.Errorf("bad string %s: %v", s[i:j+1], err)
			}
			toks = append(toks, token{u, true})
			i = j + 1
		case c == '(' || c == ')':
			toks = append(toks, token{string(c), false})
			i++
		case strings.HasPrefix(s[i:], "=="), strings.HasPrefix(s[i:], "!="):
			toks = append(toks, token{s[i : i+2], false})
			i += 2
		case c == '=' || c == '>' || c == '<' || c == '!':
			t := string(c)
			if t == "=" {
				t = "=="
			}
			toks = append(toks, token{t, false})
			i++
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\"()=!<>", rune(s[j])) {
				j++
			}
			toks = append(toks, token{s[i:j], false})
			i = j
		}
	}
	return toks, nil
}

// clause adds one line's clause.
func (spec *txnSpec) clause(toks []token) error {
	kw := toks[0]
	if kw.quoted {
		return fmt.Errorf("want if, then or else, got %q", kw.text)
	}
	rest := toks[1:]
	switch kw.text {
	case "if":
		if len(spec.then)+len(spec.els) > 0 {
			return fmt.Errorf("'if' after 'then' or 'else'")
		}
		c, err := parseCmp(rest)
		if err != nil {
			return err
		}
		spec.cmps = append(spec.cmps, c)
	case "then", "else":
		if kw.text == "then" && len(spec.els) > 0 {
			return fmt.Errorf("'then' after 'else'")
		}
		op, label, err := parseOp(rest)
		if err != nil {
			return err
		}
		if kw.text == "then" {
			spec.then, spec.thenLabels = append(spec.then, op), append(spec.thenLabels, label)
		} else {
			spec.els, spec.elseLabels = append(spec.els, op), append(spec.elseLabels, label)
		}
	default:
		return fmt.Errorf("want if, then or else, got %q", kw.text)
	}
	return nil
}

func parseCmp(toks []token) (client.Cmp, error) {
	isPunct := func(i int, p string) bool { return i < len(toks) && !toks[i].quoted && toks[i].text == p }
	neg := isPunct(0, "!")
	if neg {
		toks = toks[1:]
	}
	// target ( key )
	if len(toks) < 4 || toks[0].quoted || !isPunct(1, "(") || !isPunct(3, ")") {
		return client.Cmp{}, fmt.Errorf("want a condition such as value(KEY) == VALUE or exists(KEY)")
	}
	target, key := toks[0].text, []byte(toks[2].text)
	rest := toks[4:]
	if target == "exists" || target == "missing" {
		if len(rest) != 0 {
			return client.Cmp{}, fmt.Errorf("%s(KEY) takes no operator", target)
		}
		if (target == "exists") != neg {
			return client.Exists(key), nil
		}
		return client.NotExists(key), nil
	}
	if neg {
		return client.Cmp{}, fmt.Errorf("'!' only negates exists(KEY)")
	}
	if len(rest) != 2 || rest[0].quoted {
		return client.Cmp{}, fmt.Errorf("want %s(KEY) OP VALUE with OP one of == != > <", target)
	}
	op, val := rest[0].text, rest[1].text
	switch target {
	case "value":
		vc := client.Value(key)
		switch op {
		case "==":
			return vc.Equal([]byte(val)), nil
		case "!=":
			return vc.NotEqual([]byte(val)), nil
		case ">":
			return vc.Greater([]byte(val)), nil
		case "<":
			return vc.Less([]byte(val)), nil
		}
	case "version", "mod", "create":
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return client.Cmp{}, fmt.Errorf("%s(KEY) compares with a number, not %q", target, val)
		}
		mc := map[string]func([]byte) client.MetaCmp{"version": client.Version, "mod": client.ModIndex, "create": client.CreateIndex}[target](key)
		switch op {
		case "==":
			return mc.Equal(n), nil
		case "!=":
			return mc.NotEqual(n), nil
		case ">":
			return mc.Greater(n), nil
		case "<":
			return mc.Less(n), nil
		}
	default:
		return client.Cmp{}, fmt.Errorf("unknown condition %q (want value, version, mod, create or exists)", target)
	}
	return client.Cmp{}, fmt.Errorf("unknown operator %q (want == != > <)", op)
}

func parseOp(toks []token) (client.Op, string, error) {
	if len(toks) == 0 || toks[0].quoted {
		return client.Op{}, "", fmt.Errorf("want an operation: put, get, del, del-range or del-prefix")
	}
	args := make([][]byte, 0, len(toks)-1)
	for _, t := range toks[1:] {
		args = append(args, []byte(t.text))
	}
	want := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("want %s", usage)
		}
		return nil
	}
	name := toks[0].text
	var op client.Op
	var err error
	switch name {
	case "put":
		if err = want(2, "put KEY VALUE"); err == nil {
			op = client.OpPut(args[0], args[1])
		}
	case "get":
		if err = want(1, "get KEY"); err == nil {
			op = client.OpGet(args[0])
		}
	case "del", "delete":
		if err = want(1, "del KEY"); err == nil {
			op = client.OpDelete(args[0])
		}
	case "del-range":
		if err = want(2, "del-range START END"); err == nil {
			if len(args[0]) == 0 {
				args[0] = []byte{0}
			}
			op = client.OpDeleteRange(args[0], args[1])
		}
	case "del-prefix":
		if err = want(1, "del-prefix PREFIX"); err == nil {
			if len(args[0]) == 0 {
				err = fmt.Errorf("empty prefix")
			} else {
				op = client.OpDeleteRange(nil, nil, client.WithPrefix(args[0]))
			}
		}
	default:
		err = fmt.Errorf("unknown operation %q (want put, get, del, del-range or del-prefix)", name)
	}
	if err != nil {
		return client.Op{}, "", err
	}
	label := name
	if len(args) > 0 {
		label += " " + escape(args[0])
	}
	return op, label, nil
}

// The JSON form.
type txnJSON struct {
	If   []cmpJSON `json:"if"`
	Then []opJSON  `json:"then"`
	Else []opJSON  `json:"else"`
}

type cmpJSON struct {
	Target string          `json:"target"`
	Key    string          `json:"key"`
	Op     string          `json:"op"`
	Value  json.RawMessage `json:"value"`
}

type opJSON struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value"`
	End   string `json:"end"`
}

func parseTxnJSON(src []byte) (*txnSpec, error) {
	var tj txnJSON
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tj); err != nil {
		return nil, fmt.Errorf("JSON: %v", err)
	}
	spec := &txnSpec{}
	for i, c := range tj.If {
		var toks []token
		if c.Target == "exists" {
			var b bool
			if err := json.Unmarshal(c.Value, &b); err != nil && len(c.Value) > 0 {
				return nil, fmt.Errorf("if[%d]: exists wants true or false", i)
			} else if len(c.Value) == 0 {
				b = true
			}
			if !b {
				toks = append(toks, token{"!", false})
			}
			toks = append(toks, token{"exists", false}, token{"(", false}, token{c.Key, true}, token{")", false})
		} else {
			var val string
			if c.Target == "value" {
				if err := json.Unmarshal(c.Value, &val); err != nil {
					return nil, fmt.Errorf("if[%d]: value wants a string", i)
				}
			} else {
				var n uint64
				if err := json.Unmarshal(c.Value, &n); err != nil {
					return nil, fmt.Errorf("if[%d]: %s wants a number", i, c.Target)
				}
				val = strconv.FormatUint(n, 10)
			}
			op := c.Op
			if op == "=" {
				op = "=="
			}
			toks = append(toks, token{c.Target, false}, token{"(", false}, token{c.Key, true}, token{")", false},
				token{op, false}, token{val, true})
		}
		cmp, err := parseCmp(toks)
		if err != nil {
			return nil, fmt.Errorf("if[%d]: %w", i, err)
		}
		spec.cmps = append(spec.cmps, cmp)
	}
	for _, branch := range []struct {
		name   string
		ops    []opJSON
		dst    *[]client.Op
		labels *[]string
	}{{"then", tj.Then, &spec.then, &spec.thenLabels}, {"else", tj.Else, &spec.els, &spec.elseLabels}} {
		for i, o := range branch.ops {
			toks := []token{{o.Op, false}, {o.Key, true}}
			switch o.Op {
			case "put":
				toks = append(toks, token{o.Value, true})
			case "del-range":
				toks = append(toks, token{o.End, true})
			}
			op, label, err := parseOp(toks)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", branch.name, i, err)
			}
			*branch.dst = append(*branch.dst, op)
			*branch.labels = append(*branch.labels, label)
		}
	}
	if len(spec.cmps)+len(spec.then)+len(spec.els) == 0 {
		return nil, fmt.Errorf("empty transaction")
	}
	return spec, nil
}
