# prod-write: the two commands are `make demo` and `make test`.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 3s
BIN         := bin/prod-write

.PHONY: build test demo bench fuzz lint man clean mutants

# Static binaries (no cgo): they start in a third of the time of dynamically
# linked ones, and run's latency is mostly start-up (docs/PERFORMANCE.md).
# prod-write-net, beside prod-write, serves the commands of a deployment on
# DynamoDB and S3 (docs/adr/0009-aws-binary.md, docs/adr/0010-network-binary.md).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o bin/ ./cmd/prod-write ./cmd/prod-write-net

## test: lint, check that every listed mutant still applies (`make mutants`
## runs them), install and start what the tests need (dynalite, versitygw,
## ajv), every test (race detector on), and a short run of every fuzz target.
test: lint
	$(GO) run ./cmd/prod-write-mutants -check
	./scripts/test-deps.sh
	PROD_WRITE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./...
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## demo: plan → file → approve → run → replay in a temporary directory.
demo: build
	./scripts/demo.sh $(BIN)

## bench: the performance goals of SPEC §15, as ratios measured in one run.
bench: build
	./scripts/bench.sh $(BIN)

## fuzz: a longer run of every fuzz target.
fuzz:
	FUZZTIME=$${FUZZTIME:-60s} ./scripts/fuzz.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## man: man pages: section 1 from the command tree, prod-write.toml(5) from
## docs/CONFIG.md (a test checks that the generation keeps every key).
man:
	$(GO) run ./cmd/prod-write-docs man docs/man

clean:
	rm -rf bin

## mutants: turn each security-critical defence of testdata/mutants/*.toml
## off in a scratch copy and check that its tests fail (issue 23).
mutants:
	./scripts/test-deps.sh
	PROD_WRITE_REQUIRE_SERVERS=1 $(GO) run ./cmd/prod-write-mutants $(MUTANTS)
