#!/bin/bash
# One 4 KiB write at a time: bare fabric (queue depth 1) vs engine (1 thread, batch 1), alternating.
cd "$(dirname "$0")/../.."
for rep in 1 2 3; do
for p in tcp shm; do
  build/tools/kvfabric-fabric-bench --mode=target --protocol=$p > /tmp/ft.out 2>/dev/null &
  sleep 0.8; a=$(grep -o -- '--segment_id=[^ ]*' /tmp/ft.out | cut -d= -f2)
  bare=$(build/tools/kvfabric-fabric-bench --mode=initiator --protocol=$p --segment_id=$a --operation=write --block_size=4096 --queue_depth=1 --duration=2 --json 2>/dev/null | grep '^{' | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (d["duration_s"]/(d["bytes"]/4096)*1e6))')
  kill -TERM %1; wait
  build/tools/kvfabric-bench --mode=target --protocol=$p --buffer_size=16777216 > /tmp/et.out 2>/dev/null &
  sleep 0.8; s=$(grep -o -- '--segment_id=[^ ]*' /tmp/et.out | cut -d= -f2)
  eng=$(build/tools/kvfabric-bench --mode=initiator --protocol=$p --segment_id=$s --operation=write --block_size=4096 --batch_size=1 --threads=1 --duration=2 2>/dev/null | grep -o 'p50 [0-9]* us')
  kill -TERM %1; wait
  echo "$p bare mean ${bare} us/op | engine batch $eng"
done; done
