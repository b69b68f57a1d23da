#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for a
# bounded time on its seed corpus (tests/fuzz/corpus/<target>). New inputs go
# to a temporary directory, never into the repository. A crash, leak, hang
# (-timeout) or memory blow-up (-rss_limit_mb) fails the run and leaves the
# reproducer in build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [build|run]: both by default; `build` only builds
# the targets, `run` only runs those built.
set -euo pipefail
SECONDS_EACH=${FUZZ_SECONDS:-20}
MODE=${1:-all}
case "$MODE" in
  all | build | run) ;;
  *)
    echo "usage: scripts/fuzz.sh [build|run]" >&2
    exit 2
    ;;
esac
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: skipped: no clang++ (Debian: apt install clang; make deps installs it)"
  exit 0
fi
if [ "$MODE" != run ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DKVF_FUZZ=ON -DKVF_BUILD_TESTS=OFF >/dev/null
  cmake --build build-fuzz --target fuzz_segment_desc fuzz_handshake_frame fuzz_store_messages
fi
[ "$MODE" = build ] && exit 0
for t in segment_desc handshake_frame store_messages; do
  if [ ! -x "build-fuzz/tests/fuzz/fuzz_$t" ]; then
    echo "fuzz: build-fuzz/tests/fuzz/fuzz_$t is missing: run scripts/fuzz.sh build first" >&2
    exit 1
  fi
done
mkdir -p build-fuzz/artifacts
for t in segment_desc handshake_frame store_messages; do
  work=$(mktemp -d)
  echo "fuzz: $t for ${SECONDS_EACH} s"
  # The fuzzer's own exit status decides (grep's does not; `|| true` here
  # would replace PIPESTATUS with its own and hide a crash).
  set +e
  build-fuzz/tests/fuzz/fuzz_$t "$work" "tests/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
    -timeout=5 -rss_limit_mb=1024 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/$t- 2>&1 | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|artifact_prefix|Test unit written)'
  status=${PIPESTATUS[0]}
  set -e
  rm -rf "$work"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $status); reproducer in build-fuzz/artifacts/" >&2
    exit 1
  fi
done
echo "fuzz: no crash, leak, hang or memory blow-up"
