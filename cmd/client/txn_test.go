package main

import (
	"strings"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
)

func TestParseTxn(t *testing.T) {
	spec, err := parseTxn([]byte(`
# comment
if value(a) == "x y"
if value("b\x00") != z
if value(c) > m
if value(c) < n
if version(a) == 3
if mod(a) > 10
if create(a) < 5
if exists(a)
if !exists(b)
if missing(q)
then put a "v\n"
then get a
then del b
then del-range a c
then del-range "" ""
then del-prefix p/
else get a
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.cmps) != 10 || len(spec.then) != 6 || len(spec.els) != 1 {
		t.Fatalf("%d compares, %d then, %d else", len(spec.cmps), len(spec.then), len(spec.els))
	}
	c := spec.cmps
	check := func(i int, key string, target cairnpb.Compare_Target, result cairnpb.Compare_Result) {
		t.Helper()
		p := c[i].Proto()
		if string(p.GetKey()) != key || p.GetTarget() != target || p.GetResult() != result {
			t.Errorf("compare %d: %v", i, p)
		}
	}
	check(0, "a", cairnpb.Compare_VALUE, cairnpb.Compare_EQUAL)
	check(1, "b\x00", cairnpb.Compare_VALUE, cairnpb.Compare_NOT_EQUAL)
	check(2, "c", cairnpb.Compare_VALUE, cairnpb.Compare_GREATER)
	check(3, "c", cairnpb.Compare_VALUE, cairnpb.Compare_LESS)
	check(4, "a", cairnpb.Compare_VERSION, cairnpb.Compare_EQUAL)
	check(5, "a", cairnpb.Compare_MOD_INDEX, cairnpb.Compare_GREATER)
	check(6, "a", cairnpb.Compare_CREATE_INDEX, cairnpb.Compare_LESS)
	check(7, "a", cairnpb.Compare_EXISTS, cairnpb.Compare_EQUAL)
	if string(c[0].Proto().GetValue()) != "x y" || c[4].Proto().GetVersion() != 3 || !c[7].Proto().GetExists() || c[8].Proto().GetExists() || c[9].Proto().GetExists() {
		t.Errorf("compare values: %v %v %v %v", c[0].Proto(), c[4].Proto(), c[7].Proto(), c[8].Proto())
	}
	if put := spec.then[0].Proto().GetPut(); string(put.GetValue()) != "v\n" {
		t.Errorf("put: %v", put)
	}
	if dr := spec.then[4].Proto().GetDeleteRange(); string(dr.GetStart()) != "\x00" || len(dr.GetEnd()) != 0 {
		t.Errorf("del-range of everything: %v", dr)
	}
	if dp := spec.then[5].Proto().GetDeleteRange(); string(dp.GetPrefix()) != "p/" {
		t.Errorf("del-prefix: %v", dp)
	}
	if spec.thenLabels[0] != "put a" || spec.elseLabels[0] != "get a" {
		t.Errorf("labels %q %q", spec.thenLabels, spec.elseLabels)
	}

	for src, want := range map[string]string{
		"":                         "empty transaction",
		"# only a comment":         "empty transaction",
		"when a":                   "want if, then or else",
		"if value(a) = b c":        "want value(KEY) OP VALUE",
		"if value(a) ~ b":          "unknown operator",
		"if version(a) > x":        "compares with a number",
		"if size(a) > 1":           "unknown condition",
		"if exists(a) == 1":        "takes no operator",
		"if !value(a) == b":        "only negates exists",
		"if value a == b":          "want a condition",
		`if value("a) == b`:        "unterminated string",
		`if value("\q") == b`:      "bad string",
		"then put a":               "want put KEY VALUE",
		"then frob a":              "unknown operation",
		"then del-prefix \"\"":     "empty prefix",
		"then get a\nif exists(a)": "line 2: 'if' after 'then'",
		"else get a\nthen get a":   "'then' after 'else'",
		`{"if": [{"target": "version", "key": "a", "op": ">", "value": "x"}]}`: "wants a number",
		`{"then": [{"op": "put", "key": "a", "value": "b", "ttl": 3}]}`:        "unknown field",
		`{"else": [{"op": "nope", "key": "a"}]}`:                               "else[0]: unknown operation",
	} {
		_, err := parseTxn([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseTxn(%q) = %v, want an error with %q", src, err, want)
		}
	}

	// The JSON form means the same as the text form.
	js, err := parseTxn([]byte(`{"if": [{"target": "value", "key": "a", "op": "=", "value": "x"},
		{"target": "exists", "key": "b", "value": false}, {"target": "mod", "key": "a", "op": "<", "value": 9}],
		"then": [{"op": "put", "key": "a", "value": "1"}, {"op": "del-range", "key": "a", "end": "b"}],
		"else": [{"op": "del", "key": "a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := parseTxn([]byte("if value(a) == x\nif !exists(b)\nif mod(a) < 9\nthen put a 1\nthen del-range a b\nelse del a"))
	for i := range js.cmps {
		if js.cmps[i].Proto().String() != text.cmps[i].Proto().String() {
			t.Errorf("compare %d: json %v, text %v", i, js.cmps[i].Proto(), text.cmps[i].Proto())
		}
	}
	for i := range js.then {
		if js.then[i].Proto().String() != text.then[i].Proto().String() {
			t.Errorf("then %d: json %v, text %v", i, js.then[i].Proto(), text.then[i].Proto())
		}
	}
	if js.els[0].Proto().String() != text.els[0].Proto().String() {
		t.Errorf("else: json %v, text %v", js.els[0].Proto(), text.els[0].Proto())
	}
}

func FuzzParseTxn(f *testing.F) {
	f.Add([]byte("if value(a) == b\nthen put a c\nelse get a"))
	f.Add([]byte(`{"if": [{"target": "exists", "key": "a"}]}`))
	f.Add([]byte(`if value("\x00) == `))
	f.Fuzz(func(t *testing.T, src []byte) {
		parseTxn(src) // must not panic
	})
}
