# Sourced first by the GPU benchmark scripts (bench/<group>/<script>.sh):
#   . "$(dirname "$0")/../gpu_setup.sh" BUILD_LOG [TARGET...]
# changes to the repository's root (ROOT), sets OUT (default ./out) and
# creates it, exports PYTHONUNBUFFERED=1, builds kiln for the GPU
# (scripts/gpu/build_on_device.sh with any extra TARGETs, e.g. kiln-replay; its
# output in BUILD_LOG; its tail and exit 1 when it fails; KILN_SKIP_BUILD=1
# reuses build-gpu/), puts the build's libraries on LD_LIBRARY_PATH and sets K
# (kiln) and RT (kiln-rt).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [[ ${KILN_SKIP_BUILD:-0} != 1 ]]; then
  scripts/gpu/build_on_device.sh "${@:2}" >"$1" 2>&1 || { tail -30 "$1"; exit 1; }
fi
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
K=$PWD/build-gpu/kiln
RT=$PWD/build-gpu/kiln-rt
