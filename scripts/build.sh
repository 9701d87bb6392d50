#!/usr/bin/env bash
# Configures and builds toposched into build/ (or $BUILD_DIR) with CMake + Ninja.
# Extra arguments go to CMake, e.g. scripts/build.sh -DTOPOSCHED_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
ninja -C "$build_dir"
