#!/usr/bin/env bash
# Regenerates the pictures in docs/figures/ with the built binary (scripts/build.sh first):
#
#   docs/figures/placements.svg   toposched against first-fit on a small slice of the embedded
#                                 default (40 nodes, 600 pods, seed 1): every node at the end
#                                 (one square per GPU: free, whole, shared; a green frame where
#                                 an aligned 8-GPU slot is still free) and the GPU->NIC class
#                                 histogram of the placed pods. The README shows it.
#
# Placements are deterministic for a seed; the decision times printed in the picture's table
# are measured, so they differ from run to run. usage: scripts/figures.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${TOPOSCHED_BIN:-build/src/cmd/toposched}}
[[ -x $bin ]] || { echo "figures: $bin is not built (run scripts/build.sh, or pass the binary)" >&2; exit 1; }
mkdir -p docs/figures
"$bin" simulate --nodes 40 --pods 600 --seed 1 --policies toposched,first-fit --no-progress \
  --svg docs/figures/placements.svg >/dev/null
echo "figures: docs/figures/placements.svg ($(wc -c <docs/figures/placements.svg) bytes)"
