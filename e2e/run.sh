#!/usr/bin/env bash
# Runs the e2e suite by hand: builds the pinned peers into the cache (skipped when cached,
# e2e/build-peers.sh), then `go test ./...` in e2e/ against the toposched binary
# ($TOPOSCHED_BIN, default build/src/cmd/toposched; build the project first).
#
# usage: e2e/run.sh [go test flags...]      e.g. e2e/run.sh -run Helm -v
# env:   GO, TOPOSCHED_BIN, TOPOSCHED_SHARED_TOPOLOGIES, TOPOSCHED_E2E_CACHE,
#        TOPOSCHED_E2E_TIMEOUT (go test -timeout, default 20m)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GO=${GO:-}
if [[ -z "$GO" ]]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
export GO GOTOOLCHAIN=local

"$here/build-peers.sh"

bin=${TOPOSCHED_BIN:-$(dirname "$here")/build/src/cmd/toposched}
if [[ ! -x "$bin" ]]; then
  echo "e2e/run.sh: no toposched binary at $bin: build the project first (scripts/test.sh, or cmake --build build)" >&2
  exit 1
fi
# Absolute: the tests run in e2e/, a path relative to the repository root would not resolve.
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export TOPOSCHED_BIN=$bin

cd "$here"
start=$(date +%s)
set +e
"$GO" test -count=1 -timeout "${TOPOSCHED_E2E_TIMEOUT:-20m}" ./... "$@"
rc=$?
set -e
echo "e2e/run.sh: go test exited $rc after $(( $(date +%s) - start ))s (logs: $here/_output/)"
exit $rc
