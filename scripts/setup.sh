#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Kiln and builds it: apt packages, Python
# packages, CMake build in ./build. Idempotent and quiet when everything is there.
#   KILN_SKIP_APT=1   do not touch apt (packages installed by other means)
#   KILN_BUILD_DIR    build directory (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake pkg-config git
  libboost-dev libboost-program-options-dev libyaml-cpp-dev libsqlite3-dev sqlite3
  nlohmann-json3-dev libssl-dev libgtest-dev python3 python3-pip
  libopenmpi-dev openmpi-bin  # kiln-mpi (mpi/)
  slurm-wlm munge             # scripts/slurm/ and its test on a local single-node cluster
  libamdhip64-dev libmsgpack-cxx-dev  # src/runtime: HIP headers + runtime (dlopen'd), msgpack.hpp
  clang-tools-15 openssl      # clang-offload-bundler-15 (kiln package --bundle, runtime tests); --sign keys
  clang-15                    # fuzz/ (libFuzzer + ASan/UBSan: scripts/fuzz.sh)
  prometheus                  # promtool: tests check the metrics (kiln run --metrics) and configs/prometheus rules
)

say() { echo "[setup] $*" >&2; }

if [[ "${KILN_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    say "installing apt packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

PY=${KILN_PYTHON:-python3}
# torch first, pinned: with no torch installed, an unpinned `torch` pulls a CUDA
# build of several GB; 2.13.0 is the CPU build this project tests with (install the
# build for your accelerator from pytorch.org instead on a GPU machine).
if ! "$PY" -c "import torch" 2>/dev/null; then
  say "installing torch ${KILN_TORCH_VERSION:-2.13.0}"
  "$PY" -m pip install -q --disable-pip-version-check "torch==${KILN_TORCH_VERSION:-2.13.0}"
fi
if ! "$PY" -c "import triton, yaml, pytest, xdist, msgpack, numpy, sys; sys.exit(triton.__version__ != '3.6.0')" 2>/dev/null; then
  say "installing Python packages (worker/requirements.txt)"
  "$PY" -m pip install -q --disable-pip-version-check -r worker/requirements.txt
fi

BUILD=${KILN_BUILD_DIR:-build}
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" 2>&1 | grep -E "error|warning: unused" || true
test -x "$BUILD/kiln" || { say "build failed"; cmake --build "$BUILD" -j1; exit 1; }
say "ready: $BUILD/kiln"
