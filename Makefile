# prod-write: the two commands are `make demo` and `make test`.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 3s
# go test's own default of 10 minutes a package is close to what the
# testscripts' package took under the race detector on a slow 2-core VM
# (540 s on 2026-12-05, when testscript's deadline killed a command; 190-290 s
# since its commands stopped sleeping at exit): the limit is a hang
# detector, not a goal, so it has room.
TESTTIMEOUT ?= 30m
BIN         := bin/prod-write

PREFIX      ?= /usr/local
DESTDIR     ?=
# Where the service's unit files go: under PREFIX, like everything else, so
# that an install under a PREFIX or DESTDIR writes nothing outside it. systemd
# looks there for the two usual prefixes: its system unit search path
# (systemd.unit(5), "System Unit Search Path"; `systemd-analyze unit-paths`)
# holds /usr/local/lib/systemd/system, "system units installed by the
# administrator", and /usr/lib/systemd/system, the distribution's. Under any
# other PREFIX (/opt/prod-write) systemd does not look: `systemctl link` the
# two files, or give UNITDIR=/etc/systemd/system (docs/DEPLOYMENT.md).
UNITDIR     ?= $(PREFIX)/lib/systemd/system

.PHONY: build test test-stress demo bench fuzz lint man clean mutants install screenshots

# Static binaries (no cgo): they start in a third of the time of dynamically
# linked ones, and run's latency is mostly start-up (docs/PERFORMANCE.md).
# prod-write is a small program that makes a run through the runner service
# and hands every other command to prod-write-cli, the command tree
# (docs/adr/0057-a-small-run-client.md); prod-write-net, beside them, serves
# the commands of a deployment on DynamoDB and S3 (docs/adr/0009-aws-binary.md,
# docs/adr/0010-network-binary.md).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o bin/ ./cmd/prod-write ./cmd/prod-write-cli ./cmd/prod-write-net

## test: lint, check that every listed mutant still applies (`make mutants`
## runs them), install and start what the tests need (dynalite, versitygw,
## ajv), every test (race detector on), and a short run of every fuzz target.
test: lint
	$(GO) run ./cmd/prod-write-mutants -check
	./scripts/test-deps.sh
	PROD_WRITE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -timeout $(TESTTIMEOUT) ./...
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## test-stress: the test suite with two CPU-burning processes beside it, as
## on a loaded CI machine: a test that waits for a fixed time
## rather than for its event fails here first.
test-stress:
	./scripts/test-stress.sh

## install: the three binaries, their man pages, shell completions and the
## service's unit files (in UNITDIR), under DESTDIR/PREFIX and nowhere else
## (root-owned, never setuid; docs/DEPLOYMENT.md).
install: build man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d $(DESTDIR)$(UNITDIR)
	install -m 0755 bin/prod-write bin/prod-write-cli bin/prod-write-net $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 docs/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 docs/man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	bin/prod-write completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/prod-write
	bin/prod-write completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_prod-write
	bin/prod-write completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/prod-write.fish
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' packaging/systemd/prod-write.service > $(DESTDIR)$(UNITDIR)/prod-write.service
	install -m 0644 packaging/systemd/prod-write.socket $(DESTDIR)$(UNITDIR)/prod-write.socket
	chmod 0644 $(DESTDIR)$(UNITDIR)/prod-write.service

## demo: plan → file → approve → run → replay in a temporary directory.
demo: build
	./scripts/demo.sh $(BIN)

## bench: the performance goals of docs/DESIGN.md §15, as ratios measured in one run.
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

## man: man pages: section 1 from the command tree (prod-write(1)'s EXIT
## STATUS, ENVIRONMENT and FILES from the code), prod-write.toml(5) from
## docs/CONFIG.md (a test checks that the generation keeps every key). Built
## with VCS stamping, as `build` is, so that the pages name the revision:
## built, not `go run`, which stamps no VCS information whatever -buildvcs
## says, so the pages said "(devel)".
man:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o bin/ ./cmd/prod-write-docs
	bin/prod-write-docs man docs/man

clean:
	rm -rf bin

## screenshots: the approval page at phone and desktop width, as the
## browser test sees it, into bin/screenshots (not committed).
screenshots:
	mkdir -p bin/screenshots
	PROD_WRITE_REQUIRE_SERVERS=1 PROD_WRITE_SCREENSHOTS=$(CURDIR)/bin/screenshots $(GO) test -count=1 -run '^TestApprovalPageInChromium$$' ./pkg/cli

## mutants: turn each security-critical defence of testdata/mutants/*.toml
## off in a scratch copy and check that its tests fail.
mutants:
	./scripts/test-deps.sh
	PROD_WRITE_REQUIRE_SERVERS=1 $(GO) run ./cmd/prod-write-mutants $(MUTANTS)
