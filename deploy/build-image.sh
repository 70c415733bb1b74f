#!/usr/bin/env bash
# Builds cairn's container image from binaries compiled on this machine, so
# no base image is pulled (the Dockerfile starts FROM scratch).
#
#   deploy/build-image.sh [IMAGE [CONTEXT_DIR]]
#
# IMAGE defaults to $CAIRN_IMAGE, else cairn:latest; CONTEXT_DIR (the docker
# build context: the two binaries and an empty directory) to
# deploy/.build/image. GOOS is linux; GOARCH is the host's unless set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
image="${1:-${CAIRN_IMAGE:-cairn:latest}}"
ctx="${2:-$root/deploy/.build/image}"
go="${GO:-go}"

mkdir -p "$ctx/empty"
rm -f "$ctx/cairn-node" "$ctx/cairn"
version="$(git -C "$root" describe --always --dirty 2>/dev/null || echo dev)"
echo "== go build (static) -> $ctx"
(
  cd "$root"
  export CGO_ENABLED=0 GOOS=linux
  ldflags="-s -w -X github.com/cairnkv/cairn/cluster.Version=$version"
  "$go" build -trimpath -ldflags "$ldflags" -o "$ctx/cairn-node" ./cmd/node
  "$go" build -trimpath -ldflags "$ldflags" -o "$ctx/cairn" ./cmd/client
)
echo "== docker build -t $image ($version)"
# DOCKER_BUILDKIT is left to the docker CLI: the Dockerfile uses only what
# the legacy builder understands. The CLI's deprecation notice is noise here.
docker build -q -f "$root/Dockerfile" -t "$image" \
  --label org.opencontainers.image.title=cairn \
  --label "org.opencontainers.image.revision=$version" \
  "$ctx" 2> >(grep -v -e 'DEPRECATED: The legacy builder' -e 'Install the buildx component' -e 'https://docs.docker.com/go/buildx' >&2)
