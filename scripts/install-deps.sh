#!/usr/bin/env bash
# Installs what kvfabric needs to build and test, from the distribution's
# packages (Debian/Ubuntu). libfabric comes from the system: /opt/amazon/efa
# on EFA hosts is used as is, never replaced or bundled.
set -euo pipefail

PKGS=(cmake ninja-build g++ pkg-config python3 python3-venv python3-dev python3-matplotlib
      libfabric-dev libfabric-bin
      nlohmann-json3-dev libspdlog-dev libcli11-dev libcpp-httplib-dev prometheus-cpp-dev libssl-dev libxxhash-dev etcd-server tmux
      libgtest-dev libgmock-dev clang libclang-dev)

if ! command -v dpkg >/dev/null 2>&1; then
  echo "install-deps: not a Debian/Ubuntu system; install by hand: ${PKGS[*]}" >&2
  exit 0
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# On EFA hosts libfabric lives in /opt/amazon/efa: skip Debian's copy.
if [ -e /opt/amazon/efa/lib/pkgconfig/libfabric.pc ] || [ -e /opt/amazon/efa/lib64/pkgconfig/libfabric.pc ]; then
  missing=("${missing[@]/libfabric-dev}")
  missing=("${missing[@]/libfabric-bin}")
fi
# Cargo and rustc: the machine's (rustup) when there is one, else Debian's.
command -v cargo >/dev/null 2>&1 || missing+=(cargo rustc)
missing=(${missing[@]+"${missing[@]}"})
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "install-deps: missing packages and not root. Run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
${SUDO:-} apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
  ${SUDO:-} apt-get update -q >/dev/null
  ${SUDO:-} apt-get install -y -q "${missing[@]}"
}
