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

## lint: gofmt and go vet
lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd contrib/grpclimit && $(GO) vet ./...
	cd examples/telemetry && $(GO) vet ./...
	cd benchmarks && $(GO) vet ./...
	cd serve && $(GO) vet ./...
	cd serve/compare && $(GO) vet ./...

## sim: the worked example of `sluice sim`
sim:
	$(GO) run ./cmd/sluice sim
