// Package composetest is the end-to-end test of cairn's container
// deployment: the image of the repository's Dockerfile and the cluster of
// its docker-compose.yml, driven from the host with the cairn CLI as a user
// would drive them. It has no code outside its test files.
//
// TestComposeCluster builds the static binaries and the image
// (deploy/build-image.sh, as `make docker` does), starts node1..node3 under
// a compose project of its own, waits until they are healthy and have a
// leader, then:
//
//  1. writes 1,000 keys with `cairn put` from the host;
//  2. kills the leader's container (`compose kill`) and writes 1,000 more;
//  3. starts it again and waits until its local state has every key;
//  4. reads all 2,000 keys linearizably from every node (a gRPC Scan sent to
//     each node's published port; a follower forwards it to the leader),
//     and from every node's local state (`cairn scan --consistency
//     serializable` pinned to that node), and once through the CLI's
//     linearizable path;
//  5. kills a follower's process from the host (not its container) and
//     waits for the restart policy to bring it back;
//  6. scales out (`--profile scale`: node4, node5) without touching the
//     running nodes and waits until the leader has promoted both to voters,
//     then reads every key from all five nodes;
//
// and tears everything down, volumes and image included, whether it passed
// or not (also on SIGINT or SIGTERM; a `go test -timeout` panic is the one
// exit that skips the teardown, so the test keeps its own deadline well
// inside it).
//
// TestComposeClusterTLS does the same, shorter, for the TLS variant
// (docker-compose.tls.yml on top): certificates from `cairn-node certs` in
// a one-shot container, TLS health checks, the CLI with mutual TLS from the
// host, a leader kill, reads from every node, and clients without the
// right certificates refused (make compose-test-tls).
//
// # Running it
//
//	make compose-test      # CAIRN_COMPOSE_TEST=1 go test -v -run TestComposeCluster ./deploy/composetest
//
// It runs only when CAIRN_COMPOSE_TEST is set, so `go test ./...` does not
// start containers on every developer machine. It then needs a Docker
// engine and a Compose tool (`docker compose`, else `docker-compose`, or
// $CAIRN_COMPOSE). If none answers it skips with the reason, except under
// CI=true, where a missing engine fails the test. It needs a Linux host: the
// CLI dials the leader at its container IP, which only a Linux host routes.
//
// Each run has a project name (-p cairntest<random>), image tag, subnet
// (CAIRN_NET, another one if Docker says it overlaps a network) and free
// host ports (CAIRN_NODEn_PORT, picked up front: a port Docker picks
// changes when a container restarts) of its own, so runs in parallel do not
// collide. On a failure the nodes' last log lines are printed before the
// teardown.
package composetest
