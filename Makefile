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
# subset and saves pprof CPU/mutex/block profiles of the cairn nodes.
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

.PHONY: docker cluster-up cluster-scale cluster-down cluster-destroy cluster-logs compose-test

docker:
	GO=$(GO) bash deploy/build-image.sh $(CAIRN_IMAGE)

cluster-up: docker
	bash deploy/cluster.sh up

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

clean:
	$(GO) clean -testcache
