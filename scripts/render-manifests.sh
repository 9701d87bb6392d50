#!/usr/bin/env bash
# Regenerates deploy/'s plain manifests from charts/toposched with its default values (plus
# createNamespace, so that `kubectl apply -f deploy/rbac.yaml` creates the namespace), release
# `toposched` in `toposched-system`. Usage: scripts/render-manifests.sh [OUTDIR]  (default deploy/)
# Renders with the real helm (scripts/helm-path.sh: built from the Go module proxy once) and
# splits with tests/chart/split_manifests.py (python3-yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-deploy}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

helm=${TOPOSCHED_HELM:-$(scripts/helm-path.sh)}
printf 'createNamespace: true\n' >"$work/plain.yaml"
printf 'schedulerMode: volcano\n' >"$work/volcano.yaml"
render=("$helm" template toposched charts/toposched -n toposched-system -f "$work/plain.yaml")
"${render[@]}" >"$work/default.yaml"
"${render[@]}" -f "$work/volcano.yaml" >"$work/volcano-render.yaml"
python3 tests/chart/split_manifests.py "$work/default.yaml" "$work/volcano-render.yaml" "$out"
echo "render-manifests: wrote $out/{rbac,agent,extender}.yaml, $out/kube-scheduler/, $out/volcano/volcano-scheduler.conf"
