#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with a registry): downloads the .deb files the GPU
# machine lacks (Boost 1.74 with compiled Program_options, SQLite headers) into
# .deps/, which is git-ignored and carried to the device machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps && cd .deps
apt-get download libboost1.74-dev libboost-program-options1.74-dev \
  libboost-program-options1.74.0 libsqlite3-dev 2>&1 | grep -v "^W:" || true
ls -1 *.deb
