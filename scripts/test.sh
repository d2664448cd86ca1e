#!/usr/bin/env bash
# README command (2): set up this machine, build, and run every test:
# GoogleTest (C++), pytest for the kernels and the worker (Triton interpreter on
# the CPU), the end-to-end tests of the `kiln` binary, and the Slurm scripts on a
# local single-node Slurm cluster (scripts/slurm/local-cluster.sh; needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
export KILN_BIN=$PWD/$BUILD/kiln
# setup.sh installs Open MPI: the MPI tests must run, never skip.
export KILN_REQUIRE_MPI=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$(mktemp -d)/triton-cache}

T0=$SECONDS
step() { echo; echo "=== $* === (at $((SECONDS - T0)) s)"; }

step "C++ unit tests (GoogleTest)"
(cd "$BUILD" && ctest --output-on-failure --no-tests=error -j2)

step "Python: kernels and worker (pytest, Triton interpreter)"
# pytest exits 5 when it collects nothing: with set -e that fails the run.
# Two processes (pytest-xdist): the interpreter's tests are CPU-bound and CI has 2 cores.
TRITON_INTERPRET=1 python3 -m pytest -q -n 2 --durations=8 tests/python

# One lane of CPU beside the e2e tests: the fuzzers, then the Slurm tests, one
# thing at a time. The e2e processes mostly wait (worker start-up, signals,
# leases, servers): on the 2-core CI machine they kept about one core busy
# (CPU 471 s over 470 s wall), so fuzzing (build + 4 x 30 s: 114 s) and Slurm
# (91 s), which had run after them on both cores, take the idle one instead.
# The lane's output is printed once it is done; it fails the run like any step.
# KILN_TEST_LANE=0 runs them after the e2e tests instead, one after another.
fuzz_secs=${KILN_FUZZ_SECONDS:-30}
lane() {  # lane JOBS: fuzz targets at once
  local t=$SECONDS
  echo "=== Fuzzing (libFuzzer: manifest, code objects, worker replies; ${fuzz_secs} s each, $1 at a time) ==="
  KILN_FUZZ_JOBS=$1 scripts/fuzz.sh "$fuzz_secs"
  echo "(fuzzing: $((SECONDS - t)) s)"
  t=$SECONDS
  echo "=== Slurm (a local single-node cluster: kiln.sbatch, array.sbatch + merge, nightly.sbatch) ==="
  # Required, never skipped here: setup.sh installs slurm-wlm and munge.
  KILN_REQUIRE_SLURM=1 python3 -m pytest -q tests/e2e/test_slurm.py
  echo "(Slurm: $((SECONDS - t)) s)"
}
lane_pid=
if [[ "${KILN_TEST_LANE:-1}" != 0 ]]; then
  step "Fuzzing, then Slurm, in the background (printed after the e2e tests)"
  lane_log=$(mktemp)
  # Its own process group (set -m), so that a failing run stops all of it.
  set -m
  # One fuzz target at a time, so that each gets most of a core beside the e2e
  # tests for its 30 s. The fuzz build keeps -j$(nproc): the compiler takes
  # whatever the e2e tests leave (at -j1 the build made the lane the longest path).
  lane 1 >"$lane_log" 2>&1 &
  lane_pid=$!
  set +m
  trap '[[ -n $lane_pid ]] && kill -- -"$lane_pid" 2>/dev/null; true' EXIT
fi

step "End to end (kiln binary, real catalog, real workers; nightly, merge, --shard)"
# Four pytest processes (KILN_E2E_JOBS, default 4; 1 for one), one test file
# each at a time (--dist loadfile: a file's module fixtures run once; ports are
# ephemeral, paths per test). The e2e tests mostly wait (worker start-up,
# signals, leases, servers): on the 2-core machine four processes kept about
# one core busy (CPU 471 s over 470 s). 2026-12-02: 280 tests in 470 s on four,
# against 746 s on two (the latter beside other builds) and 546 s on six.
e2e_jobs=()
[[ "${KILN_E2E_JOBS:-4}" -gt 1 ]] && e2e_jobs=(-n "${KILN_E2E_JOBS:-4}" --dist loadfile)
python3 -m pytest -q --durations=8 "${e2e_jobs[@]}" tests/e2e --ignore=tests/e2e/test_slurm.py \
  --ignore=tests/e2e/test_chaos.py

step "Chaos suite (kill -9 + resume, concurrent runs, corrupt catalog, full disk, hostile workers and catalogs)"
python3 -m pytest -q tests/e2e/test_chaos.py

if [[ -n $lane_pid ]]; then
  step "Fuzzing and Slurm (the background lane): waiting for it"
  lane_rc=0
  wait "$lane_pid" || lane_rc=$?
  lane_pid=
  cat "$lane_log"
  ((lane_rc == 0)) || { echo "the fuzzing/Slurm lane failed (exit $lane_rc)" >&2; exit "$lane_rc"; }
else
  step "Fuzzing and Slurm"
  lane "$(nproc)"
fi
echo
echo "all tests passed in $((SECONDS - T0)) s"
