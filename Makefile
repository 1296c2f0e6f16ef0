# The repository is a Go workspace (go.work): the library at the root, and modules of their own for
# the command (cmd/outbox), the NATS JetStream sink (jetstream), the peer benchmarks (bench), the
# OpenTelemetry trace context (otel), the Prometheus collectors (metrics) and the example engine and platform (examples, which read from
# a journal file or a JetStream stream), so that the library depends on neither NATS nor a peer, and
# neither the library nor the sink on OpenTelemetry or client_golang. ./... stays inside one module, so every target
# names each module. sqlc is pinned in tools/go.mod (a `tool` directive), outside the workspace, and
# run with `go tool`: no global install. sqlc is built without cgo: with it, its Postgres parser is
# libpg_query's C, compiled with the rest (about 210 CPU seconds of a cold build), and the project
# only uses the SQLite engine; without cgo that parser is libpg_query compiled to WebAssembly
# (wasilibs/go-pgquery), loaded only when a Postgres query is parsed, and generate, diff and vet
# give the same output byte for byte (docs/TESTING.md).
SQLC := cd tools && GOWORK=off CGO_ENABLED=0 go tool sqlc -f ../sqlc.yaml
MODULES := ./... ./cmd/outbox/... ./jetstream/... ./bench/... ./otel/... ./metrics/... ./examples/...
# MIN_GO is the go line of the library's go.mod: the oldest Go a user can build the modules with.
MIN_GO := $(shell sed -n 's/^go //p' go.mod)
# STEP says what a step does before it runs it, and that it still runs every 20 seconds: make test
# has no silent stretch, even while a cold build compiles for minutes without a word.
STEP := sh tools/step.sh

.PHONY: test test-race test-warm test-warm-builds vet-native vet-arch test-min-go test-old-nats fmt-check vet generate check-generated check-generated-sqlc check-license fix-license migrate bench fuzz reliability release-check check-sums

# Fuzzing is bounded by a count of inputs, not a duration: with a duration, Go 1.26's fuzzing
# coordinator can report its own deadline as a failure ("context deadline exceeded", no failing
# input; golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
# FuzzTheIndexAgreesWithTheLinesOfTheFile appends to a file for every input, about 500 a second.
INDEX_FUZZTIME ?= 10000x

## test: everything CI runs: formatting, vet, generated code, the licence lines, the tests under the
## race detector, the tests again with the oldest Go the go.mod files allow (the hundred-thousand-
## line tests among them, which the race detector makes about 15 times slower and so skips), and
## each benchmark once (-short, small prefills, in the packages that hold one) so that none of them
## rots. docs/TESTING.md holds what each step costs. While the race detector runs, test-warm
## builds, at the lowest priority, what later steps need (sqlc under CI, the oldest Go's build of
## the modules, the older nats-server, the benchmarks' test packages, the fuzzer's instrumented
## builds): the cores the tests leave idle do the builds the later steps would wait for. It only
## fills the build cache: each step runs in full after it and reports its own failures;
## check-generated comes after the race detector's step so that it finds its build made.
##
## The race detector's processes exit at once (GORACE=atexit_sleep_ms=0): by default each one
## sleeps a second at exit, for goroutines still running to race, and the tests start hundreds of
## processes (the command, children that play engines and consumers), which made most of the race
## step's wall time. A race any process had is still reported and still fails it (exit status 66).
## A GORACE of your own is kept, after this setting. make reliability keeps the default.
test: fmt-check vet-native vet-arch check-license
	@$(MAKE) --no-print-directory -j2 test-race test-warm
	@$(MAKE) --no-print-directory check-generated
	@$(MAKE) --no-print-directory test-min-go
	@$(MAKE) --no-print-directory test-old-nats
	@$(STEP) "test: each benchmark once (-short), in the packages that hold one: $(BENCH_PKGS)" \
		go test -short -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory release-check
	@$(MAKE) --no-print-directory check-sums
	@echo "make test: everything passed"

# BENCH_PKGS: the packages with a benchmark, found with git (every module but tools/, which is
# outside the workspace; all of $(MODULES) without git). make test runs each benchmark once there:
# in the others, -run '^$$' and no benchmark leave their test binary nothing to run (their tests
# run in the race step and test-min-go), but the step compiled and linked it all the same, without
# the race detector, for nothing (docs/TESTING.md has the figures).
BENCH_PKGS := $(or $(shell git grep -l '^func Benchmark' -- '*_test.go' ':!tools' 2>/dev/null | sed 's|^|./|; s|/[^/]*$$||' | sort -u),$(MODULES))

# The outbox package's tests take about 9 minutes under the race detector on 2 busy cores, near go
# test's default limit of 10 per package: a package that needs more is still reported, not killed.
#
# SQLite itself is compiled without the race detector's instrumentation (RACE_GCFLAGS): the driver
# runs SQLite's C translated to Go (ncruces/go-sqlite3-wasm, wasm2go: a 4.6 MB generated package,
# no goroutines, no atomics, no locks of its own), and instrumenting every load and store of its
# memory made each SQL statement several times slower (the migrations package's tests: 4.4 CPU
# seconds instrumented, 1.1 without). The race detector sees as much as it would of a cgo build of
# SQLite, whose C it never instruments: every Go package, the driver's included, stays instrumented.
RACE_GCFLAGS := -gcflags=github.com/ncruces/go-sqlite3-wasm/...=-race=false
test-race:
	@GORACE="atexit_sleep_ms=0 $$GORACE" $(STEP) "test: every module's tests under the race detector (each package prints ok as it ends)" \
		go test -race $(RACE_GCFLAGS) -count=1 -timeout 30m $(MODULES)

## test-warm: the builds of the steps after the race detector's, into the build cache, at the lowest
## priority (nice), their output dropped: a failure here shows again, in full, in its own step. The
## oldest Go's test binaries are built and linked, not run (-exec true); the benchmarks' test
## packages are compiled, not linked (go list -export -test); the fuzzer's instrumented build of
## each fuzzed package is made by one input of one of its targets (-fuzztime 1x).
test-warm:
	@$(STEP) "test-warm: building what the later steps need, beside the race detector, at the lowest priority" \
		$(MAKE) --no-print-directory test-warm-builds
	@echo "make: test-warm: the builds are done"

test-warm-builds:
	-@if [ "$$CI" = "true" ] || ! (cd tools && GOWORK=off go run ./gendigest .. >/dev/null 2>&1); then \
		cd tools && GOWORK=off CGO_ENABLED=0 nice -n 19 go tool -n sqlc >/dev/null 2>&1; fi
	-@GOTOOLCHAIN=go$(MIN_GO) GOWORK=off nice -n 19 go test -count=1 -exec true ./... >/dev/null 2>&1
	-@GOTOOLCHAIN=go$(MIN_GO) nice -n 19 go test -count=1 -exec true ./jetstream/... ./otel/... >/dev/null 2>&1
	-@GOTOOLCHAIN=go$(MIN_GO) nice -n 19 go build ./cmd/outbox/... ./bench/... ./examples/... >/dev/null 2>&1
	-@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && \
		GOWORK=off GOBIN="$$bin" nice -n 19 go install github.com/nats-io/nats-server/v2@$(OLD_NATS) >/dev/null 2>&1
	-@nice -n 19 go list -export -test -deps $(BENCH_PKGS) >/dev/null 2>&1
	-@for t in journal:FuzzParseSegmentIndex inbox:FuzzParseFilePosition; do \
		nice -n 19 go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime 1x "./$${t%%:*}/" >/dev/null 2>&1; done

## test-min-go: the go line is a claim, so CI builds and tests with that Go (go$(MIN_GO), fetched from
## the module proxy as golang.org/toolchain on first use) beside the current one. The library alone
## (GOWORK=off), as a user's build resolves it from its go.mod; the JetStream sink inside the
## workspace, which stands in for the library release it requires until the tag exists, and the
## OpenTelemetry and Prometheus modules' likewise; the command, the benchmarks and the examples built. Without
## -race, and without the -short skips (the sink's server clusters and its 82 MB stream): those run
## under the race detector with the current Go above. The library's pass, without the race
## detector, is also where make test runs the hundred-thousand-line tests (HundredThousand), which
## outboxtest.RaceEnabled skips under it. About a minute with a warm build cache; the
## first run downloads the toolchain and builds everything again with it (about 3 more minutes on 2
## shared cores, which make test's test-warm does while the race detector runs).
test-min-go:
	@GOTOOLCHAIN=go$(MIN_GO) GOWORK=off $(STEP) "test-min-go: the library's tests with go$(MIN_GO), the go line of go.mod" \
		go test -count=1 ./...
	@GOTOOLCHAIN=go$(MIN_GO) $(STEP) "test-min-go: the JetStream sink's tests with go$(MIN_GO), in the workspace" \
		go test -count=1 -short ./jetstream/...
	@GOTOOLCHAIN=go$(MIN_GO) $(STEP) "test-min-go: the OpenTelemetry module's tests with go$(MIN_GO), in the workspace" \
		go test -count=1 ./otel/...
	@GOTOOLCHAIN=go$(MIN_GO) $(STEP) "test-min-go: the Prometheus collectors' tests with go$(MIN_GO), in the workspace" \
		go test -count=1 ./metrics/...
	@GOTOOLCHAIN=go$(MIN_GO) $(STEP) "test-min-go: the command, the benchmarks and the examples built with go$(MIN_GO)" \
		go build ./cmd/outbox/... ./bench/... ./examples/...

## test-old-nats: the README says the JetStream sink works with servers before atomic publish (2.12),
## one line at a time. The tests embed the module's own nats-server, a current release, and an older
## one cannot share its module graph: this builds nats-server $(OLD_NATS) from the module proxy
## (go install, into a temporary directory; about two minutes the first time, from the build cache
## after) and runs the sink, the relay and the stream source against it as a process.
OLD_NATS ?= v2.11.17
test-old-nats:
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && \
	GOWORK=off GOBIN="$$bin" $(STEP) "test-old-nats: nats-server $(OLD_NATS) built from the module proxy" \
		go install github.com/nats-io/nats-server/v2@$(OLD_NATS) && \
	OUTBOX_OLDER_NATS_SERVER="$$bin/nats-server" $(STEP) "test-old-nats: the sink, a relay and the stream source against nats-server $(OLD_NATS)" \
		go test -count=1 -run 'OlderServer' -v ./jetstream/

## fuzz: every fuzz target for FUZZTIME inputs: 10,000 in make test, a few seconds each once its
## package is built with the fuzzer's instrumentation (a full build of its dependencies, cached
## after the first run); make reliability runs 1,000,000, about 2 minutes each. The fuzzer
## instruments every package of the fuzzed test binary, so a pure function fuzzed on its own lives
## in a leaf package with its target (cmd/outbox/internal/termsafe, jetstream/internal/token): in
## the command's or the sink's package, fuzzing it built an instrumented copy of their whole graph,
## the NATS server and the Prometheus client among it (about 110 CPU seconds, docs/TESTING.md).
fuzz:
	@$(STEP) "fuzz: FuzzVerify" go test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzParseLine" go test -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzLineTraceContext" go test -run '^$$' -fuzz '^FuzzLineTraceContext$$' -fuzztime $(FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzTerminalSafeText" go test -run '^$$' -fuzz '^FuzzTerminalSafeText$$' -fuzztime $(FUZZTIME) ./cmd/outbox/internal/termsafe/
	@$(STEP) "fuzz: FuzzToken" go test -run '^$$' -fuzz '^FuzzToken$$' -fuzztime $(FUZZTIME) ./jetstream/internal/token/
	@$(STEP) "fuzz: FuzzOpenFile" go test -run '^$$' -fuzz '^FuzzOpenFile$$' -fuzztime $(FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzParseSegmentIndex" go test -run '^$$' -fuzz '^FuzzParseSegmentIndex$$' -fuzztime $(FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzTheIndexAgreesWithTheLinesOfTheFile" go test -run '^$$' -fuzz '^FuzzTheIndexAgreesWithTheLinesOfTheFile$$' -fuzztime $(INDEX_FUZZTIME) ./journal/
	@$(STEP) "fuzz: FuzzApply" go test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./inbox/
	@$(STEP) "fuzz: FuzzParseFilePosition" go test -run '^$$' -fuzz '^FuzzParseFilePosition$$' -fuzztime $(FUZZTIME) ./inbox/

## reliability: the long form of the fault campaigns: many crash seeds, longer fuzzing, and three
## minutes of the soak (a year of journal in miniature; docs/RELIABILITY.md says what it checks).
reliability:
	OUTBOX_CRASH_SEEDS=25 go test -race -count=1 -run 'Crash|ServerProcesses|KilledTogether' -v ./tests/ ./jetstream/
	OUTBOX_CRASH_SEEDS=25 go test -race -count=1 -run 'EveryStepOfALongLifeKilled' -v ./tests/
	OUTBOX_TRIM_SEEDS=10 go test -race -count=1 -run 'TrimmedClusterWhoseTrimmerAndReadersAreKilled' -timeout 30m -v ./jetstream/
	go test -race -count=1 -run 'IOErrors|TornTail|PowerLoss' -v ./journal/
	OUTBOX_VERIFY_HUGE=1 OUTBOX_VERIFY_RUNS=1000000 go test -count=1 -run 'Over2GiB|SmallConstantPerRun' -v ./journal/
	go test -race -count=1 -run 'PowerLossOfTheDatabase|SQLiteIOError' -v ./tests/
	OUTBOX_MODEL_STEPS=3000 go test -count=5 -run 'RandomOperations' -v ./tests/
	OUTBOX_LOAD_SECONDS=60 go test -count=1 -run 'SustainedLoad' -v ./tests/
	OUTBOX_SOAK_SECONDS=180 go test -count=1 -timeout 20m -run 'AYearInMiniature' -v ./tests/
	OUTBOX_HEAVY=1 go test -count=1 -run 'LargestLimit|WALShrinks' -v ./outbox/
	OUTBOX_HEAVY=1 go test -race -count=1 -run 'LongLineAnywhere' -v ./journal/
	OUTBOX_RELAY_MEMORY_LINES=200 go test -count=1 -run 'RelayMemory' -v ./outbox/
	OUTBOX_RELAY_CLOSE_ROUNDS=300 go test -race -count=1 -run 'CloseAtAnyMoment' -v ./outbox/
	OUTBOX_INBOX_FILE_LINES=1000000 go test -count=1 -run 'ApplyFileKeepsABoundedHeap' -v ./inbox/
	$(MAKE) fuzz FUZZTIME=1000000x INDEX_FUZZTIME=200000x

fmt-check:
	@echo "make: fmt-check: gofmt -l"
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## vet: go vet of every module for this machine's GOOS and GOARCH, and for arm64 only the
## packages that hold a file chosen by processor (assembly, a _amd64.go or _arm64.go name, a
## //go:build line naming a GOARCH or purego). Today none does: the journal's arm64 vet was made
## for its SSE2 assembly and the Go fallback beside it, and once they were gone it read the same
## files as this one, with the same sizes of int and pointer, for 77 CPU seconds of building the
## standard library for arm64 (docs/TESTING.md). vet-arch finds such files with git, so that one
## added later is vetted for arm64 again without anyone remembering to.
ARCH_FILES := git ls-files | grep -E '\.s$$|_(386|amd64|arm|arm64|loong64|mips|mipsle|mips64|mips64le|ppc64|ppc64le|riscv64|s390x|wasm)(_test)?\.go$$'; \
	git grep -lE '^//go:build.*\b(386|amd64|arm|arm64|loong64|mips|mipsle|mips64|mips64le|ppc64|ppc64le|riscv64|s390x|wasm|purego)\b' -- '*.go'
vet: vet-native vet-arch

vet-arch:
	@dirs=$$({ $(ARCH_FILES); } | sed 's|^|./|; s|/[^/]*$$||' | sort -u); \
	if [ -z "$$dirs" ]; then echo "make: vet: no file is chosen by processor (assembly, GOARCH names or build lines): no vet for arm64"; \
	else GOARCH=arm64 $(STEP) "vet: for arm64, the packages with files chosen by processor: $$(echo $$dirs)" go vet $$dirs; fi

vet-native:
	@$(STEP) "vet: go vet of every module (builds every dependency on first use)" go vet $(MODULES)

## generate: regenerate db/ and inbox/internal/db/ from queries/, migrations/ and their inbox/ counterparts with
## the pinned sqlc, and record what they were generated from in db/.inputs.sha256 (commit it).
generate:
	@$(STEP) "generate: sqlc generate (builds the pinned sqlc on first use, about two minutes)" sh -c '$(SQLC) generate'
	cd tools && GOWORK=off go run ./gendigest -write ..

## check-generated: fail when db/ (or another output directory of sqlc.yaml) is not what sqlc
## generates or holds a file it does not generate, then lint the queries. Building sqlc is the
## longest step of a cold make test, so it is skipped when sqlc's inputs and outputs are those that
## make generate recorded in db/.inputs.sha256 (tools/gendigest); CI (CI=true) always runs it, and
## then also fails when the record is stale.
check-generated:
	@$(STEP) "check-generated: the record's own tests" sh -c 'cd tools && GOWORK=off go test -count=1 ./gendigest'
	@if [ "$$CI" != "true" ] && (cd tools && GOWORK=off go run ./gendigest ..); then \
		echo "make: check-generated: sqlc's inputs and outputs are those db/.inputs.sha256 records: sqlc not run (CI=true runs it)"; \
	else \
		$(MAKE) --no-print-directory check-generated-sqlc; \
	fi

check-generated-sqlc:
	@$(STEP) "check-generated: sqlc diff (builds the pinned sqlc on first use, about two minutes)" sh -c '$(SQLC) diff'
	@$(STEP) "check-generated: no stray file where sqlc generates" sh -c 'cd tools && GOWORK=off go run ./checkgenerated ..'
	@$(STEP) "check-generated: sqlc vet" sh -c '$(SQLC) vet'
	@if [ "$$CI" = "true" ]; then \
		(cd tools && GOWORK=off go run ./gendigest ..) || { echo "db/.inputs.sha256 is stale: run make generate and commit it"; exit 1; }; \
	fi

## check-license: fail when a module has no LICENSE identical to the root's, or a hand-written .go,
## .s or .h file does not open with the SPDX line (generated files are left to their generator);
## the checker's own tests first. fix-license adds what is missing.
check-license:
	@$(STEP) "check-license: the checker's tests" sh -c 'cd tools && GOWORK=off go test -count=1 ./checklicense'
	@$(STEP) "check-license: the SPDX line and the LICENSE copies" sh -c 'cd tools && GOWORK=off go run ./checklicense ..'

fix-license:
	cd tools && GOWORK=off go run ./checklicense -fix ..

## release-check: the modules as a user installs and fetches them, at the version they require of each
## other, from a module proxy in a temporary directory, offline (see README.md, Releases).
release-check:
	@$(STEP) "release-check: the modules as a user fetches them, from a local module proxy" sh -c 'cd tools && GOWORK=off go run ./releasecheck ..'

## check-sums: fail when the go.mod, go.sum and go.work.sum files differ from the commit, after
## `go list -m all` has computed the sums of the whole module graph: make test runs it last.
check-sums:
	@$(STEP) "check-sums: go.mod, go.sum and go.work.sum as committed" sh -c 'go list -m all >/dev/null'
	@out=$$(git status --porcelain -- go.work go.work.sum ':(glob)**/go.mod' ':(glob)**/go.sum') || exit 1; \
	if [ -n "$$out" ]; then echo "go.mod, go.sum or go.work.sum changed (commit what the go command computed):"; \
	echo "$$out"; git --no-pager diff -- go.work go.work.sum ':(glob)**/go.mod' ':(glob)**/go.sum'; exit 1; fi

## migrate DB=path: apply the migrations to a database file.
migrate:
	@test -n "$(DB)" || { echo "usage: make migrate DB=path/to/book.db"; exit 2; }
	go run ./cmd/outbox migrate up --db "$(DB)"

## bench: the benchmarks, each beside its baseline (see docs/BENCHMARKS.md).
bench:
	go test -run '^$$' -bench . -benchtime 2s -count 3 ./... ./bench/...
	go test -run '^$$' -bench . -benchtime 5x -count 3 ./jetstream/...
