# fieldlink — make targets. `make test` is what CI runs (see .ci/run).
GO       ?= go
PKGS     := ./...
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The release toolchain: dist binaries are built with it (scripts/cross-build),
# and govulncheck judges the standard library at its version. The go command
# fetches it from the module proxy. 1.27.3 fixes the net/http, crypto/tls and
# crypto/x509 advisories that affect the 1.26.8 development toolchain.
RELEASE_GO  ?= go1.27.3
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
# The Go vulnerability database, as the OSV files of golang.org/x/vulndb from
# the module proxy (vuln.go.dev itself is not reachable from every build host).
VULNDB      := golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018

VERSION := $(or $(VERSION),$(shell git describe --tags --always --dirty 2>/dev/null),dev)

.PHONY: all test test-fast test-unit test-field test-chaos test-cross vet fmt lint vulncheck bench bench-compare footprint chaos demo build dist cross-check lab lab-quick debs fuzz fleet-check power-check power-check-long cluster-check cluster-check-long cluster-check-fleet cluster-check-puback cluster-check-limit cluster-check-scale lab-scale

all: test

## test: every tier CI runs, fastest first so that a failure shows early; a line before each
## tier says where the run is. About 17 minutes on 2 cores, 19 the first time (see the README).
test:
	@echo "[1/10] vet (gofmt -l, go vet), at $$(date +%T)"
	@$(MAKE) --no-print-directory vet
	@echo "[2/10] unit and integration tests (go test -race ./..., chaos apart), at $$(date +%T)"
	@$(MAKE) --no-print-directory test-unit
	@echo "[3/10] the field build's tests (go test -race -tags field ./cmd/gateway), at $$(date +%T)"
	@$(MAKE) --no-print-directory test-field
	@echo "[4/10] the chaos run, short (go test -race -v ./tests/chaos/), at $$(date +%T)"
	@$(MAKE) --no-print-directory test-chaos
	@echo "[5/10] govulncheck with the release toolchain, at $$(date +%T)"
	@$(MAKE) --no-print-directory vulncheck
	@echo "[6/10] fuzzing, 5 s per target (scripts/fuzz-all), at $$(date +%T)"
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5s
	@echo "[7/10] ARM binaries and tests under qemu (go test -tags crosscheck ./scripts/cross-build/), at $$(date +%T)"
	@$(MAKE) --no-print-directory test-cross
	@echo "[8/10] the .deb on a real systemd and Mender updates through the health gate (make fleet-check), at $$(date +%T)"
	@$(MAKE) --no-print-directory fleet-check
	@echo "[9/10] power cuts: a lossy filesystem and a VM with its own kernel (make power-check), at $$(date +%T)"
	@$(MAKE) --no-print-directory power-check
	@echo "[10/10] a three-node NATS cluster over MQTT: node kills, black hole, slow node, outage (make cluster-check), at $$(date +%T)"
	@$(MAKE) --no-print-directory cluster-check
	@echo "make test: all 10 tiers passed, at $$(date +%T)"

## test-fast: vet and the unit and integration tests only (a few minutes): the tiers to run while
## working; make test (CI) adds the field build, chaos, govulncheck, fuzzing and qemu
test-fast:
	@echo "[1/2] vet (gofmt -l, go vet)"
	@$(MAKE) --no-print-directory vet
	@echo "[2/2] unit and integration tests (go test -race ./..., chaos apart)"
	@$(MAKE) --no-print-directory test-unit

## test-unit: every test of every package but chaos, under the race detector
test-unit:
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list $(PKGS) | grep -v '/chaos$$')

## test-field: the field build (-tags field) leaves out the demo, the lab, emulate and delphi, and reloads
test-field:
	$(GO) test -race -count=1 -tags field,nethttpomithttp2 -run 'TestUsage|TestReload' ./cmd/gateway

## test-chaos: the short chaos run (CHAOS_DURATION default 50 s); its figures line, or its log's tail
test-chaos:
	@$(GO) test -race -count=1 -v -timeout 15m ./tests/chaos/ > .chaos.log 2>&1; rc=$$?; \
	grep -E 'chaos: seed=|^(--- |ok|FAIL|PASS)' .chaos.log; \
	if [ $$rc -ne 0 ]; then tail -200 .chaos.log; exit $$rc; fi

## test-cross: the ARM binaries built and the sensors, buffer and selector tests run under qemu
test-cross:
	$(GO) test -count=1 -tags crosscheck -timeout 40m ./scripts/cross-build/

## vet: gofmt must have nothing to say, and go vet must pass
vet:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags field,nethttpomithttp2 ./cmd/gateway
	$(GO) vet -tags crosscheck ./scripts/cross-build/
	$(GO) vet -tags fleet ./packaging/
	$(GO) vet -tags powercut ./tests/powercut/
	$(GO) vet -tags cluster ./tests/cluster/

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(STATICCHECK) -tags cluster ./tests/cluster/

## vulncheck: govulncheck over every package with the release toolchain; fails on any reachable vulnerability
vulncheck:
	@db=$$($(GO) mod download -json $(VULNDB) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	test -d "$$db/data/osv" || { echo "vulncheck: no database in $(VULNDB)"; exit 1; }; \
	echo "govulncheck $(GOVULNCHECK), $(RELEASE_GO), database $(VULNDB)"; \
	GOTOOLCHAIN=$(RELEASE_GO) $(GO) run $(GOVULNCHECK) -db "file://$$db/data/osv" ./...

## bench: the polling, planning, encoding, buffer, selector and uplink figures as side-by-side
## ratios, then the footprint run against Telegraf and Node-RED (last: it exits 1 on a missed target)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./sensors/ ./sensors/plan/ ./packet/ ./buffer/ ./selector/ ./uplink/ ./uplink/mqtt/ | tee bench.txt
	@scripts/bench-report bench.txt
	$(GO) run ./scripts/footprint $(FOOTPRINT_FLAGS)

## footprint: gateway vs Telegraf 1.37.2 (custom build) and Node-RED 4.1.15 + node-red-contrib-modbus
## 5.23.3 at 10, 100 and 1,000 pkt/s, 60 s each: resident memory, CPU per 1,000 packets, share of one
## core, bytes written per packet (needs mosquitto, node 20, npm; Telegraf is built with go install)
FOOTPRINT_FLAGS ?=
footprint:
	$(GO) run ./scripts/footprint $(FOOTPRINT_FLAGS)

# This checkout against an earlier revision (BASE=rev), side by side in one
# run: make bench's Go benchmarks in alternating rounds, and the footprint
# with both gateways at once.
bench-compare:
	scripts/bench-compare $(BASE) $(ROUNDS)

## demo: emulated farm and mine devices, polled live
demo:
	$(GO) run ./cmd/gateway demo

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o gateway ./cmd/gateway

## dist: static, reproducible gateway binaries for armv6, armv7, arm64, amd64 in dist/, with a size table
dist:
	VERSION=$(VERSION) GOTOOLCHAIN=$(RELEASE_GO) scripts/cross-build/build

## cross-check: the ARM binaries and the sensors, buffer and selector tests under qemu-user-static
cross-check: dist
	VERSION=$(VERSION) scripts/cross-build/qemu-check

## lab: rerun the selector lab (20 seeds) and regenerate docs/selector-lab.md and docs/lab/*.svg (under 20 minutes on 2 cores)
lab:
	$(GO) run ./cmd/gateway lab -o docs/selector-lab.md

## lab-quick: one seed of every scenario and strategy, report in $(LAB_QUICK_OUT) (not docs/; a few minutes)
LAB_QUICK_OUT ?= $(or $(TMPDIR),/tmp)/selector-lab-quick.md
lab-quick:
	$(GO) run ./cmd/gateway lab -seeds 1 -o $(LAB_QUICK_OUT)

## chaos: the long chaos run for a release (CHAOS_DURATION, default 10m; CHAOS_SEED=N replays a fault
## schedule): emulator, three mosquitto behind toxiproxy, the gateway as a process, seeded faults,
## kill -9, a full tmpfs (needs root); one figures line; fails on any loss. make test runs a short one.
CHAOS_DURATION ?= 10m
chaos:
	CI=true CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -v -run '^TestChaos$$' -timeout 3h ./tests/chaos/

## debs: Debian packages (armhf = the armv6 binary, arm64, amd64) of dist/'s binaries, in dist/
debs: dist
	VERSION=$(VERSION) packaging/build-debs

## fleet-check: the .deb on a real systemd, in a Debian container booted by systemd-nspawn:
## install, start (Type=notify), the sandbox in force (systemd-analyze security's score), journal
## fields, reload, upgrades keeping the site file and the buffer, remove, purge; and Mender updates
## through the health gate: a good version committed, one that cannot poll rolled back, one whose
## buffer the installed version could not read refused, no packet lost (packaging/fleet_test.go).
## Needs root, systemd-container, debootstrap, mender-artifact, mosquitto; the Debian rootfs is built
## once by scripts/fleet-rootfs into ~/.cache/fieldlink/fleet. About 1 minute, 2.5 the first time.
fleet-check:
	@$(GO) test -count=1 -tags fleet -v -run '^TestFleet$$' -timeout 30m ./packaging/ > .fleet-check.log 2>&1; rc=$$?; \
	grep -E 'fleet_test.go:[0-9]+: (rootfs|container|running|systemd-analyze|update to|received|fleet check)|^\s*(--- |ok|FAIL|PASS)' .fleet-check.log; \
	if [ $$rc -ne 0 ]; then tail -200 .fleet-check.log; exit $$rc; fi

## fuzz: run every fuzz target for FUZZTIME each (default 30s) and print time, executions and corpus
## size per target; crashers land in each package's testdata/fuzz (make test runs it at 5s each)
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz-all

## power-check: power cuts, which lose the page cache that a kill -9 leaves (docs/power.md): the
## field build on a FUSE filesystem of the test's own that drops every write not fsynced at the cut
## (POWER_LOSSY_CUTS, default 200, and POWER_LOSSY_FULL_CUTS, default 20, with the buffer full and
## evicting, POWER_COMMAND_CUTS, default 100, aimed at the platform's commands as they run, and
## POWER_BUNDLE_CUTS, default 20, and POWER_BUNDLE_CONFIRM_CUTS, default 1, at remote-configuration
## bundles applied, on probation and confirmed), and in a qemu VM booting Debian's kernel, cut by SIGKILL of qemu
## with the guest's dirty pages unwritten (POWER_VM_CUTS, default 5), and booted in 1970 and an hour
## behind with its clock synchronised and stepped (TestVMClock), and a dying SD card (docs/sdcard.md:
## EIO, read-only, full and slow on the lossy filesystem, and POWER_SDCARD_VM, default readonly, or
## all, in the VM, on device-mapper targets under ext4); each level again with the
## buffer's fsync off, which must lose packets. Ends with one figures line per level: cuts, packets
## stored, lost, reused, salvages. Needs root, qemu-system-x86, busybox-static, fuse3, mosquitto;
## Debian's kernel is unpacked once into ~/.cache/fieldlink/powercut. About 6 minutes.
POWER_LOSSY_CUTS ?= 200
POWER_LOSSY_FULL_CUTS ?= 20
POWER_VM_CUTS ?= 5
POWER_COMMAND_CUTS ?= 100
POWER_BUNDLE_CUTS ?= 20
POWER_BUNDLE_CONFIRM_CUTS ?= 1
POWER_SDCARD_VM ?= readonly
POWER_RUN ?= .
power-check:
	@POWERCUT_LOSSY_CUTS=$(POWER_LOSSY_CUTS) POWERCUT_LOSSY_FULL_CUTS=$(POWER_LOSSY_FULL_CUTS) POWERCUT_VM_CUTS=$(POWER_VM_CUTS) \
	POWERCUT_COMMAND_CUTS=$(POWER_COMMAND_CUTS) POWERCUT_BUNDLE_CUTS=$(POWER_BUNDLE_CUTS) POWERCUT_BUNDLE_CONFIRM_CUTS=$(POWER_BUNDLE_CONFIRM_CUTS) \
	POWERCUT_SDCARD_VM=$(POWER_SDCARD_VM) \
	$(GO) test -count=1 -tags powercut -v -run '$(POWER_RUN)' -timeout 120m ./tests/powercut/ > .power-check.log 2>&1; rc=$$?; \
	grep -E '^\s*(--- |ok|FAIL|PASS)' .power-check.log; \
	if [ $$rc -ne 0 ]; then tail -200 .power-check.log; echo '--- what the tests logged:'; grep -E '^\s+[a-z_]+_test\.go:[0-9]+:' .power-check.log | tail -80; fi; \
	grep -oE 'powercut [a-z-]+: cuts=.*' .power-check.log; grep -oE '^powercut sdcard[a-z-]* [a-z]+: .*' .power-check.log; exit $$rc

## power-check-long: make power-check with 2,000 cuts on the lossy filesystem (200 with the
## buffer full, 1,000 at commands, 200 at bundles and 5 at their confirmation) and 100 in the VM, and
## every dying SD card in the VM: about half an hour on 2 cores
power-check-long:
	@$(MAKE) --no-print-directory power-check POWER_LOSSY_CUTS=2000 POWER_LOSSY_FULL_CUTS=200 POWER_VM_CUTS=100 POWER_COMMAND_CUTS=1000 \
		POWER_BUNDLE_CUTS=200 POWER_BUNDLE_CONFIRM_CUTS=5 POWER_SDCARD_VM=all

## cluster-check: the gateway as a process against three clustered nats-server nodes (Debian's, with
## JetStream, MQTT on each, the MQTT streams on all three) through toxiproxy, and a platform subscriber
## with a persistent session: a node killed, the stream leader killed, a node black-holed, a node's
## PUBACKs 200 ms late, the whole cluster down 30 s, then mixed; fails on any packet lost; one figures
## line per fault (docs/cluster.md), and checks of what a PUBACK means there; then 50 gateways with
## drf_cswlc while a node restarts (the short TestFleet, about a minute), failing when the busiest
## node takes over 1.5x its fair share steady, 1.35x with a node down (1.4x in any 5 s of it), the restarted
## node carries a sixth of the traffic over 2.5 s after its first CONNACK (target 2 s), 90% of the gateways
## take over 1.5 s to connect to it, its share swings over 0.4 once back, or reconnected gateways take
## over 2 s to give it a sixth of their traffic; then the same fleet on three independent mosquitto
## brokers, one restarted (TestFleetBrokers, 33 s), failing when the busiest broker takes over 1.3x
## its fair share steady or with one down (target 1.25x, held in cluster-check-fleet), or the restarted broker carries a sixth of the traffic over
## 2.5 s after its port accepts again (target 2 s). Needs nats-server and mosquitto.
## About 5 minutes on 2 cores.
CLUSTER_RUN ?= .
CLUSTER_TIMEOUT ?= 20m
cluster-check:
	@$(GO) test -count=1 -tags cluster -v -run '$(CLUSTER_RUN)' -timeout $(CLUSTER_TIMEOUT) ./tests/cluster/ > .cluster-check.log 2>&1; rc=$$?; \
	grep -E '^\s*(--- |ok|FAIL|PASS)' .cluster-check.log; \
	if [ $$rc -ne 0 ]; then tail -200 .cluster-check.log; echo '--- what the tests logged:'; grep -E '^\s+[a-z_]+_test\.go:[0-9]+:' .cluster-check.log | tail -80; fi; \
	grep -E '^cluster [a-z0-9_ -]+:' .cluster-check.log; exit $$rc

## cluster-check-long: make cluster-check with every fault held a minute, and the same gateway against a
## second engine, three rabbitmq-server 3.10 nodes with the MQTT plugin and quorum queues (TestRabbit: a
## node killed, the subscriber queue's leader killed, the whole cluster down, a minute each; fails on any
## packet lost; needs rabbitmq-server). About 20 minutes: RabbitMQ boots slowly, and 3.10's MQTT plugin
## holds a full restart's boot for minutes (docs/cluster.md)
cluster-check-long:
	@CLUSTER_LONG=1 CLUSTER_TIMEOUT=45m $(MAKE) --no-print-directory cluster-check

## cluster-check-puback: each node's PUBACK latency against the rate offered to it alone, the
## $MQTT_msgs leader apart from its followers (TestPuback; what the lab's S13 models; about a minute)
cluster-check-puback:
	@CLUSTER_PUBACK=1 CLUSTER_RUN='TestPuback' $(MAKE) --no-print-directory cluster-check

## cluster-check-fleet: 50 gateways (real agents in one test process, each with its own buffer and a
## connection to every node) at the demo farm's rate against the cluster, n1 restarted, for drf_cswlc,
## p2c_ewma and round_robin: reconnection spread, return of connections and traffic, loss, and a table
## of the busiest node's share and the traffic's return beside the lab's predictions (S13a; docs/cluster.md);
## the same three on independent mosquitto brokers (TestFleetBrokers, about 3.5 minutes);
## then the stream leader, and every node, at a budget of 140 publishes a second (TestLimit: PUBACK p99,
## store timeouts, connections and packets lost, beside the lab's S14), and the ramp to the most gateways
## the machine keeps up with and a node restarted at that size (TestScale). About 20 minutes on 2 cores.
cluster-check-fleet:
	@CLUSTER_FLEET=1 CLUSTER_TIMEOUT=45m CLUSTER_RUN='TestFleet|TestLimit|TestScale' $(MAKE) --no-print-directory cluster-check

## cluster-check-limit: TestLimit alone (about 6 minutes; CLUSTER_LIMIT_PER_S, CLUSTER_LIMIT_NODES=leader|all,
## CLUSTER_LIMIT_STRATEGIES, CLUSTER_LIMIT_HOLD=strategy to hold another one to the default's targets)
cluster-check-limit:
	@CLUSTER_LIMIT=1 CLUSTER_RUN='TestLimit' $(MAKE) --no-print-directory cluster-check

## cluster-check-scale: TestScale alone (CLUSTER_SCALE_STEPS=50,100,…, CLUSTER_SCALE_STRATEGY)
cluster-check-scale:
	@CLUSTER_SCALE=1 CLUSTER_RUN='TestScale' $(MAKE) --no-print-directory cluster-check

## lab-scale: the lab's fleets of 1,000 and 10,000 gateways (S15a, S15b) per strategy, a table of the
## busiest node's share and the restarted node's reconnection storm and return (a few minutes of CPU)
lab-scale:
	@log=$$(mktemp); LAB_SCALE=1 $(GO) test -count=1 -v -run 'TestScaleModel' -timeout 60m ./selector/lab/ > $$log 2>&1; rc=$$?; \
	grep -E '^(lab scale table:|--- |ok|FAIL|\s+scale_test)' $$log; rm -f $$log; exit $$rc
