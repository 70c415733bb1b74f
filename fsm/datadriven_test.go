package fsm

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

var rewriteFlag = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// TestDataDriven runs the scripts in testdata/*.txt. A script is a list of
// blocks: a directive line, input lines, "----", and the expected output
// up to a blank line. Directives:
//
//	options max-sessions=N ttl=D   reopen the FSM with these options
//	apply                          apply the input lines as one batch
//	scan                           print every key
//	sessions                       print the session table
//	restart                        close and reopen the FSM
//
// Input lines of apply (each is one raft entry, numbered from 1):
//
//	put K V [prev] [client=C seq=N]
//	del K [prev] [client=C seq=N]
//	delrange START [END] | delrange prefix=P  [client=C seq=N]
//	txn [client=C seq=N] [if CMP, CMP ...] then OP; OP ... [else OP; OP ...]
//	    CMP: KEY value|version|mod|create|exists ==|!=|>|< OPERAND
//	    OP:  put K V | get K | del K | delrange START [END]
//	config                         a configuration entry
//	tick D                         advance the leader's clock (no entry)
//
// Run with -rewrite to regenerate the expected output.
func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

type scriptBlock struct {
	comments  []string // the comment and blank lines before the block
	directive string
	input     []string
	expected  string
	line      int
}

func parseScript(t *testing.T, file string) (trailer []string, blocks []scriptBlock) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var cur *scriptBlock
	inExpected := false
	var exp, comments []string
	lineNo := 0
	flush := func() {
		if cur != nil {
			cur.expected = strings.Join(exp, "\n")
			blocks = append(blocks, *cur)
		}
		cur, exp, inExpected = nil, nil, false
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		switch {
		case inExpected && line == "":
			flush()
		case inExpected:
			exp = append(exp, line)
		case cur == nil && (line == "" || strings.HasPrefix(line, "#")):
			comments = append(comments, line)
		case cur == nil:
			cur = &scriptBlock{comments: comments, directive: line, line: lineNo}
			comments = nil
		case line == "----":
			inExpected = true
		default:
			cur.input = append(cur.input, line)
		}
	}
	if cur != nil {
		flush()
	}
	return comments, blocks
}

func runScript(t *testing.T, file string) {
	trailer, blocks := parseScript(t, file)
	fs := vfs.NewMem()
	opts := testOptions(fs)
	f := openTest(t, fs, "/fsm", opts)
	g := newLogGen()
	var out strings.Builder
	for bi, b := range blocks {
		var got string
		fields := strings.Fields(b.directive)
		switch fields[0] {
		case "options":
			for _, kv := range fields[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "max-sessions":
					opts.MaxSessions, _ = strconv.Atoi(v)
				case "ttl":
					opts.SessionTTL, _ = time.ParseDuration(v)
				default:
					t.Fatalf("%s:%d: unknown option %s", file, b.line, k)
				}
			}
			f.Close()
			f = openTest(t, fs, "/fsm", opts)
		case "restart":
			f.Close()
			f = openTest(t, fs, "/fsm", opts)
			got = fmt.Sprintf("applied index %d", f.AppliedIndex())
		case "apply":
			var logs []*raft.Log
			for _, line := range b.input {
				if d, ok := strings.CutPrefix(line, "tick "); ok {
					dur, err := time.ParseDuration(d)
					if err != nil {
						t.Fatalf("%s:%d: %v", file, b.line, err)
					}
					g.now = g.now.Add(dur)
					continue
				}
				if line == "config" {
					logs = append(logs, g.config())
					continue
				}
				req, err := parseRequest(line)
				if err != nil {
					t.Fatalf("%s:%d: %q: %v", file, b.line, line, err)
				}
				logs = append(logs, g.cmd(t, req))
			}
			var lines []string
			for i, r := range f.ApplyBatch(logs) {
				lines = append(lines, fmt.Sprintf("%d: %s", logs[i].Index, formatResult(r)))
			}
			got = strings.Join(lines, "\n")
		case "scan":
			resp, err := f.Scan(&cairnpb.ScanRequest{Limit: cairnpb.MaxScanLimit})
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, kv := range resp.Kvs {
				lines = append(lines, formatKV(kv))
			}
			if len(lines) == 0 {
				lines = append(lines, "(empty)")
			}
			got = strings.Join(lines, "\n")
		case "sessions":
			var lines []string
			for e := f.sessions.lru.Front(); e != nil; e = e.Next() {
				s := e.Value.(*session)
				lines = append(lines, fmt.Sprintf("%s seq=%d last-index=%d idle=%v retained=%v",
					s.id, s.seq, s.lastIndex, time.Duration(f.state.clock-s.lastActive), s.retained))
			}
			if len(lines) == 0 {
				lines = append(lines, "(none)")
			}
			got = strings.Join(lines, "\n")
		default:
			t.Fatalf("%s:%d: unknown directive %q", file, b.line, b.directive)
		}
		for _, c := range b.comments {
			fmt.Fprintln(&out, c)
		}
		fmt.Fprintln(&out, b.directive)
		for _, in := range b.input {
			fmt.Fprintln(&out, in)
		}
		fmt.Fprintln(&out, "----")
		if got != "" {
			fmt.Fprintln(&out, got)
		}
		if bi < len(blocks)-1 {
			fmt.Fprintln(&out)
		}
		if !*rewriteFlag && got != b.expected {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, b.directive, got, b.expected)
		}
	}
	for _, c := range trailer {
		fmt.Fprintln(&out, c)
	}
	if *rewriteFlag {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func formatKV(kv *cairnpb.KeyValue) string {
	return fmt.Sprintf("%s=%s (version %d, create %d, mod %d)", kv.Key, kv.Value, kv.Version, kv.CreateIndex, kv.ModIndex)
}

func formatResult(r interface{}) string {
	switch r := r.(type) {
	case nil:
		return "-"
	case error:
		return "error: " + r.Error()
	case *cairnpb.PutResponse:
		s := fmt.Sprintf("put version=%d create=%d mod=%d", r.Version, r.CreateIndex, r.ModIndex)
		if r.PrevKv != nil {
			s += " prev: " + formatKV(r.PrevKv)
		}
		return s
	case *cairnpb.DeleteResponse:
		s := fmt.Sprintf("del deleted=%d", r.Deleted)
		if r.PrevKv != nil {
			s += " prev: " + formatKV(r.PrevKv)
		}
		return s
	case *cairnpb.DeleteRangeResponse:
		return "delrange"
	case *cairnpb.TxnResponse:
		var parts []string
		for _, op := range r.Responses {
			switch op := op.Response.(type) {
			case *cairnpb.ResponseOp_Put:
				parts = append(parts, formatResult(op.Put))
			case *cairnpb.ResponseOp_Get:
				if op.Get.Kv == nil {
					parts = append(parts, "get: absent")
				} else {
					parts = append(parts, "get: "+formatKV(op.Get.Kv))
				}
			case *cairnpb.ResponseOp_Delete:
				parts = append(parts, formatResult(op.Delete))
			case *cairnpb.ResponseOp_DeleteRange:
				parts = append(parts, "delrange")
			}
		}
		return fmt.Sprintf("txn succeeded=%v [%s]", r.Succeeded, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("%T", r)
}

// parseRequest parses one write line of an apply block.
func parseRequest(line string) (proto.Message, error) {
	words := strings.Fields(line)
	var client string
	var seq uint64
	var rest []string
	for _, w := range words {
		switch {
		case strings.HasPrefix(w, "client="):
			client = strings.TrimPrefix(w, "client=")
		case strings.HasPrefix(w, "seq="):
			seq, _ = strconv.ParseUint(strings.TrimPrefix(w, "seq="), 10, 64)
		default:
			rest = append(rest, w)
		}
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("empty line")
	}
	var req proto.Message
	var err error
	if rest[0] == "txn" {
		req, err = parseTxn(rest[1:])
	} else {
		req, err = parseOp(rest)
	}
	if err != nil {
		return nil, err
	}
	setSession(req, client, seq)
	return req, nil
}

func parseOp(w []string) (proto.Message, error) {
	arg := func(i int) []byte {
		if i < len(w) {
			if w[i] == `""` {
				return []byte{}
			}
			return []byte(w[i])
		}
		return nil
	}
	hasWord := func(name string) bool {
		for _, x := range w {
			if x == name {
				return true
			}
		}
		return false
	}
	switch w[0] {
	case "put":
		return &cairnpb.PutRequest{Key: arg(1), Value: arg(2), PrevKv: hasWord("prev")}, nil
	case "get":
		return &cairnpb.GetRequest{Key: arg(1)}, nil
	case "del":
		return &cairnpb.DeleteRequest{Key: arg(1), PrevKv: hasWord("prev")}, nil
	case "delrange":
		if len(w) > 1 && strings.HasPrefix(w[1], "prefix=") {
			return &cairnpb.DeleteRangeRequest{Prefix: []byte(strings.TrimPrefix(w[1], "prefix="))}, nil
		}
		return &cairnpb.DeleteRangeRequest{Start: arg(1), End: arg(2)}, nil
	}
	return nil, fmt.Errorf("unknown operation %q", w[0])
}

func parseTxn(w []string) (*cairnpb.TxnRequest, error) {
	txn := &cairnpb.TxnRequest{}
	section := ""
	var cur []string
	end := func() error {
		if len(cur) == 0 {
			return nil
		}
		defer func() { cur = nil }()
		if section == "if" {
			return parseCompares(strings.Join(cur, " "), txn)
		}
		for _, opText := range strings.Split(strings.Join(cur, " "), ";") {
			op, err := parseOp(strings.Fields(opText))
			if err != nil {
				return err
			}
			ro := &cairnpb.RequestOp{}
			switch op := op.(type) {
			case *cairnpb.PutRequest:
				ro.Request = &cairnpb.RequestOp_Put{Put: op}
			case *cairnpb.GetRequest:
				ro.Request = &cairnpb.RequestOp_Get{Get: op}
			case *cairnpb.DeleteRequest:
				ro.Request = &cairnpb.RequestOp_Delete{Delete: op}
			case *cairnpb.DeleteRangeRequest:
				ro.Request = &cairnpb.RequestOp_DeleteRange{DeleteRange: op}
			}
			if section == "then" {
				txn.Success = append(txn.Success, ro)
			} else {
				txn.Failure = append(txn.Failure, ro)
			}
		}
		return nil
	}
	for _, x := range w {
		if x == "if" || x == "then" || x == "else" {
			if err := end(); err != nil {
				return nil, err
			}
			section = x
			continue
		}
		cur = append(cur, x)
	}
	if err := end(); err != nil {
		return nil, err
	}
	return txn, nil
}

func parseCompares(s string, txn *cairnpb.TxnRequest) error {
	for _, part := range strings.Split(s, ",") {
		f := strings.Fields(part)
		if len(f) != 4 {
			return fmt.Errorf("compare %q: want KEY TARGET OP OPERAND", part)
		}
		c := &cairnpb.Compare{Key: []byte(f[0])}
		switch f[2] {
		case "==":
			c.Result = cairnpb.Compare_EQUAL
		case "!=":
			c.Result = cairnpb.Compare_NOT_EQUAL
		case ">":
			c.Result = cairnpb.Compare_GREATER
		case "<":
			c.Result = cairnpb.Compare_LESS
		default:
			return fmt.Errorf("compare operator %q", f[2])
		}
		n, _ := strconv.ParseUint(f[3], 10, 64)
		switch f[1] {
		case "value":
			c.Target, c.TargetUnion = cairnpb.Compare_VALUE, &cairnpb.Compare_Value{Value: []byte(f[3])}
		case "version":
			c.Target, c.TargetUnion = cairnpb.Compare_VERSION, &cairnpb.Compare_Version{Version: n}
		case "mod":
			c.Target, c.TargetUnion = cairnpb.Compare_MOD_INDEX, &cairnpb.Compare_ModIndex{ModIndex: n}
		case "create":
			c.Target, c.TargetUnion = cairnpb.Compare_CREATE_INDEX, &cairnpb.Compare_CreateIndex{CreateIndex: n}
		case "exists":
			c.Target, c.TargetUnion = cairnpb.Compare_EXISTS, &cairnpb.Compare_Exists{Exists: f[3] == "true"}
		default:
			return fmt.Errorf("compare target %q", f[1])
		}
		txn.Compare = append(txn.Compare, c)
	}
	return nil
}
