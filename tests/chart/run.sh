#!/usr/bin/env bash
# The chart tests with the real helm (v4, built from the Go module proxy by e2e/build-peers.sh
# into ~/.cache/toposched-e2e; built here when missing). docs/install.md, "Chart tests":
#  1. render charts/toposched with its default values and with each charts/toposched/ci/*.yaml
#     (`helm template`; NOTES.txt through `helm install --dry-run=client`);
#  2. check every rendered object (tests/chart/check.py): YAML, metadata, labels and selectors,
#     the Kubernetes JSON schemas in ../shared/k8s-schemas (strict), RBAC == the API calls the
#     code makes, the scheduler/extender payloads, what each case renders between scheduler and
#     extender (the table `tls` below: the default is mutual TLS with generated certificates;
#     the Secrets, mounts and files wired, the certificates checked with openssl), flags
#     against `toposched --help`, the alerts'
#     and the dashboard's PromQL against the metrics the code registers
#     (tests/chart/monitoring.py, itself tested by monitoring_test.py), `promtool check rules`
#     and the alert unit tests tests/chart/alerts_test.yaml (promtool v3.16.0 from the Go module
#     proxy, scripts/promtool-path.sh; skipped, saying why, when it cannot be built);
#  3. deploy/ == the chart rendered with defaults (scripts/render-manifests.sh), and the CRD
#     copies are identical.
# helm lint, and installing, upgrading and removing the chart on a real API server, are in the
# e2e suite (e2e/helm_test.go). Needs python3-yaml and python3-jsonschema (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
schemas=${TOPOSCHED_K8S_SCHEMAS:-../shared/k8s-schemas}
toposched=${TOPOSCHED_BIN:-build/src/cmd/toposched}
die() { echo "chart tests: FAILED: $*" >&2; exit 1; }
export PYTHONDONTWRITEBYTECODE=1   # check.py imports monitoring.py: no __pycache__ in the tree

helm=$(scripts/helm-path.sh) || die "no helm (e2e/build-peers.sh helm failed)"
python3 -c 'import yaml, jsonschema' 2>/dev/null || die "python3-yaml / python3-jsonschema missing"
if ! promtool=$(scripts/promtool-path.sh); then
  echo "chart tests: SKIPPING promtool check rules and the alert unit tests: promtool could not be built (scripts/promtool-path.sh, above)"
  promtool=""
fi
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

# What each case must render between scheduler and extender (check.py --tls): off, generated-mtls
# (the chart's CA and certificates, mutual TLS), own-tls or own-mtls (the Secrets the values
# name). A values file without a line here fails the run.
declare -A tls=(
  [defaults]=generated-mtls [secondary-values]=generated-mtls [pd-cluster-values]=generated-mtls
  [monitoring-values]=generated-mtls [none-mtls-values]=generated-mtls
  [secondary-http-values]=off [none-values]=off [volcano-values]=off
  [tls-values]=own-tls [none-tls-values]=own-tls [volcano-tls-values]=own-tls [mtls-values]=own-mtls
)

# case name, release name, values files
cases=("defaults toposched")
for f in charts/toposched/ci/*.yaml; do
  name=$(basename "$f" .yaml)
  release=toposched
  [ "$name" = monitoring-values ] && release=gpu   # fullname becomes gpu-toposched
  cases+=("$name $release $f")
done

args=()
tls_args=()
for c in "${cases[@]}"; do
  read -r name release values <<<"$c"
  [ -n "${tls[$name]:-}" ] || die "case $name: no TLS expectation in tests/chart/run.sh's table 'tls'"
  tls_args+=(--tls "$name=${tls[$name]}")
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
# TLS values that must refuse to render, each with its reason (values, then the error's words).
refuse() {
  local values=$1 reason=$2
  printf '%b' "$values" >"$work/bad-tls.yaml"
  if render toposched -f "$work/bad-tls.yaml" >/dev/null 2>"$work/bad-tls.err"; then
    die "these values rendered; they must fail ($reason): $values"
  fi
  grep -qF "$reason" "$work/bad-tls.err" || die "values $values: unclear error, expected '$reason': $(cat "$work/bad-tls.err")"
}
# Mutual TLS cannot work with Volcano (its client sends no certificate).
refuse 'schedulerMode: volcano\nextender: {tls: {enabled: true, secretName: s, clientAuth: true}}\n' \
  "Volcano's extender client sends no client certificate"
# Volcano trusts only its image's system store: no generated CA.
refuse 'schedulerMode: volcano\nextender: {tls: {enabled: true}}\n' "Volcano's extender client trusts only the system store"
# A client certificate of yours cannot be signed by a CA the chart generates.
refuse 'extender: {tls: {clientSecretName: c}}\n' "extender.tls.clientSecretName needs extender.tls.secretName"
# Your own server Secret and mutual TLS: the client Secret is yours too.
refuse 'extender: {tls: {secretName: s, clientAuth: true}}\n' "extender.tls.clientSecretName is required"
refuse 'extender: {tls: {enabled: yes-please}}\n' "extender.tls.enabled must be auto, true or false"
refuse 'extender: {tls: {clientAuth: maybe}}\n' "extender.tls.clientAuth must be auto, true or false"
refuse 'extender: {tls: {generatedValidityDays: 0}}\n' "extender.tls.generatedValidityDays must be at least 1"

# Without a cluster (helm template), every render generates new certificates: nothing is baked
# into the chart, and two installs never share a key.
key_of() { sed -n '/name: toposched-extender-tls$/,/^---/s/^  tls.key: //p' "$1"; }
render toposched >"$work/again.yaml" 2>&1 || die "rendering the defaults again: $(cat "$work/again.yaml")"
[ -n "$(key_of "$work/defaults.yaml")" ] || die "the defaults render no key in Secret toposched-extender-tls"
[ "$(key_of "$work/defaults.yaml")" != "$(key_of "$work/again.yaml")" ] || die "two renders generated the same key"

# Monitoring switches: a disabled alert is left out, the dashboard carries the sidecar's label.
printf 'prometheusRule: {enabled: true, disabled: [ToposchedSlowFilter]}\ngrafanaDashboard: {enabled: true}\n' >"$work/mon.yaml"
render toposched -f "$work/mon.yaml" >"$work/mon.out" 2>&1 || die "rendering with prometheusRule.disabled: $(cat "$work/mon.out")"
grep -q 'alert: ToposchedNoLeader' "$work/mon.out" || die "prometheusRule.enabled rendered no ToposchedNoLeader"
! grep -q 'ToposchedSlowFilter' "$work/mon.out" || die "prometheusRule.disabled did not leave ToposchedSlowFilter out"
grep -q 'grafana_dashboard: "1"' "$work/mon.out" || die "the dashboard ConfigMap lacks the label grafana_dashboard: \"1\""
render toposched >"$work/plain.out" 2>&1 || die "rendering the defaults: $(cat "$work/plain.out")"
! grep -q -E 'kind: (PrometheusRule|ServiceMonitor)|grafana_dashboard' "$work/plain.out" || die "monitoring objects rendered by default"

echo "chart tests: rendered in ${SECONDS}s"
python3 tests/chart/monitoring_test.py >"$work/monitoring_test.out" 2>&1 || {
  cat "$work/monitoring_test.out" >&2
  die "tests/chart/monitoring_test.py (the PromQL checker)"
}
python3 tests/chart/check.py --schemas "$schemas" --toposched "$toposched" --promtool "$promtool" \
  --rule-tests monitoring-values=tests/chart/alerts_test.yaml "${tls_args[@]}" \
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
