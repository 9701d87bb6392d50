#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole suite, then rebuild with
# AddressSanitizer + UndefinedBehaviorSanitizer and run the suite again (the parsers' fuzz
# and malformed-input tests are the point of that second run), then replay every fuzz target's
# corpus (clang, libFuzzer).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)
# The folders include one another only along docs/architecture.md's dependency graph.
/usr/bin/python3 scripts/check-deps.py
# Every C++ source clang-format clean (.clang-format); scripts/format.sh formats them.
./scripts/format.sh --check

BUILD_DIR=build ./scripts/build.sh -DTOPOSCHED_BUILD_TESTS=ON -DTOPOSCHED_BUILD_BENCH=ON -DTOPOSCHED_SANITIZE=OFF
ctest --test-dir build --output-on-failure -j"$jobs"
# The Helm chart rendered without helm, every object checked, deploy/ in sync (tests/chart/).
TOPOSCHED_BIN=build/src/cmd/toposched tests/chart/run.sh
# The documentation's commands: every local `toposched ...` command in README.md and docs/*.md
# runs against this build (cluster-only ones are marked in the docs and skipped), every flag the
# docs name is checked against --help; about a minute (scripts/docs-test.py).
/usr/bin/python3 scripts/docs-test.py --bin build/src/cmd/toposched
# The real peers (e2e/README.md): etcd, kube-apiserver, kube-scheduler, helm and kwok built from
# the Go module proxy at pinned versions into ~/.cache/toposched-e2e (once; about 25 minutes on
# 2 cores the first time, cached after), then the Go tests against this build's binary.
TOPOSCHED_BIN=build/src/cmd/toposched e2e/run.sh

BUILD_DIR=build-asan BUILD_TYPE=Debug ./scripts/build.sh -DTOPOSCHED_BUILD_TESTS=ON -DTOPOSCHED_BUILD_BENCH=OFF \
  -DTOPOSCHED_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp":print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

# Every libFuzzer target (fuzz/) over its seed corpus and regression inputs, once each: a clang
# ASan+UBSan build of its own in build-fuzz/. Campaigns: scripts/fuzz.sh --runs N (fuzz/README.md).
./scripts/fuzz.sh --regress

# The benchmark binary must at least run (figures are in docs/benchmarks.md, not asserted).
build/bench/toposched_discovery_bench --benchmark_min_time=0.01 >/dev/null
build/bench/toposched_extender_load --iterations 20 --seconds 0.3 --clients 2 >/dev/null
build/bench/toposched_kube_bind --nodes 10 --pods 20 >/tmp/toposched_kube_bind.log 2>&1 || { cat /tmp/toposched_kube_bind.log; exit 1; }
echo "test.sh: all tests passed (release and ASan/UBSan builds, fuzz corpora, chart, e2e against the real peers)"
