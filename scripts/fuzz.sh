#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, -DKILN_FUZZ=ON with clang) and runs each
# over its committed corpus for a fixed time; fails on any crash, leak, UB,
# timeout or out-of-memory (libFuzzer exits non-zero and leaves crash-*/leak-*/
# timeout-* files in $KILN_FUZZ_ARTIFACTS). New inputs it finds go to a scratch
# copy of the corpus, not into the repository.
#
#   scripts/fuzz.sh [SECONDS_EACH (default 30)] [TARGET...]
# Environment: KILN_FUZZ_BUILD (default build-fuzz), KILN_FUZZ_ARTIFACTS
# (default a temporary directory), CC/CXX (default clang-15/clang++-15).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(fuzz_manifest fuzz_reply fuzz_rt_code_object fuzz_pkg_code_object)
build=${KILN_FUZZ_BUILD:-build-fuzz}
art=${KILN_FUZZ_ARTIFACTS:-$(mktemp -d)}
mkdir -p "$art"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CC=${CC:-clang-15} CXX=${CXX:-clang++-15} cmake -S . -B "$build" -DKILN_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=Fuzz ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/${t#fuzz_}
  work=$(mktemp -d)
  cp -r "$corpus/." "$work/"
  echo "--- $t: ${secs} s over $corpus ($(ls "$corpus" | wc -l) seeds)"
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: over 2 GB is a finding.
  if ! "$build/$t" "$work" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$art/$t-" -print_final_stats=1 2>"$art/$t.log"; then
    tail -n 60 "$art/$t.log"
    echo "$t: FAILED; the input is in $art (add it to $corpus once fixed)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$art/$t.log" | tr '\n' ' '
  echo
  rm -rf "$work"
done
echo "fuzzing: no crash in ${#targets[@]} target(s), ${secs} s each"
