#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, -DKILN_FUZZ=ON with clang) and runs each
# over its committed corpus for a fixed time; fails on any crash, leak, UB,
# timeout or out-of-memory (libFuzzer exits non-zero and leaves crash-*/leak-*/
# timeout-* files in $KILN_FUZZ_ARTIFACTS). New inputs it finds go to a scratch
# copy of the corpus, not into the repository.
#
#   scripts/fuzz.sh [SECONDS_EACH (default 30)] [TARGET...]
# Environment: KILN_FUZZ_BUILD (default build-fuzz), KILN_FUZZ_ARTIFACTS
# (default a temporary directory), CC/CXX (default clang-15/clang++-15),
# KILN_FUZZ_JOBS (targets at once, default nproc), KILN_FUZZ_BUILD_JOBS (compile
# jobs, default nproc), KILN_FUZZ_SKIP_BUILD=1 (run the binaries already built).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(fuzz_manifest fuzz_reply fuzz_rt_code_object fuzz_pkg_code_object)
build=${KILN_FUZZ_BUILD:-build-fuzz}
art=${KILN_FUZZ_ARTIFACTS:-$(mktemp -d)}
mkdir -p "$art"
if [[ "${KILN_FUZZ_SKIP_BUILD:-0}" == 1 ]]; then
  :  # the binaries already in $build
elif [[ ! -f "$build/CMakeCache.txt" ]]; then
  CC=${CC:-clang-15} CXX=${CXX:-clang++-15} cmake -S . -B "$build" -DKILN_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=Fuzz ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
fi
[[ "${KILN_FUZZ_SKIP_BUILD:-0}" == 1 ]] || cmake --build "$build" -j"${KILN_FUZZ_BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"
# One target per core at a time: each still gets its SECONDS_EACH of a core.
run_one() {
  local t=$1 corpus=fuzz/corpus/${1#fuzz_} work
  work=$(mktemp -d)
  cp -r "$corpus/." "$work/"
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: over 2 GB is a finding.
  local rc=0
  "$build/$t" "$work" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$art/$t-" -print_final_stats=1 >"$art/$t.log" 2>&1 || rc=$?
  rm -rf "$work"
  return $rc
}
jobs_max=${KILN_FUZZ_JOBS:-$(nproc)}
declare -A pids
failed=()
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  echo "--- $t: ${secs} s over fuzz/corpus/${t#fuzz_} ($(ls "fuzz/corpus/${t#fuzz_}" | wc -l) seeds)"
  run_one "$t" &
  pids[$t]=$!
done
for t in "${targets[@]}"; do
  if ! wait "${pids[$t]}"; then failed+=("$t"); fi
done
for t in "${targets[@]}"; do
  echo "$t: $(grep -E '^stat::number_of_executed_units' "$art/$t.log" | awk '{print $2}') inputs run"
done
if ((${#failed[@]})); then
  for t in "${failed[@]}"; do
    echo "=== $t FAILED: the input is in $art (add it to fuzz/corpus/${t#fuzz_} once fixed)" >&2
    tail -n 60 "$art/$t.log" >&2
  done
  exit 1
fi
echo "fuzzing: no crash in ${#targets[@]} target(s), ${secs} s each"
