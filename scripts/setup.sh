#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Kiln and builds it: apt packages, Python
# packages, CMake build in ./build. Idempotent: one line per step that does
# something, nothing at all when everything is there and built. What apt, pip and
# the compiler say goes to the log ($BUILD/setup.log); a failing step says so and
# points at it.
#   KILN_SKIP_APT=1   do not touch apt (packages installed by other means)
#   KILN_BUILD_DIR    build directory (default: build)
#   KILN_BUILD_TYPE   CMake build type of a new build directory (default: Release at -O2)
#   KILN_SETUP_LOG    the log (default: $KILN_BUILD_DIR/setup.log)
#   KILN_UNITY=0      build file by file (default: a unity build, faster on few cores)
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
  chromium                    # tests/e2e/test_serve.py: the dashboard and kiln report in headless Chromium
)

BUILD=${KILN_BUILD_DIR:-build}
mkdir -p "$BUILD"
LOG=${KILN_SETUP_LOG:-$BUILD/setup.log}
: >"$LOG"

say() { echo "[setup] $*" >&2; }

# run WHAT CMD...: CMD's output into the log; on failure, its error lines (else
# its last lines) and where the rest is, then exit.
run() {
  local what=$1 rc=0 from
  shift
  echo "== $what: $*" >>"$LOG"
  from=$(wc -l <"$LOG")
  "$@" >>"$LOG" 2>&1 || rc=$?
  if ((rc)); then
    say "$what failed (exit $rc); all of its output is in $LOG"
    local lines
    lines=$(tail -n +"$((from + 1))" "$LOG" | grep -iE "error|fatal" | head -n 20 || true)
    [[ -n $lines ]] || lines=$(tail -n 20 "$LOG")
    sed 's/^/  | /' <<<"$lines" >&2
    exit 1
  fi
}

if [[ "${KILN_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=()
    [[ $(id -u) -ne 0 ]] && SUDO=(sudo)
    say "apt: installing ${missing[*]}"
    run "apt-get update" "${SUDO[@]}" apt-get update
    run "apt-get install" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

PY=${KILN_PYTHON:-python3}
# pip's advice (running as root, script locations, a newer pip) is not trouble:
# keep it out of the log's way too.
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
# torch first, pinned: with no torch installed, an unpinned `torch` pulls a CUDA
# build of several GB; 2.13.0 is the CPU build this project tests with (install the
# build for your accelerator from pytorch.org instead on a GPU machine).
if ! "$PY" -c "import torch" 2>/dev/null; then
  say "pip: installing torch ${KILN_TORCH_VERSION:-2.13.0}"
  run "pip install torch" "$PY" -m pip install "torch==${KILN_TORCH_VERSION:-2.13.0}"
fi
if ! "$PY" -c "import triton, yaml, pytest, xdist, msgpack, numpy, sys; sys.exit(triton.__version__ != '3.6.0')" 2>/dev/null; then
  say "pip: installing worker/requirements.txt"
  run "pip install -r worker/requirements.txt" "$PY" -m pip install -r worker/requirements.txt
fi

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  say "cmake: configuring $BUILD/ and building (the first build takes minutes)"
  # -O2 without debug info: a third less compile time than RelWithDebInfo on
  # the heavy translation units. KILN_BUILD_TYPE=RelWithDebInfo for a debugger.
  # A unity build (16 sources per translation unit): a clean build on 2 cores
  # took 8.4 min against 11.1 min (2026-12-02; a precompiled json.hpp saved
  # 3%). Two .cpp files of one library can then not both define a helper of
  # the same name in an anonymous namespace. KILN_UNITY=0 builds file by file.
  unity=()
  [[ ${KILN_UNITY:-1} == 1 ]] && unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)
  if [[ ${KILN_BUILD_TYPE:-Release} == Release ]]; then
    run "cmake configure" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${unity[@]}" \
      -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG"
  else
    run "cmake configure" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="$KILN_BUILD_TYPE" "${unity[@]}"
  fi
fi
before=$(wc -l <"$LOG")
run "cmake --build" cmake --build "$BUILD" -j"$(nproc)"
# Makefiles and Ninja both say "Linking" for every target they relink.
linked=$(tail -n +"$((before + 1))" "$LOG" | grep -c "Linking" || true)
if ((linked)); then
  say "cmake: built $BUILD/ ($linked targets relinked)"
fi
test -x "$BUILD/kiln" || { say "no $BUILD/kiln after the build; see $LOG"; exit 1; }
