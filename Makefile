# canopy's build. `make demo` runs the main job, `make test` runs every test
# (installing Open MPI when missing), `make bench` runs the benchmarks.
# CANOPY_MPI_PKG=mpich builds the MPI binding against MPICH (pkg-config mpich).
SHELL   := /bin/bash
GO      ?= go
BIN     := bin/canopy
MPIRUN  := scripts/mpirun.sh
CANOPY_MPI_PKG ?= mpi
TAGS    := $(if $(filter mpich,$(CANOPY_MPI_PKG)),mpich,)
export CANOPY_MPI_PKG

.PHONY: all deps build demo test test-unit test-mpi check-fmt bench testdata check-mpich clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(GO) build -tags '$(TAGS)' -o $(BIN) .

demo: build
	$(MPIRUN) -np 2 $(BIN) eval --csv testdata/sets/multi/truth.csv \
		--predictions testdata/sets/multi/predictions.csv --out canopy-out --force

test: deps check-fmt test-unit test-mpi

check-fmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet -tags '$(TAGS)' ./...

# Unit tests, including the end-to-end mpirun tests of package main.
test-unit:
	$(GO) test -tags '$(TAGS)' -count=1 -timeout 600s ./...

# The MPI conformance suite against the real binding on 1..4 ranks (the
# in-process implementation runs the same suite in test-unit).
test-mpi:
	$(GO) test -tags '$(TAGS)' -c -o bin/cmpi.test ./mpi/cmpi
	for n in 1 2 3 4; do echo "conformance: mpirun -np $$n"; \
		$(MPIRUN) -np $$n bin/cmpi.test -test.count=1 || exit 1; done

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./metrics/ ./internal/... | tee bin/bench.txt

testdata:
	$(GO) run ./internal/synth -out testdata/sets

# Compile the binding against MPICH 4 (CI): installs libmpich-dev, vets the
# binding with the mpich tag, and restores Open MPI as the default.
check-mpich:
	scripts/check-mpich.sh

clean:
	rm -rf bin canopy-out
