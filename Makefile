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
# MPI through its pkg-config module; where MPI ships none (some modules,
# vendor MPIs) but an MPI compiler wrapper is on PATH, through that
# wrapper's flags (-tags mpicc; scripts/mpicc-flags.sh).
comma   := ,
MPI_VIA := $(shell pkg-config --exists $(CANOPY_MPI_PKG) 2>/dev/null || { command -v $${MPICC:-mpicc} >/dev/null 2>&1 && echo mpicc; })
ifeq ($(MPI_VIA),mpicc)
TAGS    := $(if $(TAGS),$(TAGS)$(comma))mpicc
export CGO_CFLAGS  := $(or $(CGO_CFLAGS),-O2 -g) $(shell scripts/mpicc-flags.sh cflags)
export CGO_LDFLAGS := $(or $(CGO_LDFLAGS),-O2 -g) $(shell scripts/mpicc-flags.sh libs)
endif

.PHONY: all deps build build-cuda test-easybuild test-no-install generate-kernels check-cuda check-rooms gpu-bundle demo demo-baseline test check-tags test-unit test-mpi check-fmt test-deps bench bench-go bench-gather bench-e2e bench-metrics bench-metrics-scale bench-metrics-tile bench-metrics-images bench-infer bench-tile bench-skip-empty bench-scale bench-large testdata golden-retinanet golden-treeformer treeformer-ref bench-treeformer golden-losses golden-nms golden-sample golden-geoparquet df-checkpoints check-mpich test-slurm test-multinode clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(GO) build -buildvcs=auto -tags '$(TAGS)' -o $(BIN) .

# The demo: the detector the project trained (tools/demo/train.py) on 40
# generated forest images (cmd/forestgen, seed 3: never trained on),
# under mpirun -np 2; then predict on 4 unlabelled images, and a compare of
# the report with the stored baseline (exit 7 if a metric got worse by more
# than 0.02: float32 rounding differs between CPUs' SGEMM kernels).
DEMO_MODEL := testdata/models/canopy-demo-r18
demo: build
	@$(GO) run ./cmd/forestgen -out testdata/demo -n 40 -seed 3
	@$(GO) run ./cmd/forestgen -out bin/demo-unlabelled -n 4 -seed 4 -prefix new_
	@rm -f bin/demo-unlabelled/annotations.csv
	$(MPIRUN) -np 2 --bind-to core $(BIN) eval --model $(DEMO_MODEL) --csv testdata/demo/annotations.csv --out canopy-out --force
	$(MPIRUN) -np 2 --bind-to core $(BIN) predict --model $(DEMO_MODEL) --images bin/demo-unlabelled --out canopy-predict --force
	@head -4 canopy-predict/predictions.csv
	$(BIN) compare --fail-on worse --tolerance default=0.02 testdata/golden/demo/report.json canopy-out

# Refresh the demo baseline after a change that moves the demo metrics.
demo-baseline: demo
	mkdir -p testdata/golden/demo && cp canopy-out/report.json testdata/golden/demo/report.json

test: deps check-fmt check-tags check-rooms check-cuda test-unit test-isa test-mpi

# docs/design.md's map of the rooms against the code: every package has
# its row and imports only what its row allows (every build tag). It
# needs go and python3 (its standard library only); Debian's python3 is
# installed when missing (a fresh Debian 12 has none).
check-rooms:
	@command -v python3 >/dev/null 2>&1 || scripts/install-deps.sh python3
	python3 tools/rooms/check_map.py

# The optional build tags compile and vet: -tags noblas (gonum SGEMM),
# -tags nompi (one process, no MPI library) and -tags nogdal (no raster
# reads); together they give a binary that needs only libc.
check-tags:
	$(GO) vet -tags nompi,noblas,nogdal ./...
	$(GO) build -tags nompi,noblas,nogdal -o bin/canopy-nompi .
	@if ldd bin/canopy-nompi | grep -E 'libmpi|openblas|libgdal|libgeos'; then echo "nompi,noblas,nogdal binary links MPI, OpenBLAS, GDAL or GEOS"; exit 1; fi
	bin/canopy-nompi doctor | grep -q 'in-process, 1 rank'

# The cuda build, two binaries (docs/design.md, "The cuda build without a
# GPU"): bin/canopy-cuda, the front (-tags cudafront), links no CUDA library
# and runs anywhere: with a GPU it execs bin/canopy-cuda-engine (-tags cuda:
# infer/cuda on gorgonia.org/cu, kernels from infer/cuda/kernels/*.fatbin),
# without one it runs on the CPU. Installs Debian's CUDA 11.8 headers and
# nvcc first (contrib/non-free; about 1.9 GB).
build-cuda: deps
	@scripts/install-cuda.sh
	$(GO) build -buildvcs=auto -tags 'cudafront$(if $(TAGS),$(comma)$(TAGS))' -o bin/canopy-cuda .
	$(GO) build -buildvcs=auto -tags 'cuda$(if $(TAGS),$(comma)$(TAGS))' -o bin/canopy-cuda-engine .

# kernels.cu -> kernels.fatbin (compute_80 PTX + sm_90), to commit.
generate-kernels:
	@scripts/install-cuda.sh
	$(GO) generate ./infer/cuda/kernels

# CI's cuda checks (no GPU needed): see scripts/check-cuda.sh.
check-cuda: deps
	@scripts/check-cuda.sh

# What the GPU check carries (tools/gpu/check.sh): the nompi,noblas,nogdal
# cuda front and engine (bin/canopy-cuda-nompi, -nompi-engine) and the
# retinanet test binary, needing only libc and libcuda.so.1 (cuDNN is
# dlopened there from PyTorch's environment), the
# model and image generators of its e2e section, the parity images and the
# demo set.
gpu-bundle: check-cuda
	$(RETINANET_IMAGES)
	CGO_ENABLED=0 $(GO) build -o bin/testmodel ./cmd/testmodel
	CGO_ENABLED=0 $(GO) build -o bin/forestgen ./cmd/forestgen
	$(GO) run ./cmd/forestgen -out bin/gpu-demo -n 40 -seed 3
	$(GO) run ./cmd/cropmodel -out bin/crop-files
	@if [ -f $(TREEFORMER_REF)/points.json ]; then python3 tools/gpu/tf_points.py strip $(TREEFORMER_REF)/points.json bin/treeformer-ref-points.json; \
	else echo "gpu-bundle: no $(TREEFORMER_REF)/points.json (make treeformer-ref): the GPU check compares TreeFormer's points with the CPU's only"; fi

# canopy installed as a site does (scripts/test-easybuild.sh): EasyBuild
# 5.4.1 from PyPI (venv in /opt/canopy-eb), Debian's Lmod, both easyconfigs
# of easybuild/ installed into bin/easybuild from a git archive of the
# checkout, then module load canopy and mpirun -np 2 canopy eval on the demo
# set against the demo's metrics. About 3 minutes (docs/testing.md).
test-easybuild: deps
	scripts/test-easybuild.sh

# make build with CANOPY_NO_INSTALL=1 against MPI, OpenBLAS and GDAL in a
# prefix that only PKG_CONFIG_PATH (or mpicc) points at, no apt
# (scripts/test-no-install.sh).
test-no-install:
	scripts/test-no-install.sh

# xmllint validates canopy compare's JUnit output against its schema.
test-deps:
	@scripts/install-deps.sh libxml2-utils

# Headless chromium opens OUT/report.html in jobs' browser test
# (TestReportHTMLInChromium), which keeps its screenshot in bin/.
.PHONY: browser-deps
test-deps: browser-deps
browser-deps:
	@scripts/install-deps.sh chromium fonts-liberation
export CANOPY_SCREENSHOT ?= $(CURDIR)/bin/report-screenshot.png

check-fmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet -tags '$(TAGS)' ./...

# Unit tests, including the end-to-end mpirun tests of package main.
test-unit: test-deps fake-cudnn
	$(GO) test -tags '$(TAGS)' -count=1 -timeout 1800s ./...

# The GPU-shim and parity tests with the CPU kernels forced to each path
# this machine runs (OPENBLAS_CORETYPE, CANOPY_SIMD, -tags noblas), so an
# AVX-512 machine also runs an AVX2 machine's (scripts/test-isa.sh).
.PHONY: test-isa
test-isa: deps
	TAGS='$(TAGS)' scripts/test-isa.sh

# The fake libcudnn.so.9 (infer/cuda/cudnn/fake): cuDNN 9's graph API over
# host memory, for canopy --cudnn bin/fake-cudnn on machines without a GPU
# (the tests build their own copy with cc).
.PHONY: fake-cudnn
fake-cudnn: bin/fake-cudnn/libcudnn.so.9
bin/fake-cudnn/libcudnn.so.9: infer/cuda/cudnn/fake/csrc/fakecudnn.c
	mkdir -p bin/fake-cudnn
	$(CC) -shared -fPIC -O3 -fno-math-errno -fvisibility=hidden -o $@ $< -lm
	cp $@ bin/fake-cudnn/libcudnn_graph.so.9

# The MPI conformance suite against the real binding on 1..4 ranks (the
# in-process implementation runs the same suite in test-unit).
test-mpi:
	$(GO) test -tags '$(TAGS)' -c -o bin/cmpi.test ./mpi/cmpi
	for n in 1 2 3 4; do echo "conformance: mpirun -np $$n"; \
		$(MPIRUN) -np $$n bin/cmpi.test -test.count=1 || exit 1; done
	@echo "injected failure: rank 1 of 2 fails TestInjectedFailure; the job must exit non-zero, not hang"
	@rc=0; CANOPY_MPI_TEST_FAIL_RANK=1 CANOPY_MPIRUN_TIMEOUT=60 $(MPIRUN) -np 2 bin/cmpi.test \
		-test.run '^TestInjectedFailure$$' -test.count=1 > bin/cmpi-injected.log 2>&1 || rc=$$?; \
	if [ $$rc -eq 0 ] || [ $$rc -eq 124 ] || [ $$rc -eq 137 ] || ! grep -q 'injected failure on rank 1' bin/cmpi-injected.log; then \
		cat bin/cmpi-injected.log; echo "injected failure: exit $$rc (want a non-zero exit other than the timeout's, and rank 1's failure in the log)"; exit 1; fi; \
	echo "injected failure: exit $$rc, as it should"

# Every parser's fuzz target for FUZZTIME each (the seed corpora in
# PKG/testdata/fuzz/ run in `make test`; scripts/fuzz-seeds.sh writes them).
.PHONY: fuzz fuzz-seeds
FUZZTIME ?= 30s
FUZZ_TARGETS := internal/dataset:FuzzParseTruth internal/dataset:FuzzParsePredictions internal/dataset:FuzzParseLabelDict internal/dataset:FuzzParseVOC \
	infer/safetensors:FuzzParse infer/cuda/cudnn:FuzzParsePlanFile infer/torchfile:FuzzRead internal/config:FuzzLoad infer/modelfile:FuzzParseConfig infer/crop:FuzzParseConfig infer/modelfile:FuzzParseRepo infer/imagefile:FuzzRead \
	internal/parts:FuzzDecode internal/wire:FuzzDecode internal/records:FuzzDecode metrics:FuzzParseThresholds internal/pipeline/eval:FuzzInputPacket internal/imagesrun:FuzzManifest internal/pipeline/evalcrops:FuzzFolderPacket internal/pipeline/evalcrops:FuzzMergeLogits report:FuzzCompareReport report:FuzzTolerances \
	internal/dataset:FuzzParseGeoCSV internal/dataset:FuzzParseWKT internal/dataset:FuzzParseWKB internal/georec:FuzzDecode
# the point model's part-file units (jobs/points)
FUZZ_TARGETS += jobs/points:FuzzDecodeUnits
fuzz: deps
	@for t in $(FUZZ_TARGETS); do echo "fuzz: $${t%%:*} $${t##*:} for $(FUZZTIME)"; \
		$(GO) test -tags '$(TAGS)' -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) ./$${t%%:*}/ || exit 1; done

fuzz-seeds:
	scripts/fuzz-seeds.sh

# Mutation testing (gremlins v0.6.0, one worker; slow, not in CI): per
# package, or per file of infer/retinanet with the tests that exercise it.
# MUTATE=nms runs one target; docs/testing.md records the scores.
.PHONY: mutate
mutate:
	scripts/mutate.sh $(MUTATE)

# Benchmarks (docs/benchmarks.md records their results and commands).
bench: bench-go bench-gather bench-e2e bench-metrics

# Go benchmarks, 6 runs each for benchstat.
bench-go: deps
	mkdir -p bin
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./metrics/ ./internal/dataset/ ./internal/wire/ | tee bin/bench-go.txt

# 1,000,000 boxes over mpirun -np 2: canopy's gather, then the peers'
# (torch all_gather_object over gloo, mpi4py allgather) in the same run.
bench-gather: build
	scripts/install-deps.sh python3-torch python3-mpi4py python3-pandas python3-shapely
	$(GO) test -c -o bin/gatherbench.test ./internal/collective/gatherbench
	$(MPIRUN) -np 2 --tag-output bin/gatherbench.test -test.run '^$$' -test.bench . -test.benchtime 10x | tee bin/bench-gather.txt
	tools/gatherbench/run.sh 2 --boxes 1000000 --out bin/peers-result.json
	$(MPIRUN) -np 2 --tag-output bin/gatherbench.test -test.run '^$$' -test.bench . -test.benchtime 10x | tee -a bin/bench-gather.txt

# mpirun -np 2 canopy eval on a replayed set of ~1M predictions; the report
# splits the wall time by stage.
bench-e2e: build
	$(GO) run ./cmd/synth -big bin/bench-1m -images 33334 -boxes 29
	/usr/bin/time -f 'wall %e s, max RSS %M KiB' $(MPIRUN) -np 2 $(BIN) eval --csv bin/bench-1m/truth.csv \
		--predictions bin/bench-1m/predictions.csv --out bin/out-1m --force

# canopy's metrics on the benchmark sets, side by side with DeepForest's
# RecallPrecision/evaluate_boxes and faster-coco-eval (peers from the venv
# that tools/deepforest/setup.sh and tools/coco/README.md describe).
PEER_PY ?= /opt/canopy-peers/venv/bin/python
# Metrics at scale (docs/benchmarks.md): one big tile at 5,000, 20,000 and
# 50,000 crowns beside DeepForest's evaluate_boxes
# (scripts/bench-metrics-tile.sh), and the many-images part: the sharded
# metric stage at np 1 and np 2 (GOMAXPROCS=1 per rank) on 360,000 truth
# and 150,000 predictions over 5,000 images, with a projection to 64 ranks
# (scripts/bench-metrics-scale.sh; results in bin/bench-metrics-scale/).
bench-metrics-scale: bench-metrics-tile bench-metrics-images

bench-metrics-tile: deps
	PEER_PY=$(PEER_PY) scripts/bench-metrics-tile.sh

bench-metrics-images: build
	scripts/bench-metrics-scale.sh

bench-metrics: deps
	$(GO) run ./cmd/synth -big bin/bench-2000x30
	$(GO) run ./cmd/synth -big bin/bench-coco -images 5000 -boxes 30 -dets 50 -classes 3
	$(GO) test -run '^$$' -bench 'DeepForestSet|COCO' -benchtime 3x -count 3 -cpu 1,2 ./jobs/ | tee bin/bench-metrics.txt
	$(PEER_PY) tools/deepforest/bench_metrics.py --truth bin/bench-2000x30/truth.csv \
		--predictions bin/bench-2000x30/predictions.csv --out bin/deepforest-bench.json
	$(PEER_PY) tools/coco/bench.py --truth bin/bench-coco/truth.csv --predictions bin/bench-coco/predictions.csv --out bin/coco-bench.json

# The CPU RetinaNet next to torchvision (Debian python3-torch), same weights,
# images and threads, in one run: prints canopy/torchvision in images/s.
# Then the peak RSS of one rank of canopy predict with ResNet-50.
bench-infer: deps
	scripts/install-deps.sh python3-torch python3-torchvision python3-pil
	$(RETINANET_IMAGES)
	$(GO) test -run '^$$' -bench '^BenchmarkDetect$$/r50' -benchtime 3x -count 6 ./infer/retinanet/ | tee bin/bench-infer.txt
	$(GO) test -run '^$$' -bench 'Conv3x3' -benchtime 3x -count 6 ./infer/cpu/ | tee -a bin/bench-infer.txt
	-benchstat bin/bench-infer.txt
	/usr/bin/python3 tools/retinanet/bench.py --model r50 --threads 1 --repeat 3 --go bin/bench-infer.txt \
		bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0002.png
	/usr/bin/python3 tools/retinanet/bench.py --model r50 --threads 2 --repeat 3 --go bin/bench-infer.txt \
		bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0002.png
	$(GO) build -o $(BIN) . && $(GO) run ./cmd/testmodel -out bin/model-r50
	/usr/bin/time -f 'canopy predict, ResNet-50, 1 rank, 2 threads: wall %e s, peak RSS %M KiB' \
		$(BIN) predict --model bin/model-r50 --images bin/retinanet-images --out bin/predict-r50 --force --threads 2
	$(GO) run ./cmd/forestgen -out bin/bench-20 -n 20 -seed 9
	for np in 1 2; do CANOPY_MPIRUN_TIMEOUT=900 /usr/bin/time -f "mpirun -np $$np --bind-to core, 1 thread/rank, 20 images: wall %e s" \
		$(MPIRUN) -np $$np --bind-to core $(BIN) predict --model bin/model-r50 --images bin/bench-20 \
		--out bin/predict-np$$np --force --threads 1 || exit 1; \
		grep -o '"detect": [0-9.]*' bin/predict-np$$np/report.json; done

# canopy against current torch/torchvision (PEER_PY, the peers' venv: current
# releases, as DeepForest 2.x installs them) as a paired comparison: for each
# image (800×800 and the non-square 1333×799) and thread count, canopy's
# BenchmarkDetect and tools/retinanet/bench.py run one after the other in
# alternating order, PAIRED_ROUNDS rounds, each a fresh process; the median
# of the rounds' ratios, in wall and CPU time, with the CPU model, the load
# and torch's CPU capability (bin/bench-paired.json). PAIRED_ISA=avx2 runs
# both sides' AVX2 code on an AVX-512 machine (tools/retinanet/paired.py);
# PAIRED_ISA=native,avx2 both in turn, each table naming its ISA (and
# bin/bench-paired.native.json, bin/bench-paired.avx2.json). The figure of
# issue 44: PAIRED_THREADS=2 (800x800 is forest_0000's network input).
PAIRED_ROUNDS ?= 5
PAIRED_ISA ?= native
PAIRED_THREADS ?= 1,2
bench-infer-peer:
	$(RETINANET_IMAGES)
	$(GO) test -c -o bin/retinanet.test ./infer/retinanet/
	$(PEER_PY) tools/retinanet/paired.py --test-bin bin/retinanet.test --rounds $(PAIRED_ROUNDS) --threads $(PAIRED_THREADS) --isa $(PAIRED_ISA) \
		--out bin/bench-paired.json bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0002.png \
		| tee bin/bench-paired.txt

# predict --tile at scale (scripts/bench-tile.sh: a 20000x20000 tiled,
# deflated raster on 2 ranks with the demo model, peak RSS per rank;
# BENCH_TILE_SIZES, BENCH_TILE_PEER=1 for the side by side with DeepForest's
# predict_tile).
bench-tile: deps
	scripts/bench-tile.sh

# issue 34's scale benchmark: predict --tile over 1,000 generated rasters on
# np 2 with the demo model (peak RSS per rank at 100 and 1,000 rasters, time
# to the first raster's outputs, windows/s against the pre-change one-shot
# path when BENCH_SCALE_OLD names its binary, a stop and resume), and the
# balance of fixed blocks against windows dealt at run time
# (scripts/bench-scale.sh; docs/benchmarks.md).
bench-scale: build
	scripts/bench-scale.sh

# --skip-empty's gain on a raster with an orthomosaic's nodata border
# (scripts/bench-skip-empty.sh: the raster, the Go benchmarks of the check
# against a window's read and detection, and, once predict has the flag,
# predict --tile with and without it; BENCH_SKIP_ALPHA=1 for an alpha band).
bench-skip-empty: deps
	scripts/bench-skip-empty.sh

# issue 27's end-to-end parity on a 2000x2000 forestgen raster: canopy
# predict --tile against DeepForest's predict_tile rows
# (infer/tile/testdata/e2e2000.json; scripts/e2e-tile.sh, ~1-2 min of CPU).
e2e-tile: deps
	scripts/e2e-tile.sh

# Allgatherv with one rank's part above 2 GiB (about 7 GiB of memory).
bench-large: deps
	$(GO) test -c -o bin/cmpi.test ./mpi/cmpi
	CANOPY_MPIRUN_TIMEOUT=600 $(MPIRUN) -np 2 bin/cmpi.test -test.run Large -large -test.v

# report.html's cost: the page of 2,000 images (12 drawn) in Go, then a
# 2,000-image replayed eval with and without it, interleaved.
.PHONY: bench-html
bench-html: build
	$(GO) run ./cmd/synth -big bin/bench-2000x30
	$(GO) test -run '^$$' -bench ReportHTML -benchtime 5x -count 3 ./internal/htmlreport/ | tee bin/bench-html.txt
	for i in 1 2 3 4 5 6 7; do for h in false true; do /usr/bin/time -f "--html=$$h: wall %e s" $(BIN) eval \
		--csv bin/bench-2000x30/truth.csv --predictions bin/bench-2000x30/predictions.csv --out bin/out-html-$$h \
		--force --html=$$h >/dev/null || exit 1; done; done 2>&1 | tee -a bin/bench-html.txt
	ls -l bin/out-html-true/report.html | tee -a bin/bench-html.txt

testdata:
	$(GO) run ./cmd/synth -out testdata/sets

# The images of the RetinaNet parity fixtures and benchmarks: two 400×400
# crops, a large non-square image and a tiny one.
RETINANET_IMAGES = $(GO) run ./cmd/forestgen -out bin/retinanet-images -n 4 -seed 5 \
	-sizes 400x400,400x400,1500x900,96x64 -prefix forest_

# TreeFormer (issue 46): the committed fixtures of infer/treeformer (a
# one-block-per-stage model on a seeded image; synthetic density maps), and
# the full pvt_v2_b3 reference (hub folder, .ckpt, one window's stages,
# predict_image and predict_tile points), 230 MB, outside the repository in
# TREEFORMER_REF, which infer/treeformer's full tests read
# (CANOPY_TREEFORMER_REF). DeepForest 1bad4419 from DF_SRC, offline. Its
# points (no density maps) are committed as infer/treeformer/testdata/
# full_points.json, which the end-to-end test runs from everywhere.
DF_SRC ?= /tmp/deepforest/src
TREEFORMER_REF ?= /tmp/treeformer-ref
golden-treeformer:
	PYTHONPATH=$(DF_SRC) ATEN_CPU_CAPABILITY=avx2 $(PEER_PY) tools/treeformer/reference.py small --out infer/treeformer/testdata/small.json
	PYTHONPATH=$(DF_SRC) ATEN_CPU_CAPABILITY=avx2 $(PEER_PY) tools/treeformer/reference.py peaks --out infer/treeformer/testdata/peaks.json

# CPU seconds per 512 window, torch against canopy on the reference's weights
bench-treeformer:
	PYTHONPATH=$(DF_SRC) $(PEER_PY) tools/treeformer/bench.py --ref $(TREEFORMER_REF) --repeat 3 --out bin/treeformer-bench.json

treeformer-ref:
	$(GO) run ./cmd/forestgen -out bin/treeformer-images -n 3 -seed 3 -sizes 1249x1035,400x400,625x518
	PYTHONPATH=$(DF_SRC) ATEN_CPU_CAPABILITY=avx2 $(PEER_PY) tools/treeformer/reference.py full --out $(TREEFORMER_REF) \
		--tile bin/treeformer-images/img_0000.png --image bin/treeformer-images/img_0001.png --image bin/treeformer-images/img_0002.png
	python3 tools/gpu/tf_points.py strip $(TREEFORMER_REF)/points.json infer/treeformer/testdata/full_points.json

# Parity fixtures of the native RetinaNet (testdata/golden/retinanet): the
# real torchvision (current torch/torchvision in the peers' venv, PEER_PY) on
# images drawn by cmd/forestgen, with weights from the generator both
# sides share: RETINANET_IMAGES's four, then sizes on which the resize rules
# of torchvision >= 0.16 and <= 0.15 disagree. The size table sizes.json
# comes from torchvision's own transform, blend.json from torch's resize
# under three CPU settings. (testdata/golden/retinanet/
# torch1.13 holds the fixtures Debian's torch 1.13 made, for
# --resize torchvision-0.15.)
GOLDEN_SIZES := 400x400,400x400,1500x900,96x64,1249x1035,625x518,997x601
golden-retinanet:
	$(GO) run ./cmd/forestgen -out bin/golden-images -n 7 -seed 5 -sizes $(GOLDEN_SIZES) -prefix forest_
	$(PEER_PY) tools/retinanet/sizes.py --out testdata/golden/retinanet/sizes.json
	cd bin/golden-images && $(PEER_PY) ../../tools/retinanet/golden.py --model r18 \
		--out ../../testdata/golden/retinanet/r18.json forest_000*.png
	cd bin/golden-images && $(PEER_PY) ../../tools/retinanet/golden.py --model r50 \
		--out ../../testdata/golden/retinanet/r50.json forest_0000.png forest_0002.png forest_0004.png forest_0005.png forest_0006.png
	cd bin/golden-images && $(PEER_PY) ../../tools/retinanet/blend.py \
		--out ../../testdata/golden/retinanet/blend.json forest_0003.png forest_0004.png forest_0005.png
	$(GO) run ./cmd/forestgen -out bin/demo-golden -n 4 -seed 3 -sizes 400x400,1249x1035,625x518,997x601
	cd bin/demo-golden && $(PEER_PY) ../../tools/retinanet/golden.py --checkpoint ../../testdata/models/canopy-demo-r18 \
		--out ../../testdata/golden/retinanet/demo.json img_000*.png

# DeepForest's own checkpoint files (issue 28): tools/deepforest/checkpoints.py
# saves the r50 test network with save_model() (.ckpt), torch.save (.pt) and
# save_pretrained (folder), f32 and bf16, into bin/df-checkpoints (some 130 MB
# each, not committed) and their pickles into infer/modelfile/testdata/deepforest;
# the tests then read the real files beside the ones rebuilt from the pickles.
df-checkpoints:
	$(PEER_PY) tools/deepforest/checkpoints.py bin/df-checkpoints --skeleton infer/modelfile/testdata/deepforest
	CANOPY_DF_CHECKPOINTS=$(CURDIR)/bin/df-checkpoints $(GO) test -count=1 -run 'TestDeepForestCheckpoints|TestLoadTorch' -v ./infer/modelfile/

# The loss fixture (testdata/golden/retinanet/losses.json): torchvision's
# RetinaNet in train mode under no_grad (the venv's current torchvision) on
# four generated 400×400 images with hand-written truth, r50 and the demo model.
golden-losses:
	$(GO) run ./cmd/forestgen -out bin/loss-images -n 4 -seed 7 -sizes 400x400 -prefix loss_
	/opt/canopy-peers/venv/bin/python tools/retinanet/losses.py --images bin/loss-images \
		--out testdata/golden/retinanet/losses.json

# The NMS tie fixture (testdata/golden/retinanet/nms_ties.json):
# torchvision's nms and batched_nms on constructed exact ties, and torch's
# descending sort on tie-heavy vectors (TestNMSTies, TestBatchedNMSTies).
golden-nms:
	/opt/canopy-peers/venv/bin/python tools/retinanet/nms_ties.py --out testdata/golden/retinanet/nms_ties.json

# The demo checkpoint on DeepForest's sample image OSBS_029.png (../shared),
# torchvision with AVX2 kernels like the other fixtures (TestGoldenDemoOnSample).
golden-sample:
	ATEN_CPU_CAPABILITY=avx2 $(PEER_PY) tools/retinanet/golden.py --checkpoint testdata/models/canopy-demo-r18 \
		--out testdata/golden/retinanet/demo_osbs.json ../shared/data/deepforest/OSBS_029.png

# The GeoParquet verdict (tools/geoparquet/testdata/verdict.json): canopy's
# .parquet files of a predict --tile run with the demo model on DeepForest's
# two georeferenced sample rasters (../shared), read by geopandas and checked
# against DeepForest's image_to_geo_coordinates of predictions.csv; the run's
# predictions.csv and report.json's rasters are kept for TestCheckVerdict.
golden-geoparquet: build
	rm -rf bin/geoparquet-run
	$(BIN) predict --tile --csv tools/geoparquet/testdata/rasters.csv --root-dir ../shared/data/deepforest \
		--patch-size 200 --model testdata/models/canopy-demo-r18 --out bin/geoparquet-run
	$(GO) run ./cmd/tileparquet -out bin/geoparquet-run
	$(PEER_PY) tools/geoparquet/check.py bin/geoparquet-run > tools/geoparquet/testdata/verdict.json
	mkdir -p tools/geoparquet/testdata/run
	cp bin/geoparquet-run/predictions.csv tools/geoparquet/testdata/run/
	$(PEER_PY) -c 'import json,sys; r=json.load(open("bin/geoparquet-run/report.json")); json.dump({"tile": {"rasters": [{k: x[k] for k in ("image_path", "crs", "geotransform")} for x in r["tile"]["rasters"]]}}, sys.stdout, indent=1)' \
		> tools/geoparquet/testdata/run/report.json

# The Slurm tests: a one-node Slurm 22.05 with fake GPUs under /tmp; every
# scripts/slurm script submitted against testdata (root; installs slurm-wlm munge).
test-slurm: build
	scripts/test-slurm.sh

# The multi-node tests: 3 hosts as network namespaces over real TCP, with a
# 3-node Slurm (scripts/netns-cluster.sh), canopy's metrics, placement and
# traffic across them, and faults on one host (root; installs slurm-wlm
# munge; about 4 minutes). See scripts/test-multinode.sh.
test-multinode: build
	timeout -k 10 600 scripts/test-multinode.sh

# Compile the binding against MPICH 4 (CI): installs libmpich-dev, vets the
# binding with the mpich tag, and restores Open MPI as the default.
check-mpich:
	scripts/check-mpich.sh

clean:
	rm -rf bin canopy-out
