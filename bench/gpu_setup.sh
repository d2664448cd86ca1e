# Sourced by the GPU benchmark scripts, from the repository root:
#   . bench/gpu_setup.sh BUILD_LOG
# builds kiln for the GPU (scripts/gpu/build_on_device.sh, its output in
# BUILD_LOG; its tail and exit 1 when it fails; KILN_SKIP_BUILD=1 reuses
# build-gpu/), puts the build's libraries on LD_LIBRARY_PATH and sets K (kiln)
# and RT (kiln-rt).
if [[ ${KILN_SKIP_BUILD:-0} != 1 ]]; then
  scripts/gpu/build_on_device.sh >"$1" 2>&1 || { tail -30 "$1"; exit 1; }
fi
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
K=$PWD/build-gpu/kiln
RT=$PWD/build-gpu/kiln-rt
