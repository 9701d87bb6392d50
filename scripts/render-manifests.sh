#!/usr/bin/env bash
# Regenerates deploy/'s plain manifests from charts/toposched with its default values (plus
# createNamespace, so that `kubectl apply -f deploy/rbac.yaml` creates the namespace), release
# `toposched` in `toposched-system`. Usage: scripts/render-manifests.sh [OUTDIR]  (default deploy/)
# Needs Go (the machine's, /usr/local/go), golang-github-masterminds-sprig-dev and python3-yaml (scripts/install-deps.sh);
# builds tests/chart/render.go from Debian's Go sources, no network.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-deploy}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

render_bin=${TOPOSCHED_CHART_RENDER:-}   # a prebuilt tests/chart/render.go (tests/chart/run.sh passes its own)
if [ -z "$render_bin" ]; then
  render_bin=$work/render
  GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="${GOCACHE:-$(go env GOCACHE 2>/dev/null || echo "$work/gocache")}" GOFLAGS= \
    go build -o "$render_bin" tests/chart/render.go
fi
printf 'createNamespace: true\n' >"$work/plain.yaml"
printf 'schedulerMode: volcano\n' >"$work/volcano.yaml"
render=("$render_bin" -chart charts/toposched -release toposched -namespace toposched-system -release-service kubectl
        -f "$work/plain.yaml")
"${render[@]}" >"$work/default.yaml"
"${render[@]}" -f "$work/volcano.yaml" >"$work/volcano-render.yaml"
python3 tests/chart/split_manifests.py "$work/default.yaml" "$work/volcano-render.yaml" "$out"
echo "render-manifests: wrote $out/{rbac,agent,extender}.yaml, $out/kube-scheduler/, $out/volcano/volcano-scheduler.conf"
