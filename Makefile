# tickflow: build, test, lint and fuzz. `make` alone builds.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

GO       ?= go
GOFMT    ?= gofmt
# The static analyser make lint runs, pinned; `go run` fetches it through the module proxy.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The unchecked-error analyser make lint runs, pinned; .errcheck-excludes
# lists, with reasons, the calls whose errors may go unread.
ERRCHECK ?= $(GO) run github.com/kisielk/errcheck@v1.30.0
# How long each fuzz target runs under `make fuzz`.
FUZZTIME ?= 10s
# Extra arguments for `make run` and `make bench`, e.g. make run ARGS='-domain payments'.
ARGS     ?=

.PHONY: build test chromium lint fuzz run bench bench-deps chaos natscli clean

# build compiles everything and puts one binary per cmd/* into bin/.
build:
	$(GO) build ./...
	$(GO) build -o bin/ ./cmd/...

# test first makes sure a Chromium is there for the dashboard's browser test:
# Debian's chromium, installed quietly where it is missing and apt-get can
# (root, network); otherwise that one test skips and says why.
test: chromium
	$(GO) test -race -count=1 -timeout 20m ./...

chromium:
	@[ -n "$${CHROME:-}" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		command -v google-chrome >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; } || \
		echo "chromium is not installed (and could not be): the dashboard's browser test will skip"

# lint fails on vet, staticcheck (its default checks: bugs, deprecated APIs,
# simplifications that change no behaviour) and errcheck findings, on every
# file gofmt would change and on any committed executable (build outputs
# belong in bin/, which is ignored).
lint:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd bench/river && $(GO) vet ./...
	$(STATICCHECK) ./...
	$(ERRCHECK) -exclude .errcheck-excludes ./...
	@bins=$$(git ls-files | while IFS= read -r f; do \
		[ -f "$$f" ] && [ "$$(head -c 4 "$$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$$f"; \
		done; true); \
	if [ -n "$$bins" ]; then \
		echo "committed executables (remove them; build outputs go to bin/):"; \
		echo "$$bins"; \
		exit 1; \
	fi
	@files=$$($(GOFMT) -l .); \
	if [ -n "$$files" ]; then \
		echo "gofmt would change these files (run gofmt -w on them):"; \
		echo "$$files"; \
		exit 1; \
	fi

# fuzz runs every fuzz target of every package for FUZZTIME. `go test -list`
# prints each package's targets followed by its "ok <package>" line.
fuzz:
	@targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { names = names " " $$1; next } /^ok/ { n = split(names, t, " "); for (i = 1; i <= n; i++) print $$2 "=" t[i]; names = "" }'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets found"; exit 0; fi; \
	for t in $$targets; do \
		pkg=$${t%=*}; name=$${t#*=}; \
		echo "== $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done

# run starts the whole system in one process around an embedded nats-server.
# It builds bin/run and execs it rather than `go run`, which exits 1 after
# any interrupt whatever its program's exit status: Ctrl-C stops run cleanly
# and make exits 0.
run:
	$(GO) build -o bin/run ./cmd/run
	exec bin/run $(ARGS)

# bench measures tickflow against raw JetStream, asynq and River on this
# machine (a full run takes about 13 minutes; ARGS=-quick about 3) and
# rewrites docs/benchmarks.md. asynq needs redis-server and River
# PostgreSQL (Debian's packages), installed here if missing, with sudo when
# not root.
bench: bench-deps
	cd bench && $(GO) run . $(ARGS)

bench-deps:
	@sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	missing=; \
	[ -x /usr/bin/redis-server ] || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	fi

# chaos builds the commands and runs the chaos suite (chaos/): each scenario
# runs the system as separate processes, kills and restarts them, then
# checks every batch; a table per scenario, then "chaos: N passed, M failed"
# (about 6 minutes; ARGS='-list' names the scenarios, e.g.
# ARGS='-scenarios kill-workers,server-restart -reps 3 -seed 42').
chaos:
	$(GO) run ./chaos/cmd/chaos $(ARGS)

# natscli installs the nats command-line tool into $(go env GOPATH)/bin.
natscli:
	$(GO) install github.com/nats-io/natscli/nats@v0.5.0

clean:
	rm -rf bin
