#!/usr/bin/env bash
# Installs what accord needs on Debian 12 (only what is missing), then configures and builds.
# Sourced by scripts/train and scripts/test; BUILD_DIR, CMAKE_ARGS and BUILD_TARGETS (space-separated;
# default: everything) may be set by the caller.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

PACKAGES=(build-essential ccache cmake pkg-config libcaf-dev doctest-dev libucx-dev ucx-utils
  libboost-dev libboost-program-options-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev libxxhash-dev
  dataset-fashion-mnist fortunes clang python3-matplotlib chromium python3-dev pybind11-dev python3-torch
  python3-numpy python3-pip python3-setuptools prometheus)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "accord setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# ccache (CMakeLists.txt uses it when present): paths under the clone count as relative, so a
# fresh clone in any folder reuses what an earlier one compiled; the working directory is not hashed.
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" --parallel "$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
