#!/usr/bin/env bash
# Formats every C++ source the repository tracks with clang-format (.clang-format: Google style,
# 110 columns), or with --check lists the files that are not formatted and fails. The README's
# test command runs the check, so an unformatted file fails CI; run this script to fix it.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
if ! command -v clang-format >/dev/null; then
  echo "format.sh: clang-format is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^e2e/')
if [ "$mode" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: ${#bad[@]} files are not clang-format clean (fix: scripts/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files clang-format clean"
elif [ -z "$mode" ]; then
  clang-format -i "${files[@]}"
else
  echo "usage: scripts/format.sh [--check]" >&2
  exit 2
fi
