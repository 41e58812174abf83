# sluice's everyday targets. `make test` is the README's test command and
# what .ci/run runs.

GO ?= go
# Benchmark repetitions; compare runs with benchstat (see docs/benchmarks.md).
COUNT ?= 6

.PHONY: test bench bench-compare fuzz lint sim

## test: every test of every module, with the race detector, in random
## order; every module runs even when one fails, and one summary of what
## passed, failed and was skipped ends it (see .ci/test for the runs).
test:
	GO=$(GO) ./.ci/test

## bench: every benchmark, COUNT times, into bench.txt
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=$(COUNT) ./... | tee bench.txt

## bench-compare: sluice against redis_rate, throttled, ulule/limiter,
## sethvargo/go-limiter and x/time/rate on one real Redis, then
## docs/benchmarks.md's tables and charts rewritten (ROUNDS, BENCHTIME)
bench-compare:
	./benchmarks/run

## fuzz: every fuzz target for FUZZTIME (60s) each, one after another;
## the long run of R-21 for a nightly job (make test runs the seeds only)
fuzz:
	./.ci/fuzz

# Every module of the repository: the root and the nested ones.
MODULES = . contrib/grpclimit examples/telemetry benchmarks serve serve/compare stores/pgstore stores/mysqlstore
# staticcheck, built by `go run` from the module proxy at this version (and
# cached by the go command), so that a fresh machine needs nothing
# installed; set STATICCHECK to a binary of your own to skip the build.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, then go vet and staticcheck in every module
lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@for m in $(MODULES); do \
		echo "== $$m: go vet, staticcheck"; \
		(cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; \
	done

## sim: the worked example of `sluice sim`
sim:
	$(GO) run ./cmd/sluice sim
