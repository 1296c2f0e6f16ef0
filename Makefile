# sqlc is pinned in tools/go.mod (a `tool` directive) and run with `go tool`: no global install.
# bench/ (the peer) and jetstream/ (the NATS sink) are modules of their own, tested from here too.
SQLC := cd tools && go tool sqlc -f ../sqlc.yaml

.PHONY: test fmt-check vet generate check-generated migrate bench

## test: everything CI runs: formatting, vet, generated code, and the tests under the race detector.
test: fmt-check vet check-generated
	go test -race -count=1 ./...
	go test -short -run '^$$' -bench . -benchtime 1x ./...
	cd bench && go vet ./... && go test -short -run '^$$' -bench . -benchtime 1x ./...
	cd jetstream && go vet ./... && go test -race -count=1 ./...

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	go vet ./...

## generate: regenerate db/ from queries/ and migrations/ with the pinned sqlc.
generate:
	$(SQLC) generate

## check-generated: fail when db/ is not what sqlc generates, then lint the queries.
check-generated:
	$(SQLC) diff
	$(SQLC) vet

## migrate DB=path: apply the migrations to a database file.
migrate:
	@test -n "$(DB)" || { echo "usage: make migrate DB=path/to/book.db"; exit 2; }
	go run ./cmd/outbox migrate up --db "$(DB)"

## bench: the benchmarks, each beside its baseline (see docs/BENCHMARKS.md); bench/ holds the peer.
bench:
	go test -run '^$$' -bench . -benchtime 2s -count 3 ./...
	cd bench && go test -run '^$$' -bench . -benchtime 2s -count 3 ./...
	cd jetstream && go test -run '^$$' -bench . -benchtime 20x -count 4 ./...
