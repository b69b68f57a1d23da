#!/usr/bin/env bash
# The frameworks runbook: SGLang and vLLM as released, on a host with GPUs,
# sharing KV caches through kvfabric's store with no change of their own.
# It needs a host with two GPUs; see tests/hw/README.md.
#
#   tests/hw/frameworks.sh [--model MODEL] [--protocol P] [--python PY] [--pool SIZE] [--out FILE]
#                          [--only sglang|sglang-mooncake|vllm] [--check]
#
#   --model MODEL   a model both frameworks serve (default Qwen/Qwen2.5-1.5B-Instruct)
#   --protocol P    the store's fabric: efa (default when fi_info finds one), tcp
#   --python PY     the Python with kvfabric and the frameworks installed (default python3)
#   --pool SIZE     each store node's pool (default 8gb)
#   --out FILE      the report (default: tests/hw/frameworks-<host>-<date>.md)
#   --only STEP     one step
#   --check         only say what this host has for the runbook
#
# Each step starts two serving instances, A on GPU 0 and B on GPU 1, both
# clients of two `kvfabric store-node`s on this host, and sends one long
# prompt to A and then the same prompt to B. It passes when B took the
# prompt's KV cache from the store instead of computing it:
#   sglang           HiCache with kvfabric's native backend (docs/sglang.md):
#                    B's meta_info.cached_tokens_details.storage > 0
#   sglang-mooncake  HiCache with SGLang's own Mooncake backend over
#                    kvfabric's mooncake.store shim: the same check
#   vllm             vLLM's MooncakeStoreConnector over the shim
#                    (docs/vllm.md): B's vllm:external_prefix_cache_hits > 0
# The report also says whether B's greedy answer matches A's, word for word:
# KV pages that came back wrong would change it.
#
# KVF_HW_FAKE_FRAMEWORK=server.py (the tests' only): that stand-in HTTP
# server replaces both frameworks, and no GPU is needed, so the runbook's
# own plumbing is tested where there are none (python/tests/test_hw_runbook.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=Qwen/Qwen2.5-1.5B-Instruct protocol="" py=python3 pool=8gb out="" only="" check=0
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --protocol) protocol=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --pool) pool=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --check) check=1; shift ;;
    *) echo "frameworks.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case $only in
  ""|sglang|sglang-mooncake|vllm) ;;
  *) echo "frameworks.sh: --only $only: no such step (sglang, sglang-mooncake, vllm)" >&2; exit 2 ;;
esac
if [ -z "$protocol" ]; then
  protocol=tcp
  fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1 && protocol=efa
fi

fake=${KVF_HW_FAKE_FRAMEWORK:-}
settle=10  # seconds for A's pages to reach the store
[ -n "$fake" ] && settle=1

# What the host has.
has() { [ -n "$fake" ] && [ "$1" != kvfabric ] || "$py" -c "import $1" >/dev/null 2>&1; }
shim_on() {
  [ -n "$fake" ] || "$py" -c "import mooncake.store as m, sys; sys.exit('kvfabric' not in m.__file__)" >/dev/null 2>&1
}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
missing=()
[ "$gpus" -ge 2 ] || [ -n "$fake" ] ||
  missing+=("fewer than two GPUs here (nvidia-smi -L lists $gpus): A and B need one each")
has kvfabric || missing+=("$py cannot import kvfabric (pip install /path/to/kvfabric, or --python)")
notes=()
has sglang || notes+=("no sglang in $py: its steps are skipped (pip install sglang)")
has vllm || notes+=("no vllm in $py: its step is skipped (pip install vllm)")
shim_on || notes+=("mooncake.store is not kvfabric's shim: sglang-mooncake and vllm are skipped (kvfabric mooncake-shim install)")
[ ${#notes[@]} -gt 0 ] && printf 'frameworks.sh: %s\n' "${notes[@]}"
if [ ${#missing[@]} -gt 0 ]; then
  printf 'frameworks.sh: %s\n' "${missing[@]}"
  [ $check = 1 ] && exit 0
  exit 1
fi
if [ $check = 1 ]; then
  echo "frameworks.sh: $gpus GPUs, store over $protocol: ready"
  exit 0
fi

host=$(hostname -s)
out=${out:-$here/frameworks-$host-$(date +%Y%m%d-%H%M).md}
log=$(mktemp -d)
status=0
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; pids=(); }
trap 'stop_all; rm -rf "$log"' EXIT
free_port() { "$py" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
wait_http() {  # $1: URL answering 200 once the server is up, $2: its log, $3: its pid
  for _ in $(seq 1 4500); do
    curl -sf -m 2 "$1" >/dev/null 2>&1 && return 0
    kill -0 "$3" 2>/dev/null || { echo "it exited before serving $1; the end of its log:"; tail -30 "$2"; return 1; }
    sleep 0.2
  done
  echo "not up after 15 min: $1; the end of its log:"; tail -30 "$2"; return 1
}

# The store: two nodes on this host, --pool each; the instances are clients.
members="127.0.0.1:$(free_port),127.0.0.1:$(free_port)"
for m in ${members//,/ }; do
  "$py" -m kvfabric store-node --pool "$pool" --listen "$m" --members "$members" --protocol "$protocol" \
    >"$log/node-${m##*:}" 2>&1 &
  pids+=($!)
done
for m in ${members//,/ }; do  # each prints its name once it serves
  for _ in $(seq 1 300); do grep -q '"name"' "$log/node-${m##*:}" && break; sleep 0.1; done
  grep -q '"name"' "$log/node-${m##*:}" ||
    { echo "frameworks.sh: the store node at $m did not start:"; tail -20 "$log/node-${m##*:}"; exit 1; }
done
store_pids=("${pids[@]}")

# One long prompt (a few thousand tokens: many KV pages), the same each time.
prompt=$("$py" -c "print(' '.join(f'Paragraph {i}: kvfabric moves KV caches between GPUs over EFA, page by page, and checks every byte it reads.' for i in range(150)) + ' Summarise this in one sentence:')")

# Sends the prompt to $1 (sglang: /generate, vllm: /v1/completions); prints
# the JSON answer.
ask() {  # $1: kind, $2: base URL
  PROMPT=$prompt MODEL=$model "$py" - "$1" "$2" <<'EOF'
import json, os, sys, urllib.request
kind, url = sys.argv[1], sys.argv[2]
if kind == "sglang":
    body = {"text": os.environ["PROMPT"], "sampling_params": {"temperature": 0, "max_new_tokens": 48}}
    path = "/generate"
else:
    body = {"model": os.environ["MODEL"], "prompt": os.environ["PROMPT"], "temperature": 0, "max_tokens": 48}
    path = "/v1/completions"
req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
print(json.dumps(json.load(urllib.request.urlopen(req, timeout=600))))
EOF
}

# Stops the serving instances, keeping the store nodes.
stop_instances() {
  local mine=("${pids[@]:${#store_pids[@]}}")
  [ ${#mine[@]} -gt 0 ] && { kill "${mine[@]}" 2>/dev/null; wait "${mine[@]}" 2>/dev/null; }
  pids=("${store_pids[@]}")
}

# Starts A and B with "$@" (the framework's command, without ports), waits,
# asks A then B, and writes B's verdict; $1: kind, $2: title.
two_instances() {
  local kind=$1 title=$2; shift 2
  [ -n "$fake" ] && set -- "$py" "$fake" --kind "$kind"
  local pa pb; pa=$(free_port); pb=$(free_port)
  echo "- $title" >>"$out"
  # Each its own IPC directory: vLLM's store connector names its lookup
  # socket after the host and DP rank only, so two instances would share one.
  mkdir -p "$log/rpc-a" "$log/rpc-b"
  CUDA_VISIBLE_DEVICES=0 VLLM_RPC_BASE_PATH=$log/rpc-a "$@" --port "$pa" >"$log/a" 2>&1 & pids+=($!)
  local pid_a=$!
  CUDA_VISIBLE_DEVICES=1 VLLM_RPC_BASE_PATH=$log/rpc-b "$@" --port "$pb" >"$log/b" 2>&1 & pids+=($!)
  local pid_b=$!
  if ! wait_http "http://127.0.0.1:$pa/health" "$log/a" "$pid_a" >"$log/why" || \
     ! wait_http "http://127.0.0.1:$pb/health" "$log/b" "$pid_b" >>"$log/why"; then
    { echo "  - **FAIL**: the instances did not start"; echo; echo '```'; cat "$log/why"; echo '```'; } >>"$out"
    status=1; stop_instances; return
  fi
  ask "$kind" "http://127.0.0.1:$pa" >"$log/ans-a" 2>&1
  sleep "$settle"  # A's pages reach the store (written through, in the background)
  ask "$kind" "http://127.0.0.1:$pb" >"$log/ans-b" 2>&1
  curl -s "http://127.0.0.1:$pb/metrics" >"$log/metrics-b" 2>/dev/null
  "$py" - "$kind" "$log" >>"$out" <<'EOF' || status=1
import json, re, sys
kind, log = sys.argv[1], sys.argv[2]
try:
    a, b = (json.load(open(f"{log}/ans-{x}")) for x in "ab")
except ValueError:
    print("  - **FAIL**: no answer:", open(f"{log}/ans-a").read()[-300:], open(f"{log}/ans-b").read()[-300:])
    sys.exit(1)
if kind == "sglang":
    text = lambda r: r["text"]
    details = b["meta_info"].get("cached_tokens_details") or {}
    hits = details.get("storage", 0)
    what = f"B took {hits} of its {b['meta_info']['prompt_tokens']} prompt tokens from the store ({details})"
else:
    text = lambda r: r["choices"][0]["text"]
    m = re.findall(r'^vllm:external_prefix_cache_hits(?:_total)?\{[^}]*\} ([0-9.e+]+)', open(f"{log}/metrics-b").read(), re.M)
    hits = sum(float(x) for x in m)
    what = f"B's vllm:external_prefix_cache_hits: {hits:.0f} tokens"
same = "the same" if text(a) == text(b) else "**not** the same (greedy, so KV that came back changed it, or the GPUs' arithmetic differs)"
print(f"  - {'PASS' if hits > 0 else '**FAIL**'}: {what}; B's answer is {same} as A's")
sys.exit(0 if hits > 0 else 1)
EOF
  for x in a b; do
    { echo; echo "  $(tr ab AB <<<"$x")'s log (tail):"; echo; echo '```'; tail -15 "$log/$x"; echo '```'; } >>"$out"
  done
  stop_instances
}

{
  echo "# kvfabric frameworks runbook: $host, $(date -u +%Y-%m-%d)"
  echo
  echo "- model: $model; store: two kvfabric store-nodes over $protocol ($members); GPUs: $gpus"
  echo "- python: $py; kvfabric $("$py" -c 'import kvfabric; print(kvfabric.__version__)' 2>/dev/null)," \
       "sglang $("$py" -c 'import sglang; print(sglang.__version__)' 2>/dev/null || echo none)," \
       "vllm $("$py" -c 'import vllm; print(vllm.__version__)' 2>/dev/null || echo none)"
  echo
} >"$out"

# Host pools of a fixed size (both instances start at once, and would each
# size theirs from the same free memory), and B waits for its prefetch from
# the store to complete, so its verdict does not depend on timing.
hicache=(--page-size 64 --enable-hierarchical-cache --hicache-mem-layout page_first
         --hicache-write-policy write_through --hicache-size 8 --hicache-storage-prefetch-policy wait_complete
         --mem-fraction-static 0.6)
step() { [ -z "$only" ] || [ "$only" = "$1" ]; }
if step sglang; then
  if has sglang; then
    extra="{\"backend_name\": \"kvfabric\", \"module_path\": \"kvfabric.integrations.sglang\",
            \"class_name\": \"HiCacheKvfabric\", \"interface_v1\": 1, \"metadata_server\": \"P2PHANDSHAKE\",
            \"global_segment_size\": 0, \"protocol\": \"$protocol\",
            \"settings\": {\"KVF_STORE_MEMBERS\": \"$members\"}}"
    two_instances sglang "SGLang HiCache, kvfabric's native backend" \
      "$py" -m sglang.launch_server --model-path "$model" "${hicache[@]}" \
      --hicache-storage-backend dynamic --hicache-storage-backend-extra-config "$extra"
  else
    echo "- SKIP: SGLang HiCache, native backend (no sglang in $py)" >>"$out"
  fi
fi
if step sglang-mooncake; then
  if has sglang && shim_on; then
    extra="{\"master_server_address\": \"ignored:50051\", \"metadata_server\": \"P2PHANDSHAKE\",
            \"protocol\": \"$protocol\", \"device_name\": \"\", \"global_segment_size\": 0, \"check_server\": false}"
    KVF_STORE_MEMBERS=$members two_instances sglang "SGLang HiCache, SGLang's own Mooncake backend over the shim" \
      "$py" -m sglang.launch_server --model-path "$model" "${hicache[@]}" \
      --hicache-storage-backend mooncake --hicache-storage-backend-extra-config "$extra"
  else
    echo "- SKIP: SGLang's Mooncake backend (sglang missing, or mooncake.store is not the shim)" >>"$out"
  fi
fi
if step vllm; then
  if has vllm && shim_on; then
    cat >"$log/mooncake.json" <<EOF
{"metadata_server": "P2PHANDSHAKE", "master_server_address": "", "protocol": "$protocol", "device_name": "",
 "mode": "standalone-store", "global_segment_size": 0, "local_buffer_size": "64mb"}
EOF
    MOONCAKE_CONFIG_PATH=$log/mooncake.json KVF_STORE_MEMBERS=$members two_instances vllm \
      "vLLM MooncakeStoreConnector over the shim" \
      "$py" -m vllm.entrypoints.openai.api_server --model "$model" --gpu-memory-utilization 0.6 \
      --kv-transfer-config '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}'
  else
    echo "- SKIP: vLLM's MooncakeStoreConnector (vllm missing, or mooncake.store is not the shim)" >>"$out"
  fi
fi

{
  echo
  echo "Store nodes' logs (tail):"
  echo
  echo '```'
  for f in "$log"/node-*; do tail -5 "$f"; done
  echo '```'
  echo
  echo "Result: $([ $status = 0 ] && echo "every step that ran passed" || echo "**some steps failed**: see above")"
} >>"$out"
echo "frameworks.sh: report written to $out"
exit $status
