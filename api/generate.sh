#!/usr/bin/env bash
# Regenerates the Go code of cairn's protobuf files:
#   api/cairnpb/*.proto -> api/cairnpb/*.pb.go, *_grpc.pb.go  (package cairnpb)
#   fsm/fsmpb/*.proto   -> fsm/fsmpb/*.pb.go                   (package fsmpb)
# The generated code is committed; `make generate` runs this script and the
# tree must stay clean afterwards. Needs protoc (Debian: apt-get install
# protobuf-compiler); installs the pinned Go plugins if they are missing.
# Idempotent: running it twice changes nothing.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

command -v protoc >/dev/null || {
	echo "generate.sh: protoc not found (apt-get install protobuf-compiler)" >&2
	exit 1
}

gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
export PATH="$gobin:$PATH"

# have_plugin NAME VERSION: the plugin is installed at exactly VERSION.
have_plugin() {
	command -v "$1" >/dev/null && "$1" --version 2>/dev/null | grep -q -- "$2"
}
have_plugin protoc-gen-go "$PROTOC_GEN_GO_VERSION" ||
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
have_plugin protoc-gen-go-grpc "${PROTOC_GEN_GO_GRPC_VERSION#v}" ||
	go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"

# The include roots are api/ and fsm/, so the files are registered as
# "cairnpb/kv.proto", "fsmpb/fsm.proto", ... and fsm.proto imports
# "cairnpb/kv.proto".
protoc -I api -I fsm \
	--go_out=api --go_opt=paths=source_relative \
	--go-grpc_out=api --go-grpc_opt=paths=source_relative \
	api/cairnpb/*.proto

protoc -I api -I fsm \
	--go_out=fsm --go_opt=paths=source_relative \
	fsm/fsmpb/*.proto
