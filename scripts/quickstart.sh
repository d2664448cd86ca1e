#!/usr/bin/env bash
# README command (1): set up this machine, build, and run Kiln's main job on its
# embedded defaults — jobs/quickstart.yaml on this machine's device (a GPU if
# present, else the Triton interpreter on the CPU) — then print `kiln best`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export KILN_CATALOG=${KILN_CATALOG:-$PWD/kiln.db}
KILN=build/kiln
WORKERS=${KILN_WORKERS:-$(nproc)}
$KILN submit jobs/quickstart.yaml
$KILN run --workers "$WORKERS"
$KILN status
echo
$KILN best
