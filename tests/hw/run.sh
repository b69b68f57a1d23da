#!/usr/bin/env bash
# The hardware runbook: what only a host with EFA NICs and GPUs can prove,
# in one command. See tests/hw/README.md.
#
#   tests/hw/run.sh [--peer HOST] [--build DIR] [--out FILE] [--duration S] [--check]
#
#   --peer HOST   run the bench targets on HOST (ssh, same checkout path and
#                 build there); without it, target and initiator share this
#                 host, where EFA loops back through the NIC (not the
#                 cross-host figure: the report says so)
#   --build DIR   the build directory (default: build)
#   --out FILE    the report (default: tests/hw/report-<host>-<date>.md)
#   --duration S  seconds per bench point (default 10)
#   --check       only say whether this host has what the runbook needs
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build peer="" out="" duration=10 check=0
while [ $# -gt 0 ]; do
  case $1 in
    --peer) peer=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --check) check=1; shift ;;
    *) echo "run.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

# What the host has.
missing=()
efa_domains=$(fi_info -p efa -t FI_EP_RDM 2>/dev/null | awk '/domain:/ {print $2}' | sort -u)
[ -n "$efa_domains" ] || missing+=("no efa device here (fi_info -p efa finds none; install the AWS EFA software and use an EFA-enabled instance)")
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -gt 0 ] || missing+=("no GPU here (nvidia-smi -L lists none)")
for t in tests/efa_gpu_test tests/gpu_test tools/kvfabric-bench tools/kvfabric-gpu-ceiling; do
  [ -x "$build/$t" ] || missing+=("$build/$t is not built (make, or --build DIR)")
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'run.sh: %s\n' "${missing[@]}"
  [ $check = 1 ] && exit 0
  exit 1
fi
if [ $check = 1 ]; then
  echo "run.sh: this host has $(wc -w <<<"$efa_domains") efa domain(s) and $gpus GPU(s): ready"
  exit 0
fi

host=$(hostname -s)
out=${out:-$here/report-$host-$(date +%Y%m%d-%H%M).md}
log=$(mktemp -d)
bench=$build/tools/kvfabric-bench
instance=$(curl -s -m 1 http://169.254.169.254/latest/meta-data/instance-type 2>/dev/null || true)
# Line rate: the sum of the EFA ports' rates (sysfs "100 Gb/sec ..."), in GB/s.
nic_gbps() {  # $1: how many NICs (0: all)
  local n=0 sum=0 r
  for f in /sys/class/infiniband/*/ports/1/rate; do
    r=$(awk '{print $1}' "$f" 2>/dev/null) || continue
    sum=$(awk -v s="$sum" -v r="$r" 'BEGIN {print s + r}')
    n=$((n + 1))
    [ "$1" -gt 0 ] && [ $n -ge "$1" ] && break
  done
  awk -v s="$sum" 'BEGIN {printf "%.1f", s / 8}'
}
all_nics=$(wc -w <<<"$efa_domains")
first_nic=$(head -1 <<<"$efa_domains")

status=0
section() { printf '\n## %s\n\n' "$1" >>"$out"; }
run_step() {  # $1: title, rest: command; records pass/fail and the output's tail
  local title=$1; shift
  if "$@" >"$log/step" 2>&1; then echo "- PASS: $title" >>"$out"
  else echo "- **FAIL**: $title (exit $?)" >>"$out"; status=1; fi
  { echo; echo '```'; tail -40 "$log/step"; echo '```'; } >>"$out"
}

{
  echo "# kvfabric hardware runbook: $host, $(date -u +%Y-%m-%d)"
  echo
  echo "- instance: ${instance:-unknown}; kvfabric $(git -C "$root" describe --always --dirty 2>/dev/null)"
  echo "- libfabric: $(fi_info --version 2>/dev/null | tr '\n' ' ')"
  echo "- GPUs: $gpus ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs))"
  echo "- EFA: $all_nics domain(s), line rate $(nic_gbps 0) GB/s in all ($(nic_gbps 1) GB/s on $first_nic)"
  echo "- bench targets: ${peer:-this host (loopback through the NIC: not the cross-host figure)}"
} >"$out"

section "Doctor"
run_step "kvfabric doctor" python3 -m kvfabric doctor

section "GPU tests with the real driver"
run_step "gpu_test (RealDriver*)" "$build/tests/gpu_test" --gtest_filter='GpuTest.RealDriver*'

section "Transfer tests over efa, GPU memory on both sides"
run_step "efa_gpu_test (the reference's ten transfer tests)" "$build/tests/efa_gpu_test"

section "Ceilings"
run_step "cuMemcpy per GPU (kvfabric-gpu-ceiling)" "$build/tools/kvfabric-gpu-ceiling"
cp "$log/step" "$log/ceiling"

# A target, here or on the peer; prints its segment id.
start_target() {  # $1: NIC filter, $2: --use_vram or ""
  local cmd="$bench --mode=target --protocol=efa --buffer_size=4294967296 ${1:+--nic_filter=$1} $2 --gpu_id=-1"
  if [ -n "$peer" ]; then
    ssh -o BatchMode=yes "$peer" "cd $root && exec $cmd" >"$log/target" 2>&1 &
  else
    $cmd >"$log/target" 2>&1 &
  fi
  target=$!
  for _ in $(seq 1 300); do grep -q -- "--segment_id=" "$log/target" && break; sleep 0.1; done
  grep -o -- "--segment_id=[^ ]*" "$log/target" | head -1 | cut -d= -f2
}
stop_target() { kill "$target" 2>/dev/null; wait "$target" 2>/dev/null; [ -n "$peer" ] && ssh "$peer" "pkill -f 'kvfabric-bench --mode=target'" 2>/dev/null; }

section "Bench matrix: 1 MiB blocks, 16 threads, batch 128"
{
  echo "Command per point: \`kvfabric-bench --mode=initiator --protocol=efa --block_size=1048576 --threads=16"
  echo "--batch_size=128 --duration=$duration [--use_vram --gpu_id=-1] [--nic_filter=$first_nic]\`,"
  echo "the target started the same way. Ceiling: the EFA line rate of the NICs used."
  echo
  echo "| NICs | memory | operation | GB/s | line rate GB/s | of line rate |"
  echo "|---|---|---|---:|---:|---:|"
} >>"$out"
for nics in one all; do
  filter=""; [ $nics = one ] && filter=$first_nic
  rate=$(nic_gbps $([ $nics = one ] && echo 1 || echo 0))
  for mem in gpu host; do
    vram=""; [ $mem = gpu ] && vram="--use_vram"
    for op in write read; do
      seg=$(start_target "$filter" "$vram")
      if [ -z "$seg" ]; then
        echo "| $nics | $mem | $op | target did not start | | |" >>"$out"; status=1; stop_target; continue
      fi
      "$bench" --mode=initiator --protocol=efa --segment_id="$seg" --operation=$op --block_size=1048576 \
        --threads=16 --batch_size=128 --duration="$duration" $vram --gpu_id=-1 ${filter:+--nic_filter=$filter} \
        --json_out="$log/point.json" >"$log/init" 2>&1
      gbps=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['points'][0]; print('%.1f' % (p['bytes_per_s']/1e9))" "$log/point.json" 2>/dev/null)
      if [ -z "$gbps" ]; then
        echo "| $nics | $mem | $op | failed: $(tail -1 "$log/init") | | |" >>"$out"; status=1
      else
        echo "| $nics | $mem | $op | $gbps | $rate | $(awk -v a="$gbps" -v b="$rate" 'BEGIN {printf "%.0f%%", 100 * a / b}') |" >>"$out"
      fi
      stop_target
    done
  done
done
{ echo; echo "GPU copy ceilings from the same run:"; echo; echo '```'; cat "$log/ceiling"; echo '```'; } >>"$out"

section "Registration time"
{
  echo "The initiator's 4 GiB of host memory registered on its near NICs or on every NIC, a thread per"
  echo "NIC or one after another (KVF_REGISTER_RAILS, KVF_REGISTER_PARALLEL; register_ms of kvfabric-bench)."
  echo
  echo "| KVF_REGISTER_RAILS | KVF_REGISTER_PARALLEL | ms |"
  echo "|---|---|---:|"
} >>"$out"
seg=$(start_target "" "")
for combo in "near 1" "all 1" "near 0" "all 0"; do
  set -- $combo
  KVF_REGISTER_RAILS=$1 KVF_REGISTER_PARALLEL=$2 "$bench" --mode=initiator --protocol=efa --segment_id="$seg" \
    --operation=write --block_size=1048576 --threads=1 --batch_size=1 --duration=0.1 --buffer_size=4294967296 \
    --json_out="$log/reg.json" >"$log/init" 2>&1
  ms=$(python3 -c "import json,sys; print('%.1f' % json.load(open(sys.argv[1]))['points'][0]['register_ms'])" "$log/reg.json" 2>/dev/null)
  echo "| $1 | $2 | ${ms:-failed: $(tail -1 "$log/init")} |" >>"$out"
done
stop_target

section "First submit (probe)"
seg=$(start_target "" "--use_vram")
run_step "kvfabric-bench --mode=probe (open, warmup, cold first 1 MiB write)" \
  "$bench" --mode=probe --protocol=efa --segment_id="$seg" --use_vram --json
stop_target

section "Metrics: cost and a scrape over efa"
run_step "tools/bench/metrics_cost.py (counters off vs on, endpoint scraped every second; this host's loopback)" \
  python3 "$root/tools/bench/metrics_cost.py" --build "$build" --protocols efa --reps 3 --duration 2

echo >>"$out"
echo "Result: $([ $status = 0 ] && echo "every step passed" || echo "**some steps failed**: see above")" >>"$out"
echo "run.sh: report written to $out"
rm -rf "$log"
exit $status
