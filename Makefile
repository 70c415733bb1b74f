GO ?= go
PKGS := ./...

.PHONY: build test testrace lint bench bench-engine bench-cluster fuzz generate clean

build:
	$(GO) build $(PKGS)

# The test command the README gives and CI runs.
test:
	$(GO) test -count=1 -timeout 20m $(PKGS)

testrace:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Unit benchmarks of the engine's parts; figures go to bench/RESULTS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./lsm/...

# cairn side by side with Pebble, Badger and goleveldb (its own module,
# bench/engine): one process per engine per round, interleaved; a markdown
# table of medians goes to stdout and bench/engine/enginebench.md, the raw
# reports to enginebench.json, a chart of the ratios to enginebench.png.
# A full run (scale 1) takes well over an hour on 2 cores; ENGINE_SCALE=0.25
# about 30 minutes (27 on the loaded 2-core machine, 2026-12-01).
ENGINE_ROUNDS ?= 3
ENGINE_SCALE ?= 1
ENGINE_ARGS ?=
bench-engine:
	cd bench/engine && $(GO) run ./cmd/enginebench --rounds $(ENGINE_ROUNDS) --scale $(ENGINE_SCALE) \
	  --out enginebench.md --raw enginebench.json --png enginebench.png --logdir logs $(ENGINE_ARGS)

# cairn side by side with etcd v3.7.3 (its own module, bench/clusterbench,
# which keeps etcd's server out of the root go.mod): three cairn-node
# processes and three embedded-etcd processes on loopback, one load-generator
# process per run, every workload alternating cairn/etcd, CLUSTER_ROUNDS
# rounds of CLUSTER_DURATION per run. The markdown table (medians, min-max,
# cairn/etcd ratios, CPU and disk bytes per op) goes to stdout and is
# appended to bench/RESULTS.md. The defaults take about 22 minutes on the
# 2-core machine; CLUSTER_ARGS="--workloads put1,lin64 --profile" runs a
# subset and saves pprof CPU/mutex/block profiles of the cairn nodes and a
# CPU profile of each load generator.
CLUSTER_ROUNDS ?= 3
CLUSTER_DURATION ?= 20s
CLUSTER_ARGS ?=
bench-cluster:
	cd bench/clusterbench && $(GO) build -o clusterbench . && ./clusterbench --rounds $(CLUSTER_ROUNDS) \
	  --duration $(CLUSTER_DURATION) --out ../RESULTS.md $(CLUSTER_ARGS)

# Short fuzzing runs of every fuzz target (the seed corpora also run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Regenerates the protobuf and gRPC code (api/cairnpb, fsm/fsmpb); needs protoc
# (Debian: apt-get install protobuf-compiler). The tree must stay clean after.
generate:
	bash api/generate.sh

# Containers: Dockerfile (FROM scratch, binaries built here, so nothing is
# pulled) and docker-compose.yml. deploy/cluster.sh runs `docker compose`
# or `docker-compose`, whichever is installed.
CAIRN_IMAGE ?= cairn:latest
export CAIRN_IMAGE
# CAIRN_TLS=1: the cluster-* targets act on the TLS variant
# (docker-compose.tls.yml on top of docker-compose.yml).
CAIRN_TLS ?=
export CAIRN_TLS

.PHONY: docker cluster-up cluster-up-tls cluster-scale cluster-down cluster-destroy cluster-logs compose-test compose-test-tls certs

docker:
	GO=$(GO) bash deploy/build-image.sh $(CAIRN_IMAGE)

cluster-up: docker
	bash deploy/cluster.sh up

# The TLS variant: certificates made by `cairn-node certs` in a volume,
# TLS on gRPC, raft and between nodes, client certificates required.
# `CAIRN_TLS=1 deploy/cluster.sh certs DIR` copies ca.pem and the admin
# client certificate out for the host's CLI; other targets take CAIRN_TLS=1
# (`make cluster-destroy CAIRN_TLS=1` also removes the certificates).
cluster-up-tls: docker
	CAIRN_TLS=1 bash deploy/cluster.sh up

cluster-scale:
	bash deploy/cluster.sh scale

cluster-down:
	bash deploy/cluster.sh down

cluster-destroy:
	bash deploy/cluster.sh destroy

cluster-logs:
	bash deploy/cluster.sh logs

# End-to-end test of the image and the compose cluster (about 1-2 minutes).
compose-test:
	CAIRN_COMPOSE_TEST=1 $(GO) test -count=1 -v -timeout 15m -run '^TestComposeCluster$$' ./deploy/composetest

# The same for the TLS variant (docker-compose.tls.yml): 5m14s on the loaded
# 2-core machine (load ~30, 2026-12-02), most of it the image build and CLI
# processes, so it is a target of its own.
compose-test-tls:
	CAIRN_COMPOSE_TEST=1 $(GO) test -count=1 -v -timeout 15m -run '^TestComposeClusterTLS$$' ./deploy/composetest

clean:
	$(GO) clean -testcache

# A development CA and certificates for three local nodes and an admin
# client in CERTS_DIR (README, "Security"): `cairn-node certs`, Go crypto only.
CERTS_DIR ?= certs
CERTS_ARGS ?= --nodes n1,n2,n3 --clients admin
certs:
	$(GO) run ./cmd/node certs --dir $(CERTS_DIR) $(CERTS_ARGS)

# The fault-injection harness (jepsen/README.md). Local mode runs five
# cairn-node processes, each in a network namespace of its own (needs root
# for partitions; without root only kill, pause, membership and restart
# run). Each run writes jepsen/results/<time>-<workload>-<seed>/ and exits
# non-zero unless the checker finds the history valid.
JEPSEN_WORKLOAD ?= register
JEPSEN_TIME ?= 120s
JEPSEN_NEMESIS ?= partition,kill,pause
JEPSEN_ARGS ?=
JEPSEN_BIN ?= $(CURDIR)/bin/jepsen
.PHONY: jepsen jepsen-long jepsen-ci jepsen-mustfail jepsen-build

jepsen:
	$(GO) run ./jepsen --workload $(JEPSEN_WORKLOAD) --time $(JEPSEN_TIME) --nemesis $(JEPSEN_NEMESIS) $(JEPSEN_ARGS)

jepsen-build:
	mkdir -p $(JEPSEN_BIN)
	$(GO) build -o $(JEPSEN_BIN)/jepsen ./jepsen
	$(GO) build -o $(JEPSEN_BIN)/cairn-node ./cmd/node

# Every workload for JEPSEN_LONG_TIME (10 minutes) with every nemesis.
JEPSEN_LONG_TIME ?= 10m
jepsen-long: jepsen-build
	rc=0; for w in register set bank; do \
	  $(JEPSEN_BIN)/jepsen --node-bin $(JEPSEN_BIN)/cairn-node --workload $$w --time $(JEPSEN_LONG_TIME) --nemesis all $(JEPSEN_ARGS) || rc=1; \
	done; exit $$rc

# What CI runs (about 5 minutes): a short run of each workload with kill,
# pause and partition, which must pass, then the must-fail check.
# JEPSEN_CI_NODE_ARGS adds cairn-node flags (e.g. --raft-log-store=boltdb;
# the default raft-wal store needs third_party/raft-wal's fix of
# jepsen/README.md's track record #1).
JEPSEN_CI_TIME ?= 45s
JEPSEN_CI_NODE_ARGS ?=
jepsen-ci: jepsen-build
	rc=0; for w in register set bank; do \
	  $(JEPSEN_BIN)/jepsen --node-bin $(JEPSEN_BIN)/cairn-node --workload $$w --time $(JEPSEN_CI_TIME) --nemesis partition,kill,pause --node-args="$(JEPSEN_CI_NODE_ARGS)" $(JEPSEN_ARGS) || rc=1; \
	done; exit $$rc
	# The same harness with TLS everywhere (nodes, raft, clients).
	$(JEPSEN_BIN)/jepsen --node-bin $(JEPSEN_BIN)/cairn-node --workload register --tls --time $(JEPSEN_CI_TIME) --nemesis partition,kill,pause --node-args="$(JEPSEN_CI_NODE_ARGS)" $(JEPSEN_ARGS)
	$(MAKE) jepsen-mustfail

# The harness must catch a cluster that serves stale reads
# (cairn-node --unsafe-local-reads): short register runs under partitions
# and pauses, at most CAIRN_JEPSEN_RUNS of them, must report a violation.
jepsen-mustfail:
	CAIRN_JEPSEN=1 $(GO) test -count=1 -v -timeout 20m -run '^TestMustFail$$' ./jepsen
