#!/usr/bin/env bash
# The chart tests with the real helm (v4, built from the Go module proxy by e2e/build-peers.sh
# into ~/.cache/toposched-e2e; built here when missing). docs/install.md, "Chart tests":
#  1. render charts/toposched with its default values and with each charts/toposched/ci/*.yaml
#     (`helm template`; NOTES.txt through `helm install --dry-run=client`);
#  2. check every rendered object (tests/chart/check.py): YAML, metadata, labels and selectors,
#     the Kubernetes JSON schemas in ../shared/k8s-schemas (strict), RBAC == the API calls the
#     code makes, the scheduler/extender payloads, flags against `toposched --help`;
#  3. deploy/ == the chart rendered with defaults (scripts/render-manifests.sh), and the CRD
#     copies are identical.
# helm lint, and installing, upgrading and removing the chart on a real API server, are in the
# e2e suite (e2e/helm_test.go). Needs python3-yaml and python3-jsonschema (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
schemas=${TOPOSCHED_K8S_SCHEMAS:-../shared/k8s-schemas}
toposched=${TOPOSCHED_BIN:-build/src/cmd/toposched}
die() { echo "chart tests: FAILED: $*" >&2; exit 1; }

helm=$(scripts/helm-path.sh) || die "no helm (e2e/build-peers.sh helm failed)"
python3 -c 'import yaml, jsonschema' 2>/dev/null || die "python3-yaml / python3-jsonschema missing"
[ -d "$schemas" ] || echo "chart tests: no Kubernetes JSON schemas at $schemas (set TOPOSCHED_K8S_SCHEMAS): schema check skipped"

work=$(mktemp -d)
SECONDS=0
trap 'rm -rf "$work"' EXIT
# render RELEASE [helm flags...]: the manifests on stdout. notes RELEASE [flags...]: NOTES.txt.
render() { local release=$1; shift; "$helm" template "$release" charts/toposched -n toposched-system "$@"; }
notes() {
  local release=$1; shift
  "$helm" install "$release" charts/toposched -n toposched-system --dry-run=client "$@" | sed -n '/^NOTES:$/,$p' | sed 1d
}

# case name, release name, values files
cases=("defaults toposched")
for f in charts/toposched/ci/*.yaml; do
  name=$(basename "$f" .yaml)
  release=toposched
  [ "$name" = monitoring-values ] && release=gpu   # fullname becomes gpu-toposched
  cases+=("$name $release $f")
done

args=()
for c in "${cases[@]}"; do
  read -r name release values <<<"$c"
  flags=()
  [ -n "${values:-}" ] && flags+=(-f "$values")
  mode=$(sed -n 's/^schedulerMode: *\([a-z]*\).*/\1/p' charts/toposched/values.yaml ${values:-} | tail -1)
  {
    echo "# case: mode=$mode release=$release namespace=toposched-system values=${values:-}"
    render "$release" "${flags[@]}"
  } >"$work/$name.yaml" 2>"$work/$name.err" || die "rendering $name: $(cat "$work/$name.err")"
  notes "$release" "${flags[@]}" >"$work/$name.notes" 2>"$work/$name.err" || die "notes of $name: $(cat "$work/$name.err")"
  args+=("$work/$name.yaml:$work/$name.notes")
done

# A value that must refuse to render.
printf 'schedulerMode: kube\n' >"$work/bad.yaml"
if render toposched -f "$work/bad.yaml" >/dev/null 2>"$work/bad.err"; then
  die "schedulerMode kube rendered; it must fail"
fi
grep -q 'schedulerMode must be' "$work/bad.err" || die "bad schedulerMode: unclear error: $(cat "$work/bad.err")"
printf 'extender: {tls: {enabled: true}}\n' >"$work/bad-tls.yaml"
if render toposched -f "$work/bad-tls.yaml" >/dev/null 2>&1; then
  die "TLS without extender.tls.secretName rendered; it must fail"
fi
# Mutual TLS cannot work with Volcano (its client sends no certificate): refused, with the reason.
printf 'schedulerMode: volcano\nextender: {tls: {enabled: true, secretName: s, clientAuth: true}}\n' >"$work/bad-mtls.yaml"
if render toposched -f "$work/bad-mtls.yaml" >/dev/null 2>"$work/bad-mtls.err"; then
  die "clientAuth in volcano mode rendered; it must fail"
fi
grep -q "Volcano's extender client sends no client certificate" "$work/bad-mtls.err" || die "clientAuth with volcano: unclear error"

echo "chart tests: rendered in ${SECONDS}s"
python3 tests/chart/check.py --schemas "$schemas" --toposched "$toposched" \
  --examples deploy/examples/*.yaml -- "${args[@]}" || die "object checks (above)"

echo "chart tests: checked in ${SECONDS}s"
TOPOSCHED_HELM="$helm" scripts/render-manifests.sh "$work/deploy" >/dev/null || die "scripts/render-manifests.sh"
for f in rbac.yaml agent.yaml extender.yaml kube-scheduler/scheduler.yaml kube-scheduler/scheduler-config.yaml \
         volcano/volcano-scheduler.conf; do
  diff -u "deploy/$f" "$work/deploy/$f" >"$work/diff" || {
    head -40 "$work/diff" >&2
    die "deploy/$f differs from the chart rendered with defaults: run scripts/render-manifests.sh"
  }
done
for f in charts/toposched/crds/*.yaml; do
  cmp -s "$f" "deploy/crds/$(basename "$f")" || die "$f differs from deploy/crds/"
done
echo "chart tests: ${#cases[@]} renders checked, deploy/ in sync with the chart"
