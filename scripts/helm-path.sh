#!/usr/bin/env bash
# Prints the path of the real helm the chart tests and scripts/render-manifests.sh use: $TOPOSCHED_HELM,
# else the one e2e/build-peers.sh builds from the Go module proxy (pinned in e2e/tools/helm/go.mod)
# into ~/.cache/toposched-e2e, building it first when missing (a few minutes, once).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${TOPOSCHED_HELM:-}" ]; then echo "$TOPOSCHED_HELM"; exit 0; fi
cache=${TOPOSCHED_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toposched-e2e}
version=$(sed -n 's|^[[:space:]]*helm.sh/helm/v4 \(v[0-9.]*\).*|\1|p' e2e/tools/helm/go.mod | head -1)
[ -n "$version" ] || { echo "helm-path: no helm.sh/helm/v4 version in e2e/tools/helm/go.mod" >&2; exit 1; }
bin=$cache/helm-$version/helm
if [ ! -x "$bin" ]; then
  command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
  e2e/build-peers.sh helm >&2
fi
[ -x "$bin" ] || { echo "helm-path: $bin missing after e2e/build-peers.sh helm" >&2; exit 1; }
echo "$bin"
