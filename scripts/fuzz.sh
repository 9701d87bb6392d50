#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan, in build-fuzz/ or $FUZZ_BUILD_DIR)
# and runs them. fuzz/README.md describes the targets, their seeds and their invariants.
#
#   scripts/fuzz.sh --regress [TARGET...]         every input of each target's seed corpus, once
#   scripts/fuzz.sh --runs N [TARGET...]          N executions per target (coverage-guided)
#   scripts/fuzz.sh --seconds N [TARGET...]       N seconds per target
#   scripts/fuzz.sh --build-only | --list
#
# Targets run one after another, one process each (2-core machines stay usable; wrap in
# `nice -n 10` for long campaigns). Per target it prints executions, coverage (libFuzzer's cov =
# edges, ft = features), exec/s, wall time and findings; the exit status is non-zero when any
# target found something. A finding's input is kept as
# $FUZZ_WORK/<target>/artifacts/{crash,leak,timeout,oom}-<sha1>; reproduce it with
# build-fuzz/fuzz/<target>_fuzz FILE, fix it, and add the input to fuzz/corpus/<target>/.
#
# Seeds, assembled at run time into $FUZZ_WORK/<target>/seeds: fuzz/corpus/<target>/ (small
# inputs made for the target, and every regression input), the repository's examples, and the
# real topology exports in ../shared/topologies when that folder exists (never copied into the
# repository). A campaign's new inputs go to $FUZZ_WORK/<target>/corpus and seed the next one.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=runs
amount=1000000
build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) mode=runs; amount=$2; shift 2 ;;
    --seconds) mode=seconds; amount=$2; shift 2 ;;
    --regress) mode=regress; shift ;;
    --build-only) mode=none; shift ;;
    --no-build) build=0; shift ;;
    --list) mode=list; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

all_targets=(wire_kube wire_volcano http_request extender_service pod_request topology_json kube_objects
  allocation hami hwloc_xml nccl_xml input_format node_document journal scheduler_config hypernode)
if [ "$mode" = list ]; then printf '%s\n' "${all_targets[@]}"; exit 0; fi
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target $t (--list)" >&2; exit 2; }
done

build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
work=${FUZZ_WORK:-$build_dir/fuzz-work}
shared=../shared/topologies

if [ "$build" = 1 ]; then
  # -O1 and line tables only, as OSS-Fuzz builds: faster to compile, still symbolized.
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" -DTOPOSCHED_BUILD_FUZZ=ON \
    -DTOPOSCHED_BUILD_TESTS=OFF -DTOPOSCHED_BUILD_BENCH=OFF >/dev/null
  ninja -C "$build_dir" $(printf '%s_fuzz ' "${targets[@]}") | grep -v '^\[' || true
  for t in "${targets[@]}"; do [ -x "$build_dir/fuzz/${t}_fuzz" ] || { echo "fuzz.sh: build failed" >&2; exit 1; }; done
fi
[ "$mode" = none ] && exit 0

# Repository files and shared exports that seed each target, beyond fuzz/corpus/<target>/.
extra_seeds() {
  case "$1" in
    wire_kube | extender_service) ls examples/extender/*.json ;;
    pod_request) ls examples/pods/*.json ;;
    node_document) ls examples/cluster/nodes/*.json ;;
    allocation) ls examples/allocated-half.json ;;
    nccl_xml) ls examples/*.nccl.xml; ls "$shared"/*.nccl.xml 2>/dev/null || true ;;
    hwloc_xml) ls "$shared"/*hwloc*.xml 2>/dev/null || true ;;
    input_format) ls examples/*.nccl.xml; ls "$shared"/*.xml 2>/dev/null || true ;;
    scheduler_config) ls examples/config/*.yaml ;;
  esac
}

# The dictionaries each target mutates with (fuzz/dict/).
dicts_for() {
  case "$1" in
    http_request) echo http ;;
    hwloc_xml | nccl_xml) echo xml ;;
    input_format) echo "xml json toposched_json" ;;
    scheduler_config) echo yaml ;;
    hami) echo "json toposched_json" ;;
    *) echo "json toposched_json" ;;
  esac
}

prepare() {
  local t=$1 dir=$work/$1
  rm -rf "$dir/seeds" "$dir/artifacts"
  mkdir -p "$dir/seeds" "$dir/corpus" "$dir/artifacts"
  if [ -d "fuzz/corpus/$t" ]; then cp fuzz/corpus/"$t"/* "$dir/seeds/" 2>/dev/null || true; fi
  local f
  while IFS= read -r f; do [ -n "$f" ] && cp "$f" "$dir/seeds/"; done < <(extra_seeds "$t")
  if [ "$t" = scheduler_config ]; then
    # The chart-rendered config, as deploy/extender.yaml's ConfigMap carries it.
    python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open("deploy/extender.yaml")):
    if d and d.get("kind") == "ConfigMap" and "config.yaml" in d.get("data", {}):
        sys.stdout.write(d["data"]["config.yaml"])' >"$dir/seeds/deploy-extender-config.yaml"
  fi
  : >"$dir/dict"
  local d
  for d in $(dicts_for "$t"); do cat "fuzz/dict/$d.dict" >>"$dir/dict"; done
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

failed=()
summary=()
for t in "${targets[@]}"; do
  prepare "$t"
  dir=$work/$t
  log=$dir/log.txt
  bin=$build_dir/fuzz/${t}_fuzz
  seeds=$(ls "$dir/seeds" | wc -l)
  # -timeout: an input that runs 10 s is a hang, except for hwloc_xml: ParseHwlocXml stops an
  # import at 60 s itself, and hwloc 2.9 takes that long on some hostile files (lstopo takes 27 s
  # on one the campaign of 2026-12-04 found): what production bounds is not a finding.
  # -rss_limit_mb (and malloc_limit_mb, which follows it): an allocation over 2 GiB is an
  # unbounded allocation.
  timeout=10
  [ "$t" = hwloc_xml ] && timeout=90
  common=(-timeout=$timeout -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/" -print_final_stats=1)
  start_ms=$(($(date +%s%N) / 1000000))
  rc=0
  case "$mode" in
    regress) "$bin" "${common[@]}" -runs=0 "$dir/seeds" >"$log" 2>&1 || rc=$? ;;
    runs) "$bin" "${common[@]}" -dict="$dir/dict" -runs="$amount" "$dir/corpus" "$dir/seeds" >"$log" 2>&1 || rc=$? ;;
    seconds) "$bin" "${common[@]}" -dict="$dir/dict" -max_total_time="$amount" "$dir/corpus" "$dir/seeds" >"$log" 2>&1 || rc=$? ;;
  esac
  wall_ms=$(($(date +%s%N) / 1000000 - start_ms))
  wall=$((wall_ms / 1000)).$((wall_ms % 1000 / 100))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  # A finding is a crash, leak, timeout or out-of-memory input; libFuzzer's slow-unit-* files
  # (an input over -report_slow_units, 10 s, but under -timeout) are listed, not counted, as
  # OSS-Fuzz does.
  findings=$(ls "$dir/artifacts" | grep -cv '^slow-unit-' || true)
  slow=$(ls "$dir/artifacts" | grep -c '^slow-unit-' || true)
  result=ok
  [ "$slow" -gt 0 ] && result="ok ($slow slow inputs in $dir/artifacts)"
  if [ "$rc" -ne 0 ] || [ "$findings" -gt 0 ]; then
    result="FOUND (exit $rc): $(ls "$dir/artifacts" | tr '\n' ' ')see $log"
    failed+=("$t")
  fi
  line=$(printf '%-17s seeds %4s  execs %9s  cov %6s  ft %7s  exec/s %6s  wall %7ss  %s' \
    "$t" "$seeds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${speed:-?}" "$wall" "$result")
  echo "$line"
  summary+=("$line")
  if [[ "$result" == FOUND* ]]; then grep -E -A30 '^==[0-9]+==|invariant failed|runtime error|^SUMMARY' "$log" | head -60; fi
done

label=$mode; [ "$mode" = regress ] || label="$mode $amount"
echo "fuzz.sh ($label): ${#targets[@]} targets, ${#failed[@]} with findings${failed[*]:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
