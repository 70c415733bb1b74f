package auth

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// servedPackages are the proto packages of the services a node serves:
// cairn's own (api/cairnpb) and gRPC's health and reflection services.
var servedPackages = map[protoreflect.FullName]bool{
	"cairn.v1":                true,
	"grpc.health.v1":          true,
	"grpc.reflection.v1":      true,
	"grpc.reflection.v1alpha": true,
}

// registeredMethods returns the full method names of every service in
// servedPackages, from the generated descriptors (protoregistry), and the
// proto files they come from.
func registeredMethods(t *testing.T) (methods map[string]bool, files map[string]bool) {
	methods, files = map[string]bool{}, map[string]bool{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !servedPackages[fd.Package()] {
			return true
		}
		files[fd.Path()] = true
		svcs := fd.Services()
		for i := range svcs.Len() {
			sd := svcs.Get(i)
			ms := sd.Methods()
			for j := range ms.Len() {
				methods["/"+string(sd.FullName())+"/"+string(ms.Get(j).Name())] = true
			}
		}
		return true
	})
	return methods, files
}

// TestEveryMethodHasARole fails when a service method is added to a proto
// file without an entry in the table (the node would refuse it to every
// client), and when the table names a method that no longer exists.
func TestEveryMethodHasARole(t *testing.T) {
	methods, files := registeredMethods(t)
	// Every proto file of api/cairnpb is in the registry (so a new file's
	// services are checked too).
	protos, err := filepath.Glob("../../api/cairnpb/*.proto")
	if err != nil || len(protos) == 0 {
		t.Fatalf("no proto files found: %v", err)
	}
	for _, p := range protos {
		if name := "cairnpb/" + filepath.Base(p); !files[name] {
			t.Errorf("%s is not in the proto registry (files: %v): import its generated code in methods.go", name, files)
		}
	}
	// The registry is not vacuous: these services are there.
	for _, m := range []string{"/cairn.v1.KV/Put", "/cairn.v1.Cluster/AddMember", "/cairn.v1.ReadIndex/Confirm",
		"/grpc.health.v1.Health/Check", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"} {
		if !methods[m] {
			t.Errorf("%s is not among the registered methods", m)
		}
	}
	for m := range methods {
		if _, ok := Required(m); !ok {
			t.Errorf("method %s has no required role: add it to the table in methods.go", m)
		}
	}
	for m := range required {
		if !methods[m] {
			t.Errorf("the table names %s, which no served service has", m)
		}
	}
}

// TestRoleOfEachMethod spells out, method by method, the roles the issue
// asks for, independently of the table's order of roles.
func TestRoleOfEachMethod(t *testing.T) {
	want := map[string]Role{
		"/cairn.v1.KV/Get": ReadOnly, "/cairn.v1.KV/Scan": ReadOnly,
		"/cairn.v1.Cluster/Status": ReadOnly, "/cairn.v1.Cluster/Members": ReadOnly,
		"/cairn.v1.KV/Put": ReadWrite, "/cairn.v1.KV/Delete": ReadWrite, "/cairn.v1.KV/DeleteRange": ReadWrite, "/cairn.v1.KV/Txn": ReadWrite,
		"/cairn.v1.Cluster/AddMember": Admin, "/cairn.v1.Cluster/RemoveMember": Admin, "/cairn.v1.Cluster/TransferLeader": Admin,
		"/cairn.v1.Cluster/Snapshot": Admin, "/cairn.v1.Cluster/Backup": Admin, "/cairn.v1.Cluster/Trace": Admin,
		"/cairn.v1.Cluster/GossipKeyring": Admin,
		"/cairn.v1.ReadIndex/Confirm":     Peer,
		"/cairn.v1.ReadIndex/ProvePeer":   Open,
		"/grpc.health.v1.Health/Check":    Open, "/grpc.health.v1.Health/Watch": Open, "/grpc.health.v1.Health/List": Open,
	}
	for m, r := range want {
		if got, ok := Required(m); !ok || got != r {
			t.Errorf("Required(%s) = %v, %v; want %v", m, got, ok, r)
		}
	}
	for m, r := range required {
		if strings.HasPrefix(m, "/cairn.v1.") {
			if _, ok := want[m]; !ok {
				t.Errorf("%s (%v) is not in this test's list: decide its role here too", m, r)
			}
		}
	}
}

func TestCheckCovered(t *testing.T) {
	ok := map[string]grpc.ServiceInfo{
		"cairn.v1.KV":           {Methods: []grpc.MethodInfo{{Name: "Put"}, {Name: "Get"}}},
		"grpc.health.v1.Health": {Methods: []grpc.MethodInfo{{Name: "Check"}}},
	}
	if err := CheckCovered(ok); err != nil {
		t.Fatal(err)
	}
	ok["cairn.v1.KV"] = grpc.ServiceInfo{Methods: []grpc.MethodInfo{{Name: "Put"}, {Name: "Compact"}}}
	ok["cairn.v1.Admin"] = grpc.ServiceInfo{Methods: []grpc.MethodInfo{{Name: "Wipe"}}}
	err := CheckCovered(ok)
	if err == nil || !strings.Contains(err.Error(), "/cairn.v1.KV/Compact") || !strings.Contains(err.Error(), "/cairn.v1.Admin/Wipe") {
		t.Fatalf("CheckCovered = %v", err)
	}
}
