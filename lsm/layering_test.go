package lsm

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestLayering checks the dependency rules of DESIGN.md, so the layout
// cannot silently rot: nothing in lsm/... imports the cluster layers, raft or
// gRPC; the engine's parts (sst, version, filter, record, cache, vfs, blob)
// never import the lsm package itself; lsm/blob uses only lsm/internal/base
// and lsm/internal/offheap; and nothing below fsm imports fsm or
// cluster.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/cairnkv/cairn/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/cairnkv/cairn/"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, mod)
		for _, imp := range p.Imports {
			if msg := layeringViolation(pkg, imp); msg != "" {
				t.Errorf("%s imports %s: %s", p.ImportPath, imp, msg)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("go list returned no packages")
	}
}

func layeringViolation(pkg, imp string) string {
	const mod = "github.com/cairnkv/cairn/"
	inEngine := pkg == "lsm" || strings.HasPrefix(pkg, "lsm/")
	if inEngine {
		for _, banned := range []string{"github.com/hashicorp/raft", "google.golang.org/grpc", "github.com/hashicorp/memberlist",
			mod + "cluster", mod + "fsm", mod + "api", mod + "client"} {
			if imp == banned || strings.HasPrefix(imp, banned+"/") {
				return "the engine must not depend on the cluster layers"
			}
		}
	}
	if strings.HasPrefix(pkg, "lsm/") && !strings.HasPrefix(pkg, "lsm/metamorphic") && !strings.HasPrefix(pkg, "lsm/crashtest") &&
		imp == mod+"lsm" {
		return "engine parts use lsm/internal/base, never the lsm package"
	}
	if pkg == "lsm/blob" && strings.HasPrefix(imp, mod+"lsm/") && imp != mod+"lsm/internal/base" && imp != mod+"lsm/internal/offheap" {
		return "lsm/blob depends only on lsm/internal/base and lsm/internal/offheap: the engine wires it to tables and versions"
	}
	if pkg == "lsm/internal/offheap" && strings.HasPrefix(imp, mod) {
		return "lsm/internal/offheap maps memory and nothing else: it imports nothing of cairn's"
	}
	if pkg == "trace" && strings.HasPrefix(imp, mod) {
		return "trace is the engine's tracing vocabulary: it imports nothing of cairn's (the engine imports it)"
	}
	if pkg == "fsm" || strings.HasPrefix(pkg, "fsm/") {
		if strings.HasPrefix(imp, mod+"cluster") || strings.HasPrefix(imp, mod+"client") {
			return "data flows client → api → cluster → fsm → lsm, never back"
		}
	}
	if pkg == "cluster/auth" && strings.HasPrefix(imp, mod) && imp != mod+"api/cairnpb" {
		return "cluster/auth decides from the request alone: it imports only the API's method names"
	}
	if imp == mod+"monitor" && !strings.HasPrefix(pkg, "cmd/") {
		return "monitor reads a running node from outside: only the commands wire it in"
	}
	return ""
}
