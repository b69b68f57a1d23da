# kvfabric: `make run` (set-up, build, the demo) and `make test` (every test).
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

.PHONY: all deps build run test bench docs clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD)

# A target and an initiator on this host (p2p handshake, tcp and shm), each
# engine figure beside the bare-fabric ceiling from the same run.
run: build
	python3 tools/bench/compare.py --build $(BUILD) --reps 1 --duration 3 --verify

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 300

# The figures of docs/benchmarks.md: more repetitions, medians.
bench: build
	python3 tools/bench/compare.py --build $(BUILD) --reps 5 --duration 4 --verify --json_out $(BUILD)/bench.json

docs: build
	$(BUILD)/tools/kvfabric-settings --markdown > docs/settings.md

clean:
	rm -rf $(BUILD)
