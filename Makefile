# The repository is a Go workspace (go.work): the library at the root, and modules of their own for
# the command (cmd/outbox), the NATS JetStream sink (jetstream), the peer benchmarks (bench) and the
# OpenTelemetry trace context (otel), so that the library depends on neither NATS nor a peer, and
# neither the library nor the sink on OpenTelemetry. ./... stays inside one module, so every target
# names each module. sqlc is pinned in tools/go.mod (a `tool` directive), outside the workspace, and
# run with `go tool`: no global install.
SQLC := cd tools && GOWORK=off go tool sqlc -f ../sqlc.yaml
MODULES := ./... ./cmd/outbox/... ./jetstream/... ./bench/... ./otel/...
# MIN_GO is the go line of the library's go.mod: the oldest Go a user can build the modules with.
MIN_GO := $(shell sed -n 's/^go //p' go.mod)

.PHONY: test test-min-go fmt-check vet generate check-generated check-license fix-license migrate bench fuzz reliability release-check check-sums

# Fuzzing is bounded by a count of inputs, not a duration: with a duration, Go 1.26's fuzzing
# coordinator can report its own deadline as a failure ("context deadline exceeded", no failing
# input; golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
# FuzzTheIndexAgreesWithTheLinesOfTheFile appends to a file for every input, about 500 a second.
INDEX_FUZZTIME ?= 10000x

## test: everything CI runs: formatting, vet, generated code, the licence lines, the tests under the
## race detector, the journal's tests again without its assembly (-tags purego, what other
## processors run), the tests again with the oldest Go the go.mod files allow, and each benchmark
## once (-short, small prefills) so that none of them rots.
test: fmt-check vet check-generated check-license
	go test -race -count=1 $(MODULES)
	go test -count=1 -run 'HundredThousand' ./outbox/ ./inbox/
	go test -count=1 -tags purego ./journal/
	$(MAKE) test-min-go
	go test -short -run '^$$' -bench . -benchtime 1x $(MODULES)
	$(MAKE) fuzz
	$(MAKE) release-check
	$(MAKE) check-sums

## test-min-go: the go line is a claim, so CI builds and tests with that Go (go$(MIN_GO), fetched from
## the module proxy as golang.org/toolchain on first use) beside the current one. The library alone
## (GOWORK=off), as a user's build resolves it from its go.mod; the JetStream sink inside the
## workspace, which stands in for the library release it requires until the tag exists, and the
## OpenTelemetry module's likewise; the command and the benchmarks built. Without -race, and
## without the -short skips (the sink's server clusters and its 82 MB stream): those run under the
## race detector with the current Go above. About a minute with a warm build cache; the first run
## downloads the toolchain and builds everything again with it (about 3 more minutes on 2 shared
## cores).
test-min-go:
	@echo "test-min-go: the library's tests with go$(MIN_GO), the go line of go.mod"
	GOTOOLCHAIN=go$(MIN_GO) GOWORK=off go test -count=1 ./...
	@echo "test-min-go: the JetStream sink's tests with go$(MIN_GO), in the workspace"
	GOTOOLCHAIN=go$(MIN_GO) go test -count=1 -short ./jetstream/...
	@echo "test-min-go: the OpenTelemetry module's tests with go$(MIN_GO), in the workspace"
	GOTOOLCHAIN=go$(MIN_GO) go test -count=1 ./otel/...
	@echo "test-min-go: the command and the benchmarks built with go$(MIN_GO)"
	GOTOOLCHAIN=go$(MIN_GO) go build ./cmd/outbox/... ./bench/...

## fuzz: every fuzz target for FUZZTIME inputs: 10,000 in make test, a few seconds each once its
## package is built with the fuzzer's instrumentation (a full build of its dependencies, cached
## after the first run); make reliability runs 1,000,000, about 2 minutes each.
fuzz:
	go test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzParseShaped$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzMatchSteps$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzLineTraceContext$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzTerminalSafeText$$' -fuzztime $(FUZZTIME) ./cmd/outbox/
	go test -run '^$$' -fuzz '^FuzzToken$$' -fuzztime $(FUZZTIME) ./jetstream/
	go test -run '^$$' -fuzz '^FuzzOpenFile$$' -fuzztime $(FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzTheIndexAgreesWithTheLinesOfTheFile$$' -fuzztime $(INDEX_FUZZTIME) ./journal/
	go test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./inbox/
	go test -run '^$$' -fuzz '^FuzzParseFilePosition$$' -fuzztime $(FUZZTIME) ./inbox/

## reliability: the long form of the fault campaigns: many crash seeds, longer fuzzing.
reliability:
	OUTBOX_CRASH_SEEDS=25 go test -race -count=1 -run 'Crash|ServerProcesses|KilledTogether' -v ./tests/ ./jetstream/
	go test -race -count=1 -run 'IOErrors|TornTail|PowerLoss' -v ./journal/
	OUTBOX_VERIFY_HUGE=1 OUTBOX_VERIFY_RUNS=1000000 go test -count=1 -run 'Over2GiB|SmallConstantPerRun' -v ./journal/
	go test -race -count=1 -run 'PowerLossOfTheDatabase|SQLiteIOError' -v ./tests/
	OUTBOX_MODEL_STEPS=3000 go test -count=5 -run 'RandomOperations' -v ./tests/
	OUTBOX_LOAD_SECONDS=60 go test -count=1 -run 'SustainedLoad' -v ./tests/
	OUTBOX_HEAVY=1 go test -count=1 -run 'LargestLimit|WALShrinks' -v ./outbox/
	OUTBOX_HEAVY=1 go test -race -count=1 -run 'LongLineAnywhere' -v ./journal/
	OUTBOX_RELAY_MEMORY_LINES=200 go test -count=1 -run 'RelayMemory' -v ./outbox/
	OUTBOX_RELAY_CLOSE_ROUNDS=300 go test -race -count=1 -run 'CloseAtAnyMoment' -v ./outbox/
	OUTBOX_INBOX_FILE_LINES=1000000 go test -count=1 -run 'ApplyFileKeepsABoundedHeap' -v ./inbox/
	$(MAKE) fuzz FUZZTIME=1000000x INDEX_FUZZTIME=200000x

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	go vet $(MODULES)
	go vet -tags purego ./journal/
	GOARCH=arm64 go vet ./journal/

## generate: regenerate db/ from queries/ and migrations/ with the pinned sqlc.
generate:
	$(SQLC) generate

## check-generated: fail when db/ (or another output directory of sqlc.yaml) is not what sqlc
## generates or holds a file it does not generate, then lint the queries.
check-generated:
	$(SQLC) diff
	cd tools && GOWORK=off go run ./checkgenerated ..
	$(SQLC) vet

## check-license: fail when a module has no LICENSE identical to the root's, or a hand-written .go,
## .s or .h file does not open with the SPDX line (generated files are left to their generator);
## the checker's own tests first. fix-license adds what is missing.
check-license:
	cd tools && GOWORK=off go test -count=1 ./checklicense
	cd tools && GOWORK=off go run ./checklicense ..

fix-license:
	cd tools && GOWORK=off go run ./checklicense -fix ..

## release-check: the modules as a user installs and fetches them, at the version they require of each
## other, from a module proxy in a temporary directory, offline (see README.md, Releases).
release-check:
	cd tools && GOWORK=off go run ./releasecheck ..

## check-sums: fail when the go.mod, go.sum and go.work.sum files differ from the commit, after
## `go list -m all` has computed the sums of the whole module graph: make test runs it last.
check-sums:
	go list -m all >/dev/null
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
