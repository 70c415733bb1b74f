#!/usr/bin/env bash
# Runs the compose cluster of docker-compose.yml with whichever Compose tool
# this machine has: the `docker compose` v2 plugin, else the standalone
# `docker-compose` (1.28 or later, for profiles). $CAIRN_COMPOSE overrides
# the choice ("docker-compose", "docker compose", "podman-compose", ...).
#
#   deploy/cluster.sh up        start node1..node3 and wait until they are healthy
#   deploy/cluster.sh scale     add node4 and node5 (profile "scale") and wait
#   deploy/cluster.sh down      remove the containers and the network, keep the volumes
#   deploy/cluster.sh destroy   remove the volumes too (all data)
#   deploy/cluster.sh logs [ARGS]     follow the nodes' logs (default: -f --tail=100)
#   deploy/cluster.sh cli ARGS        run the cairn CLI inside a running node
#   deploy/cluster.sh compose ARGS    run any compose command, e.g. `compose kill node2`
#   deploy/cluster.sh wait [SECONDS]  wait until every running node is healthy
#   deploy/cluster.sh certs DIR       copy the TLS variant's ca.pem and client certificates to DIR
#
# With CAIRN_TLS=1 every command acts on the TLS variant: docker-compose.yml
# with docker-compose.tls.yml on top (certificates made by `cairn-node certs`
# in a volume, TLS on gRPC and raft, client certificates required).
#
# It runs from the repository root, so the project name is compose's
# default (the directory's name, or $COMPOSE_PROJECT_NAME) and plain
# `docker compose ...` commands typed there act on the same cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

compose=()
if [[ -n "${CAIRN_COMPOSE:-}" ]]; then
  read -r -a compose <<<"$CAIRN_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  echo "cluster.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
  exit 1
fi

files=()
if [[ "${CAIRN_TLS:-}" == 1 || "${CAIRN_TLS:-}" == true ]]; then
  files=(-f docker-compose.yml -f docker-compose.tls.yml)
fi

c() { "${compose[@]}" "${files[@]}" "$@"; }

# wait_healthy SECONDS: waits until every container of the project that is
# running reports healthy; fails naming the ones that do not.
wait_healthy() {
  local deadline=$((SECONDS + $1)) ids id state pending
  while :; do
    ids="$(c --profile scale ps -q)"
    pending=""
    for id in $ids; do
      state="$(docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}} {{index .Config.Labels "com.docker.compose.service"}} {{.State.ExitCode}}' "$id")"
      case "$state" in
        *" running healthy "*) ;;
        *" exited  certs 0") ;; # the TLS variant's one-shot certificate maker, done
        *) pending+="  ${state#/}"$'\n' ;;
      esac
    done
    if [[ -n "$ids" && -z "$pending" ]]; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      echo "cluster.sh: not healthy after $1s:" >&2
      printf '%s' "$pending" >&2
      return 1
    fi
    sleep 1
  done
}

# first_running prints the service name of a running node.
first_running() {
  local s
  for s in $(c --profile scale ps --services --filter status=running 2>/dev/null | sort); do
    echo "$s"
    return 0
  done
  echo "cluster.sh: no node is running" >&2
  return 1
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  up)
    c up -d "$@"
    echo "== waiting for the nodes to be healthy"
    wait_healthy 120
    c exec -T "$(first_running)" cairn status --timeout 30s
    ;;
  scale)
    c --profile scale up -d "$@"
    echo "== waiting for the nodes to be healthy"
    wait_healthy 120
    echo "node4 and node5 join as non-voters; the leader promotes them after ~10s of being caught up:"
    echo "  deploy/cluster.sh cli members"
    ;;
  down)
    c --profile scale down --remove-orphans "$@"
    ;;
  destroy)
    c --profile scale down --volumes --remove-orphans "$@"
    ;;
  logs)
    if [[ $# -eq 0 ]]; then set -- -f --tail=100; fi
    c --profile scale logs "$@"
    ;;
  cli)
    c exec -T "$(first_running)" cairn "$@"
    ;;
  compose)
    c "$@"
    ;;
  wait)
    wait_healthy "${1:-120}"
    ;;
  certs)
    [[ $# -eq 1 ]] || { echo "usage: CAIRN_TLS=1 deploy/cluster.sh certs DIR" >&2; exit 2; }
    id="$(c ps -q certs)"
    [[ -n "$id" ]] || { echo "cluster.sh: no certs container (start the TLS variant: CAIRN_TLS=1 deploy/cluster.sh up)" >&2; exit 1; }
    mkdir -p "$1"
    for f in ca.pem admin.pem admin-key.pem; do
      docker cp "$id:/certs/$f" "$1/$f"
    done
    chmod 600 "$1/admin-key.pem"
    echo "cairn --cacert $1/ca.pem --cert $1/admin.pem --key $1/admin-key.pem --endpoints ${CAIRN_PUBLISH_ADDR:-127.0.0.1}:${CAIRN_NODE1_PORT:-7379} status"
    ;;
  *)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
