#!/usr/bin/env bash
# Sets up a fresh Debian 12 / Ubuntu 24.04 machine for strata, idempotently: installs the
# Debian packages the build, the tests and the example need (only those missing), then
# configures the build directory `build/` (only if it is not configured yet).
#
#   tools/setup.sh            # packages + build/
#   BUILD_DIR=out tools/setup.sh -Dblas=disabled    # another directory, extra meson options
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

pkgs=(meson ninja-build pkg-config cmake g++ python3 python3-matplotlib
      libopenblas-dev zlib1g-dev libssl-dev doctest-dev dataset-fashion-mnist fortunes
      libopenmpi-dev openmpi-bin libgloo-dev iproute2 libcli11-dev nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${BUILD_DIR:-build}
if [[ ! -f $build/build.ninja ]]; then
  # --wrap-mode=nodownload: doctest comes from the system package; never hang on a download.
  meson setup "$build" --wrap-mode=nodownload "$@"
fi
