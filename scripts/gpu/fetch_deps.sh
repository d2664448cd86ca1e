#!/usr/bin/env bash
# On a Debian 12 machine with a package registry: downloads the .deb files a GPU
# node without one lacks (Boost 1.74 with compiled Program_options, SQLite
# headers) into .deps/ (git-ignored); copy it to the GPU node's checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps && cd .deps
apt-get download libboost1.74-dev libboost-program-options1.74-dev \
  libboost-program-options1.74.0 libsqlite3-dev 2>&1 | grep -v "^W:" || true
ls -1 *.deb
