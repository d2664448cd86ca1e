#!/usr/bin/env bash
# libkilnrt on the H200 (issue 18's acceptance 1): builds the runtime alone
# (no SQLite, Boost or yaml-cpp needed; HIP declarations from the headers
# Triton bundles), builds a package there with tests/data/runtime/make_package.py
# (plus any packages in $KILN_PACKAGES, space-separated, e.g. the anchors and
# quickstart packages from `kiln package`), and for each: kiln-rt info, verify
# (no PyTorch involved), bench and tune; then the C and ctypes examples on the
# device, and the host time per kiln_launch against Triton's own launchers.
# Prints a short table; details go to $OUT (default out/runtime_h200).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/runtime_h200}
mkdir -p "$OUT"
PY=${KILN_PYTHON:-python3}
BUILD=${KILN_RT_BUILD:-build-rt}
say() { echo "[runtime_h200] $*" >&2; }

TRITON_DIR=$("$PY" -c "import triton, os; print(os.path.dirname(triton.__file__))")
HIP_INC="$TRITON_DIR/backends/amd/include"
[[ -f "$HIP_INC/hip/hip_runtime_api.h" ]] || HIP_INC=NOTFOUND
say "building libkilnrt alone in $BUILD (HIP headers: $HIP_INC)"
if ! { cmake -S src/runtime -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKILNRT_REQUIRE_ALL=OFF \
         -DKILNRT_HIP_INCLUDE="$HIP_INC" && cmake --build "$BUILD" -j"$(nproc)"; } >"$OUT/build.log" 2>&1; then
  say "build failed (needs cmake, a C++20 compiler, nlohmann-json and OpenSSL headers); see $OUT/build.log"
  tail -20 "$OUT/build.log"
  exit 1
fi
RT="$BUILD/kiln-rt"

say "packaging softmax + add for H200 (make_package.py)"
TRITON_INTERPRET=0 "$PY" tests/data/runtime/make_package.py keygen "$OUT/keys" >/dev/null 2>&1
TRITON_INTERPRET=0 "$PY" tests/data/runtime/make_package.py build "$OUT/pkg_h200" --targets H200 \
  --sign "$OUT/keys/key.pem" >"$OUT/make_package.log" 2>&1 || { say "make_package failed"; cat "$OUT/make_package.log"; exit 1; }

declare -a ROWS
run_pkg() {
  local pkg=$1 tag=$2 key=${3:-}
  local args=()
  [[ -n "$key" ]] && args=(--pubkey "$key")
  "$RT" info "$pkg" >"$OUT/$tag.info.txt" 2>&1; local info=$?
  # verify with no Python at all on the path: the check uses only the package's verify data
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$RT" verify "$pkg" "${args[@]}" \
    >"$OUT/$tag.verify.txt" 2>&1; local verify=$?
  "$RT" bench "$pkg" --reps 100 >"$OUT/$tag.bench.txt" 2>&1; local bench=$?
  "$RT" tune "$pkg" --out "$OUT/$tag.measurements.json" >"$OUT/$tag.tune.txt" 2>&1; local tune=$?
  local pass fail
  pass=$(grep -c '^PASS' "$OUT/$tag.verify.txt")
  fail=$(grep -c '^FAIL' "$OUT/$tag.verify.txt")
  ROWS+=("$(printf '%-28s info=%d verify=%d (%s pass, %s fail) bench=%d tune=%d' "$tag" $info $verify "$pass" "$fail" $bench $tune)")
}
run_pkg "$OUT/pkg_h200" h200_test_pkg "$OUT/keys/key.pub"
for p in ${KILN_PACKAGES:-}; do run_pkg "$p" "$(basename "$p")"; done

say "examples on the device"
cc -std=c11 -O2 docs/examples/runtime_softmax.c -Iinclude -L"$BUILD" -lkilnrt -Wl,-rpath,"$PWD/$BUILD" -lm \
  -o "$OUT/runtime_softmax" && "$OUT/runtime_softmax" "$OUT/pkg_h200" >"$OUT/c_example.txt" 2>&1
c_rc=$?
KILN_RT_LIB="$PWD/$BUILD/libkilnrt.so" "$PY" docs/examples/runtime_softmax.py "$OUT/pkg_h200" >"$OUT/py_example.txt" 2>&1
py_rc=$?

say "host launch overhead"
cc -std=c11 -O2 bench/deploy/runtime_launch_overhead.c -Iinclude -L"$BUILD" -lkilnrt -Wl,-rpath,"$PWD/$BUILD" \
  -o "$OUT/launch_overhead" && "$OUT/launch_overhead" "$OUT/pkg_h200" softmax fp32 64 1000 >"$OUT/overhead_kiln.json" 2>&1
TRITON_INTERPRET=0 "$PY" bench/deploy/runtime_launch_overhead.py >"$OUT/overhead_triton.json" 2>&1

echo
echo "== libkilnrt on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
for r in "${ROWS[@]}"; do echo "$r"; done
echo "C example rc=$c_rc: $(tail -1 "$OUT/c_example.txt")"
echo "ctypes example rc=$py_rc: $(tail -1 "$OUT/py_example.txt")"
"$PY" - "$OUT" <<'PYEOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
for f in ("overhead_kiln.json", "overhead_triton.json"):
    for line in (out / f).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            print(f"{f}: {line}")
print(f"{'launcher':32s} {'median us':>10s} {'p10':>8s} {'p90':>8s}")
for r in rows:
    if "median_us" in r:
        print(f"{r['what']:32s} {r['median_us']:10.2f} {r['p10_us']:8.2f} {r['p90_us']:8.2f}")
    else:
        print(f"{r['what']:32s} {r.get('error')}")
PYEOF
echo "details: $OUT"
