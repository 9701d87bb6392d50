#!/usr/bin/env bash
# Prints the path of promtool (Prometheus' rule checker and rule unit-test runner) for the chart
# tests: $TOPOSCHED_PROMTOOL, else the one e2e/build-peers.sh builds from the Go module proxy
# (pinned in e2e/tools/promtool/go.mod) into ~/.cache/toposched-e2e, building it first when
# missing (a minute or two, once). Exits 1, saying why on stderr, when it cannot be had: the
# caller skips the promtool checks then.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${TOPOSCHED_PROMTOOL:-}" ]; then echo "$TOPOSCHED_PROMTOOL"; exit 0; fi
cache=${TOPOSCHED_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toposched-e2e}
version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2; exit }' e2e/tools/promtool/go.mod)
[ -n "$version" ] || { echo "promtool-path: no github.com/prometheus/prometheus version in e2e/tools/promtool/go.mod" >&2; exit 1; }
bin=$cache/promtool-$version/promtool
if [ ! -x "$bin" ]; then
  command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
  e2e/build-peers.sh promtool >&2 || { echo "promtool-path: e2e/build-peers.sh promtool failed (above)" >&2; exit 1; }
fi
[ -x "$bin" ] || { echo "promtool-path: $bin missing after e2e/build-peers.sh promtool" >&2; exit 1; }
echo "$bin"
