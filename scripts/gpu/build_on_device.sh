#!/usr/bin/env bash
# On a GPU node without a package registry (Ubuntu 24.04): unpacks .deps/ (fetch_deps.sh)
# into /tmp/deps and builds Kiln into build-gpu/ against them: kiln, kiln-mpi
# where CMake finds an MPI, and any targets given as arguments (kiln-replay).
# Boost 1.74's Asio lacks an #include <utility> that GCC 13 needs: CXXFLAGS adds it.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p /tmp/deps
for d in .deps/libboost1.74-dev_*.deb .deps/libboost-program-options1.74-dev_*.deb \
         .deps/libboost-program-options1.74.0_*.deb .deps/libsqlite3-dev_*.deb; do
  dpkg -x "$d" /tmp/deps
done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The runtime (src/runtime) takes HIP declarations from the headers Triton bundles;
# no msgpack-c there (AMD metadata notes are then not decoded by kiln-rt on this node).
HIP_INC=$(python3 -c "import triton, os; print(os.path.dirname(triton.__file__))")/backends/amd/include
[[ -f $HIP_INC/hip/hip_runtime_api.h ]] || HIP_INC=NOTFOUND
CXXFLAGS="-include utility" cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF \
  -DBOOST_ROOT=/tmp/deps/usr -DBoost_NO_SYSTEM_PATHS=ON \
  -DBoost_DIR=/tmp/deps/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
  -DSQLite3_INCLUDE_DIR=/tmp/deps/usr/include \
  -DSQLite3_LIBRARY=/tmp/deps/usr/lib/x86_64-linux-gnu/libsqlite3.a \
  -DKILNRT_REQUIRE_ALL=OFF -DKILNRT_HIP_INCLUDE="$HIP_INC" >/tmp/cmake-gpu.log 2>&1 \
  || { cat /tmp/cmake-gpu.log; exit 1; }
# kiln-mpi too where CMake found an MPI (Open MPI 4.1.6 there), unless KILN_NO_MPI=1.
targets=(kiln kiln-rt "$@")
help=$(cmake --build build-gpu --target help)
[[ $help == *kiln-mpi* && ${KILN_NO_MPI:-0} != 1 ]] && targets+=(kiln-mpi)
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" 2>&1 | grep -E "error|Error" && exit 1 || true
test -x build-gpu/kiln
echo "built ${targets[*]} in build-gpu/"
