package auth

import (
	"fmt"
	"slices"

	"github.com/cairnkv/cairn/api/cairnpb"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// required is the role each gRPC method a node serves needs, by full
// method name ("/package.Service/Method"). Every method of every service
// the node registers must be here (methods_test.go checks the generated
// descriptors, cluster's tests the running server): a method without an
// entry is refused to everyone but peers.
var required = map[string]Role{
	// Key reads. Status and Members are reads too: clients find the
	// leader and the members with them.
	cairnpb.KV_Get_FullMethodName:          ReadOnly,
	cairnpb.KV_Scan_FullMethodName:         ReadOnly,
	cairnpb.Cluster_Status_FullMethodName:  ReadOnly,
	cairnpb.Cluster_Members_FullMethodName: ReadOnly,
	// Reflection describes the API (public protos), nothing of the data.
	reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName:      ReadOnly,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: ReadOnly,

	// Key writes. Txn writes through raft even when it only compares
	// and reads.
	cairnpb.KV_Put_FullMethodName:         ReadWrite,
	cairnpb.KV_Delete_FullMethodName:      ReadWrite,
	cairnpb.KV_DeleteRange_FullMethodName: ReadWrite,
	cairnpb.KV_Txn_FullMethodName:         ReadWrite,

	// Administration. Backup reads every key, but it is an operator's
	// tool; Trace sees every key's timing.
	cairnpb.Cluster_AddMember_FullMethodName:      Admin,
	cairnpb.Cluster_RemoveMember_FullMethodName:   Admin,
	cairnpb.Cluster_TransferLeader_FullMethodName: Admin,
	cairnpb.Cluster_Snapshot_FullMethodName:       Admin,
	cairnpb.Cluster_Backup_FullMethodName:         Admin,
	cairnpb.Cluster_Trace_FullMethodName:          Admin,
	cairnpb.Cluster_GossipKeyring_FullMethodName:  Admin,

	// Node to node: the leader's read confirmation rounds.
	cairnpb.ReadIndex_Confirm_FullMethodName: Peer,
	// A node proving who it is to a peer that verifies it before trusting
	// it (cluster/verify.go): the answer reveals no secret.
	cairnpb.ReadIndex_ProvePeer_FullMethodName: Open,

	// Health checks stay open: load balancers and orchestrators probe
	// them without credentials, and they reveal only serving status.
	healthpb.Health_Check_FullMethodName: Open,
	healthpb.Health_List_FullMethodName:  Open,
	healthpb.Health_Watch_FullMethodName: Open,
}

// Required returns the role the method fullMethod ("/cairn.v1.KV/Put")
// needs, and false for a method the table does not know.
func Required(fullMethod string) (Role, bool) {
	r, ok := required[fullMethod]
	return r, ok
}

// CheckCovered returns an error naming every method of services (a gRPC
// server's GetServiceInfo) that has no entry in the table.
func CheckCovered(services map[string]grpc.ServiceInfo) error {
	var missing []string
	for svc, info := range services {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			if _, ok := required[full]; !ok {
				missing = append(missing, full)
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("auth: no required role for %v: add them to the table in cluster/auth/methods.go", missing)
	}
	return nil
}
