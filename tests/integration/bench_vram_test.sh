#!/usr/bin/env bash
# kvfabric-bench --use_vram end to end with the fake CUDA driver
# (tests/support/fake_cuda.c): GPU buffers on every device (--gpu_id=-1),
# moved over tcp through the staging path, every byte checked (--verify),
# WRITE and READ, each against a fresh target.
#   bench_vram_test.sh BENCH FAKE_LIBCUDA
set -euo pipefail
BENCH=$1
export KVF_CUDA_LIBRARY=$2
export KVF_LOG_LEVEL=warn
for op in write read; do
  out=$(mktemp)
  "$BENCH" --mode=target --protocol=tcp --buffer_size=$((64 << 20)) >"$out" 2>&1 &
  target=$!
  trap 'kill $target 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do grep -q -- "--segment_id=" "$out" && break; sleep 0.1; done
  seg=$(grep -o -- "--segment_id=[^ ]*" "$out" | head -1 | cut -d= -f2)
  [ -n "$seg" ] || { echo "target did not start: $(cat "$out")"; exit 1; }
  line=$("$BENCH" --mode=initiator --protocol=tcp --segment_id="$seg" --operation=$op --use_vram --gpu_id=-1 \
           --init_mem --block_size=65536,1048576 --batch_size=8 --threads=3 --duration=0.5 --verify 2>&1)
  echo "$line"
  [ "$(grep -c "verified:" <<<"$line")" = 2 ] || { echo "FAIL: $op was not verified at both block sizes"; exit 1; }
  kill $target
  wait $target 2>/dev/null || true
  rm -f "$out"
done
echo "PASS"
