# crin: a CRI runtime for Kubernetes nodes.
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: build test host-tests prefetch unit integration integration-loaded integration-shimv2 integration-lxc critest e2e e2e-loaded node node-bench lint run bench clean deps fuzz soak restart-bench

# crind: pure Go (no libc mapped) and without grpc's x/net/trace (which
# links text/template, whose reflection keeps every exported method in the
# binary): about 7 MiB less mapped binary, see docs/memory.md.
# No inlining outside the runtime's own packages: about 1 MiB less mapped
# binary, so 1 MiB less RSS (bench/results/2026-11-24-memory-rounds.md, "Fourth round").
CRIND_GCFLAGS := -gcflags=all=-l -gcflags=runtime= -gcflags=sync/...= \
	-gcflags=internal/...= -gcflags=syscall= -gcflags=golang.org/x/sys/...=
CRIND_BUILD := CGO_ENABLED=0 $(GO) build -tags grpcnotrace $(CRIND_GCFLAGS)
# crin-shim and crin-logger, one per pod or container, are pure Go too: no
# dynamic loader and libc in each (a shim's PSS 1389 -> 1098 KiB, 10 shims).

# BINDIR: where build puts the binaries; the test harness builds into a
# dir of its own with this target, so the suites run what build ships.
BINDIR ?= bin

build:
	$(CRIND_BUILD) -ldflags "$(LDFLAGS)" -o $(BINDIR)/crind ./cmd/crind
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BINDIR)/crinctl ./cmd/crinctl
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(BINDIR)/crin-shim ./cmd/crin-shim
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(BINDIR)/crin-logger ./cmd/crin-logger
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(BINDIR)/crin-pause ./cmd/crin-pause
	# crin-lxc links liblxc (lxc-dev): the one binary built with cgo.
	CGO_ENABLED=1 $(GO) build -ldflags "-s -w $(LDFLAGS)" -o $(BINDIR)/crin-lxc ./cmd/crin-lxc

deps:
	./scripts/deps.sh

# Every test, in two lanes side by side once the binaries are built:
# - the host's (host-tests): the linters, unit tests, then the integration
#   tests (root, real runc, CNI, a registry on 127.0.0.1) against the real
#   crind, then the CRI conformance suite (critest), then a real kubelet on
#   crind (e2e), one after another;
# - the node lane: a Debian 13 systemd, cgroup v2 VM with crind installed
#   from its unit and kubelet on the systemd driver.
# The node lane, the longer, spends most of its time in qemu's emulation,
# and the host's lane mostly waits on processes, so together they take
# little more than the node lane alone (docs/node-lane.md, "What the lane
# costs CI as a whole"). Each lane's output is printed whole when it ends.
test: deps prefetch build
	$(MAKE) --no-print-directory -j2 --output-sync=recurse host-tests node

host-tests:
	$(MAKE) --no-print-directory -j1 lint unit integration integration-shimv2 integration-lxc critest e2e

# The cached builds the later suites need, started in the background at
# once (critest, kubelet then gVisor, the order the suites need them; the
# node image, mostly downloads and dpkg, beside them), so that on a fresh
# machine they overlap the unit and integration tests.
# Every user of a cache takes its lock (cached, below), so a suite that
# needs one waits for the background build instead of starting a second.
# The background runs log to $(PREFETCH_LOG) and $(PREFETCH_LOG).node.
CACHE_DIR := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/crin
cached = mkdir -p $(CACHE_DIR) && flock $(CACHE_DIR)/.lock-$(1)
PREFETCH_LOG ?= /tmp/crin-prefetch.log
prefetch:
	@mkdir -p $(CACHE_DIR)
	@echo "prefetch: the node image, critest, kubelet and gVisor build in the background (log: $(PREFETCH_LOG))"
	@( $(call cached,critest) ./test/critest/build.sh; \
	  $(call cached,kubelet) ./test/e2e/kubelet/build.sh; \
	  $(call cached,gvisor) ./scripts/gvisor.sh ) </dev/null >$(PREFETCH_LOG) 2>&1 &
	@( $(call cached,node-image) ./test/node/image.sh ) </dev/null >$(PREFETCH_LOG).node 2>&1 &

# Unit tests, then every Go benchmark once, so none rots unseen.
unit:
	$(GO) test -race ./...
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

INTEGRATION_TIMEOUT ?= 20m
integration:
	$(GO) test -tags integration -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) ./...

# The integration suite (or the e2e suite) while CPU hogs keep every core
# busy, as a CI runner sharing its machine with another build does: the
# tests wait on events with generous deadlines, and this is how to see
# that they still do (the run as a whole gets three times the time).
# scripts/loaded.sh kills the hogs however the run ends; HOGS=n overrides
# their number (one per core).
integration-loaded:
	./scripts/loaded.sh $(MAKE) integration INTEGRATION_TIMEOUT=60m

e2e-loaded:
	./scripts/loaded.sh $(MAKE) e2e E2E_TIMEOUT=90m

# The integration suite again with the shim v2 handler (Debian's
# containerd-shim-runc-v2) as every daemon's default runtime: each test
# says with runsOn whether it runs on the shim v2 backend, and skips if
# not (tests of crin-shim's own files and faults; docs/runtimes.md).
integration-shimv2:
	CRIN_TEST_HANDLER=runc-v2 $(GO) test -tags integration -count=1 -p 1 -timeout 20m ./test/integration/

# The integration suite again with the lxc handler (LXC containers through
# crin-lxc and Debian's liblxc) as every daemon's default runtime: each
# test says with runsOn whether it runs on lxc, with the reason next to it
# when not (docs/runtimes.md, "LXC"). 1 to 3 minutes on a 2-core machine
# (42 tests run on lxc, the rest skip).
integration-lxc:
	CRIN_TEST_HANDLER=lxc $(GO) test -tags integration -count=1 -p 1 -timeout 20m ./test/integration/

# critest v1.37.0, cri-tools' CRI conformance suite (critest, crictl and
# ginkgo built once into ~/.cache/crin from the Go module proxy;
# CRIN_CRITEST_DIR overrides the dir), against the real crind: the whole
# suite on runc and on runc-v2, then its NRI specs with -nri-socket, with
# stand-in images built from this repository and Debian's busybox
# (fetched once with apt-get download) served on 127.0.0.1
# (docs/conformance.md: the skip list and its reasons).
CRITEST_PARALLEL ?= 4
critest:
	$(call cached,critest) ./test/critest/build.sh >/dev/null
	bb=$$(./test/critest/busybox.sh) && CRIN_CRITEST_BUSYBOX=$$bb CRIN_CRITEST_PARALLEL=$(CRITEST_PARALLEL) \
		$(GO) test -tags critest -count=1 -p 1 -timeout 30m -v -run '^TestCritest$$' ./test/critest/

# A standalone kubelet (built once into ~/.cache/crin from the Go module
# proxy; CRIN_KUBELET overrides the path) drives crind through static pods.
E2E_TIMEOUT ?= 30m
e2e:
	$(call cached,kubelet) ./test/e2e/kubelet/build.sh
	$(GO) test -tags e2e -count=1 -p 1 -timeout $(E2E_TIMEOUT) ./test/e2e/...

# The node lane: a Debian 13 VM (systemd, cgroup v2) under qemu's software
# emulation, with crind installed from contrib/systemd/crind.service. The
# image is built once per recipe into ~/.cache/crin (docs/node-lane.md).
# NODE_RUN picks the node tests (a -run pattern);
# CRIN_NODE_INTEGRATION_RUN picks the integration tests run in the VM and
# CRIN_NODE_INTEGRATION_HANDLERS their handlers (docs/node-lane.md).
# kubelet (TestKubeletOnNode) is the e2e suite's cached build.
NODE_RUN ?= .
node:
	$(call cached,node-image) ./test/node/image.sh >/dev/null
	$(call cached,kubelet) ./test/e2e/kubelet/build.sh
	$(call cached,gvisor) ./scripts/gvisor.sh >/dev/null
	$(GO) test -tags node -count=1 -p 1 -timeout 60m -v -run '$(NODE_RUN)' ./test/node/...

# Pod lifecycle latency in the VM: runc, crun and runsc (gVisor), on the systemd and the
# cgroupfs drivers (bench/README.md, "The node lane"). NODE_BENCH_N
# lifecycles per target.
NODE_BENCH_N ?= 20
NODE_BENCH_OUT ?= /tmp/crin-node-lifecycle.txt
node-bench: build
	$(call cached,node-image) ./test/node/image.sh >/dev/null
	$(call cached,gvisor) ./scripts/gvisor.sh >/dev/null
	CRIN_NODE_BENCH=$(NODE_BENCH_N) CRIN_NODE_BENCH_OUT=$(NODE_BENCH_OUT) \
		$(GO) test -tags node -count=1 -timeout 60m -v -run '^TestNodeLifecycleBench$$' ./test/node/

# Fuzz every Go native fuzz target for FUZZTIME each (default 30s); their
# seed corpora run in every `make unit`.
fuzz:
	./scripts/fuzz.sh

# go vet, then golangci-lint (pinned, built once into ~/.cache/crin) with
# .golangci.yml: the STYLE.md rules a linter can check.
lint:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags e2e ./...
	$(GO) vet -tags node ./...
	$(GO) vet -tags critest ./test/critest/...
	$(GO) vet -tags soak ./bench/soak/
	./scripts/golangci-lint.sh

run:
	./scripts/run.sh

bench: build
	./bench/lifecycle.sh

# The soak and churn harness (bench/soak, build tag soak; not part of
# `make test`): N long-running pods, L lifecycles beside them, faults
# injected, figures every K lifecycles. SOAK_ARGS passes its flags, e.g.
# SOAK_ARGS="-pods 10 -lifecycles 300 -window 50" (see bench/README.md).
SOAK_ARGS ?=
soak: build
	$(GO) test -tags soak -count=1 -v -timeout 24h -run '^TestSoak$$' ./bench/soak/ -args $(SOAK_ARGS)

# Restart at node scale, crind and containerd (bench/soak, TestRestartScale).
RESTART_ARGS ?=
restart-bench: build
	CRIN_CONTAINERD_VERSION=v2.4.2 ./bench/containerd.sh
	$(GO) test -tags soak -count=1 -v -timeout 3h -run '^TestRestartScale$$' ./bench/soak/ -args $(RESTART_ARGS)

clean:
	rm -rf bin
