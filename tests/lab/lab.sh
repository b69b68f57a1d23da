#!/usr/bin/env bash
# The emulated multi-rail fabric: 2 hosts x N rails on one Linux machine.
#
# Host A and host B are network namespaces; rail i is a veth pair aI (in A,
# 10.77.I.1/24) <-> bI (in B, 10.77.I.2/24), each its own subnet, so libfabric's
# tcp provider sees N domains per host and kvfabric pairs aI with bI by subnet.
# Each end of a rail can be shaped with tc tbf to emulate a NIC's line rate.
#
#   lab.sh up [--rails N] [--rates 2gbit|2,2,2,1gbit|none] [--mtu 9000]
#   lab.sh down
#   lab.sh status               # rails, addresses, qdiscs, rates as JSON-ish lines
#   lab.sh exec A|B CMD...      # run CMD inside host A or B
#   lab.sh run [up options] -- CMD...
#                               # up, run CMD on the host (use `lab.sh exec` or
#                               # `ip netns exec` inside it), down on exit
#   lab.sh link aI|bI up|down   # take one end of a rail down or up (failover tests)
#
# Names: namespaces are ${KVF_LAB_PREFIX:-kvflab}A / ...B, so two labs with
# different prefixes can coexist. Needs root (or CAP_NET_ADMIN) and the
# iproute2 tools; exits 77 (the "skip" code of ctest and automake) with the
# reason when they are missing. Traffic stays inside the namespaces.
set -euo pipefail

PREFIX=${KVF_LAB_PREFIX:-kvflab}
NS_A=${PREFIX}A
NS_B=${PREFIX}B
RAILS=4
RATES=2gbit
MTU=9000

die() { echo "lab: $*" >&2; exit 1; }
skip() { echo "lab: skipped: $*" >&2; exit 77; }

check_capable() {
  command -v ip >/dev/null || skip "the ip tool (iproute2) is not installed"
  command -v tc >/dev/null || skip "the tc tool (iproute2) is not installed"
  [ "$(id -u)" = 0 ] || skip "building network namespaces needs root (run as root or under sudo)"
  local probe=${PREFIX}probe$$
  ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here (ip netns add failed: no CAP_SYS_ADMIN, or inside a restricted container)"
  ip netns del "$probe"
}

# "2gbit" -> every rail 2gbit; "2,2,2,1gbit" -> per rail (the unit of the last
# item applies to bare numbers); "none" -> no shaping.
rate_of_rail() {
  local i=$1
  [ "$RATES" = none ] && { echo none; return; }
  IFS=, read -r -a parts <<<"$RATES"
  local unit
  unit=$(sed -E 's/^[0-9.]+//' <<<"${parts[-1]}")
  [ -n "$unit" ] || unit=gbit
  local p=${parts[$(( i < ${#parts[@]} ? i : ${#parts[@]} - 1 ))]}
  [[ "$p" =~ ^[0-9.]+$ ]] && p="${p}${unit}"
  echo "$p"
}

down() {
  # Deleting a namespace deletes its veth ends (and their peers).
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}

wait_up() {
  local ns=$1 dev=$2
  for _ in $(seq 1 200); do
    # veth reports "UP" once both ends are up (LOWER_UP).
    if ip -n "$ns" -o link show dev "$dev" 2>/dev/null | grep -q 'LOWER_UP'; then return 0; fi
    sleep 0.025
  done
  die "link $dev in $ns did not come up within 5 s"
}

up() {
  check_capable
  [[ "$RAILS" =~ ^[1-9][0-9]?$ ]] || die "--rails must be 1-99, not '$RAILS'"
  down
  ip netns add "$NS_A"
  ip netns add "$NS_B"
  ip -n "$NS_A" link set lo up
  ip -n "$NS_B" link set lo up
  for ((i = 0; i < RAILS; i++)); do
    ip link add "a$i" netns "$NS_A" mtu "$MTU" type veth peer name "b$i" netns "$NS_B" mtu "$MTU"
    ip -n "$NS_A" addr add "10.77.$i.1/24" dev "a$i"
    ip -n "$NS_B" addr add "10.77.$i.2/24" dev "b$i"
    ip -n "$NS_A" link set "a$i" up
    ip -n "$NS_B" link set "b$i" up
    local rate
    rate=$(rate_of_rail "$i")
    if [ "$rate" != none ]; then
      # Both ends: data one way, acknowledgements and reads' data the other.
      tc -n "$NS_A" qdisc replace dev "a$i" root tbf rate "$rate" burst 256kb latency 50ms
      tc -n "$NS_B" qdisc replace dev "b$i" root tbf rate "$rate" burst 256kb latency 50ms
    fi
  done
  for ((i = 0; i < RAILS; i++)); do
    wait_up "$NS_A" "a$i"
    wait_up "$NS_B" "b$i"
  done
  status
}

status() {
  ip netns list | grep -q "^$NS_A\b" || { echo "lab: not up (no namespace $NS_A)"; return 1; }
  for dev in $(ip -n "$NS_A" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^a[0-9]'); do
    local i=${dev#a}
    local q
    q=$(tc -n "$NS_A" qdisc show dev "$dev" | grep -o 'rate [^ ]*' || echo "rate unshaped")
    echo "rail $i: $NS_A/$dev 10.77.$i.1 <-> $NS_B/b$i 10.77.$i.2, $q, $(ip -n "$NS_A" -o link show dev "$dev" | grep -o 'state [A-Z]*')"
  done
}

parse_up_options() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --rails) RAILS=$2; shift 2 ;;
      --rails=*) RAILS=${1#*=}; shift ;;
      --rates) RATES=$2; shift 2 ;;
      --rates=*) RATES=${1#*=}; shift ;;
      --mtu) MTU=$2; shift 2 ;;
      --mtu=*) MTU=${1#*=}; shift ;;
      --) shift; REST=("$@"); return ;;
      *) die "unknown option '$1' (see the top of $0)" ;;
    esac
  done
  REST=()
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up) parse_up_options "$@"; up ;;
  down) down ;;
  status) status ;;
  exec)
    [ $# -ge 2 ] || die "usage: lab.sh exec A|B CMD..."
    host=$1; shift
    case "$host" in A) ns=$NS_A ;; B) ns=$NS_B ;; *) die "host must be A or B, not '$host'" ;; esac
    exec ip netns exec "$ns" "$@" ;;
  run)
    parse_up_options "$@"
    [ ${#REST[@]} -gt 0 ] || die "usage: lab.sh run [--rails N] [--rates R] -- CMD..."
    trap down EXIT INT TERM
    up >&2
    export KVF_LAB_NS_A=$NS_A KVF_LAB_NS_B=$NS_B KVF_LAB_RAILS=$RAILS
    "${REST[@]}" ;;
  link)
    [ $# -eq 2 ] || die "usage: lab.sh link aI|bI up|down"
    case "$1" in a*) ns=$NS_A ;; b*) ns=$NS_B ;; *) die "rail end must be aI or bI, not '$1'" ;; esac
    ip -n "$ns" link set "$1" "$2" ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
esac
