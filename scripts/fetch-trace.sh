#!/usr/bin/env bash
# Downloads the Alibaba GPU cluster trace v2023 (the "openb" trace that `toposched simulate
# --trace DIR` replays) into DIR: one node list and four pod lists, CSV, about 2 MB in all.
#
#   scripts/fetch-trace.sh data/alibaba-gpu-v2023
#   build/src/cmd/toposched simulate --trace data/alibaba-gpu-v2023 --variants default --seeds 42
#
# Source: github.com/alibaba/clusterdata, folder cluster-trace-gpu-v2023/csv, at the commit
# pinned below (the files toposched's figures were measured on). Terms: the Alibaba Cluster
# Trace Program lets anyone use the traces for research or study (its README); the repository
# has no other licence. Each file is checked against its SHA-256 before it is kept, so a
# changed or truncated download never lands in DIR. Needs curl or wget and HTTPS access to
# raw.githubusercontent.com. Exit codes: 0 done, 1 a download or a checksum failed, 2 usage.
set -euo pipefail

commit=7a6c496e4f4b6ce6150be8f881cb051bf2abff42
base=${TOPOSCHED_TRACE_URL:-https://raw.githubusercontent.com/alibaba/clusterdata/$commit/cluster-trace-gpu-v2023/csv}
files=(
  "openb_node_list_gpu_node.csv 2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5"
  "openb_pod_list_default.csv 1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"
  "openb_pod_list_gpushare40.csv d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40"
  "openb_pod_list_multigpu20.csv d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01"
  "openb_pod_list_cpu050.csv 747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e"
)

die() { echo "fetch-trace: $*" >&2; exit "${2:-1}"; }

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  echo "usage: scripts/fetch-trace.sh DIR   (for example data/alibaba-gpu-v2023)" >&2
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
dir=$1
if command -v curl >/dev/null; then
  fetch() { curl --fail --silent --show-error --location --retry 2 --connect-timeout 20 -o "$2" "$1"; }
elif command -v wget >/dev/null; then
  fetch() { wget --quiet --tries=3 --timeout=20 -O "$2" "$1"; }
else
  die "neither curl nor wget is installed (apt-get install curl)"
fi
command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"
mkdir -p "$dir" || die "cannot create $dir"

for entry in "${files[@]}"; do
  read -r name sum <<<"$entry"
  if [[ -f $dir/$name ]] && echo "$sum  $dir/$name" | sha256sum --check --status; then
    echo "fetch-trace: $dir/$name already there"
    continue
  fi
  tmp=$dir/.$name.part
  if ! fetch "$base/$name" "$tmp"; then
    rm -f "$tmp"
    die "cannot download $base/$name (no network, or GitHub unreachable from here?); nothing of it was kept"
  fi
  if ! echo "$sum  $tmp" | sha256sum --check --status; then
    rm -f "$tmp"
    die "$name: the download's SHA-256 is not $sum (the file at $base changed, or a proxy altered it)"
  fi
  mv "$tmp" "$dir/$name"
  echo "fetch-trace: $dir/$name"
done
echo "fetch-trace: the trace is in $dir; run: toposched simulate --trace $dir"
