# sluice's everyday targets. `make test` is the README's test command and
# what .ci/run runs.

GO ?= go
# Benchmark repetitions; compare runs with benchstat (see docs/benchmarks.md).
COUNT ?= 6

.PHONY: test bench bench-compare fuzz lint sim

## test: every test of every package, with the race detector, in random order.
## policy's fault tests time real outages against deadlines of a few
## milliseconds, so they run alone, after the other packages. memstore's key
## flood runs once more without the race detector, whose shadow memory would
## count in the RSS it bounds (R-22).
test:
	$(GO) test -race -shuffle=on $$($(GO) list ./... | grep -v '/policy$$')
	$(GO) test -count=1 -run '^TestKeyFlood$$' ./stores/memstore
	$(GO) test -race -shuffle=on ./policy
	cd contrib/grpclimit && $(GO) test -race -shuffle=on ./...
	cd examples/telemetry && $(GO) test -race -shuffle=on ./...
	cd benchmarks && $(GO) test -race -shuffle=on -short ./...
	cd serve && $(GO) test -race -shuffle=on ./...
	cd serve/compare && $(GO) test -race -shuffle=on ./...

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
