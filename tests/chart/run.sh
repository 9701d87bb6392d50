#!/usr/bin/env bash
# The chart tests, without a cluster or a helm binary (docs/install.md, "Chart tests"):
#  1. render charts/toposched with its default values and with each charts/toposched/ci/*.yaml
#     through tests/chart/render.go (text/template + sprig + helm's functions);
#  2. check every rendered object (tests/chart/check.py): YAML, metadata, labels and selectors,
#     the Kubernetes JSON schemas in ../shared/k8s-schemas (strict), RBAC == the API calls the
#     code makes, the scheduler/extender payloads, flags against `toposched --help`;
#  3. deploy/ == the chart rendered with defaults (scripts/render-manifests.sh), and the CRD
#     copies are identical.
# Installs nothing: needs Go (the machine's, /usr/local/go), golang-github-masterminds-sprig-dev, python3-yaml and
# python3-jsonschema (scripts/install-deps.sh lists them). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
schemas=${TOPOSCHED_K8S_SCHEMAS:-../shared/k8s-schemas}
toposched=${TOPOSCHED_BIN:-build/src/cmd/toposched}
die() { echo "chart tests: FAILED: $*" >&2; exit 1; }

command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || die "go not found: this machine kind ships Go at /usr/local/go (Debian's golang-go 1.19 is not used)"
[ -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || die "sprig sources missing (golang-github-masterminds-sprig-dev)"
python3 -c 'import yaml, jsonschema' 2>/dev/null || die "python3-yaml / python3-jsonschema missing"
[ -d "$schemas" ] || echo "chart tests: no Kubernetes JSON schemas at $schemas (set TOPOSCHED_K8S_SCHEMAS): schema check skipped"

work=$(mktemp -d)
SECONDS=0
trap 'rm -rf "$work"' EXIT
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="${GOCACHE:-$(go env GOCACHE 2>/dev/null || echo "$work/gocache")}" GOFLAGS= \
  go build -o "$work/render" tests/chart/render.go || die "tests/chart/render.go does not build"

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
  flags=(-chart charts/toposched -release "$release" -namespace toposched-system -notes "$work/$name.notes")
  [ -n "${values:-}" ] && flags+=(-f "$values")
  mode=$(sed -n 's/^schedulerMode: *\([a-z]*\).*/\1/p' charts/toposched/values.yaml ${values:-} | tail -1)
  {
    echo "# case: mode=$mode release=$release namespace=toposched-system values=${values:-}"
    "$work/render" "${flags[@]}"
  } >"$work/$name.yaml" 2>"$work/$name.err" || die "rendering $name: $(cat "$work/$name.err")"
  args+=("$work/$name.yaml:$work/$name.notes")
done

# A value that must refuse to render.
printf 'schedulerMode: kube\n' >"$work/bad.yaml"
if "$work/render" -chart charts/toposched -f "$work/bad.yaml" >/dev/null 2>"$work/bad.err"; then
  die "schedulerMode kube rendered; it must fail"
fi
grep -q 'schedulerMode must be' "$work/bad.err" || die "bad schedulerMode: unclear error: $(cat "$work/bad.err")"
printf 'extender: {tls: {enabled: true}}\n' >"$work/bad-tls.yaml"
if "$work/render" -chart charts/toposched -f "$work/bad-tls.yaml" >/dev/null 2>&1; then
  die "TLS without extender.tls.secretName rendered; it must fail"
fi
# Mutual TLS cannot work with Volcano (its client sends no certificate): refused, with the reason.
printf 'schedulerMode: volcano\nextender: {tls: {enabled: true, secretName: s, clientAuth: true}}\n' >"$work/bad-mtls.yaml"
if "$work/render" -chart charts/toposched -f "$work/bad-mtls.yaml" >/dev/null 2>"$work/bad-mtls.err"; then
  die "clientAuth in volcano mode rendered; it must fail"
fi
grep -q "Volcano's extender client sends no client certificate" "$work/bad-mtls.err" || die "clientAuth with volcano: unclear error"

echo "chart tests: rendered in ${SECONDS}s"
python3 tests/chart/check.py --schemas "$schemas" --toposched "$toposched" \
  --examples deploy/examples/*.yaml -- "${args[@]}" || die "object checks (above)"

echo "chart tests: checked in ${SECONDS}s"
TOPOSCHED_CHART_RENDER="$work/render" scripts/render-manifests.sh "$work/deploy" >/dev/null || die "scripts/render-manifests.sh"
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
