#!/usr/bin/env bash
# The main job: install what is missing, build, run the simulator on its embedded default
# cluster and workload (toposched vs first-fit, gpu-only and root-complex), then show what
# toposched sees on this machine and on the bundled 8-GPU example.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD_DIR=build ./scripts/build.sh -DTOPOSCHED_BUILD_TESTS=OFF -DTOPOSCHED_BUILD_BENCH=OFF
echo "== toposched simulate (embedded default: 240 nodes, 4000 pods)"
build/src/cmd/toposched simulate --no-progress
echo
echo "== toposched topo (this machine, live hwloc discovery)"
build/src/cmd/toposched topo
echo
echo "== toposched topo --input examples/hgx-h100-8gpu.nccl.xml"
build/src/cmd/toposched topo --input examples/hgx-h100-8gpu.nccl.xml
