#!/usr/bin/env bash
# README command (2): set up this machine, build, and run every test:
# GoogleTest (C++), pytest for the kernels and the worker (Triton interpreter on
# the CPU), and the end-to-end tests of the `kiln` binary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
export KILN_BIN=$PWD/$BUILD/kiln
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$(mktemp -d)/triton-cache}

step() { echo; echo "=== $* ==="; }

step "C++ unit tests (GoogleTest)"
(cd "$BUILD" && ctest --output-on-failure --no-tests=error -j2)

step "Python: kernels and worker (pytest, Triton interpreter)"
# pytest exits 5 when it collects nothing: with set -e that fails the run.
TRITON_INTERPRET=1 python3 -m pytest -q tests/python

step "End to end (kiln binary, real catalog, real workers)"
python3 -m pytest -q tests/e2e
echo
echo "all tests passed"
