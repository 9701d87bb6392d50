#!/usr/bin/env bash
# Installs the Debian bookworm packages toposched builds and tests with, if any is missing.
# Runs `apt-get update` once, and only when something has to be installed. Needs root
# (or sudo) on a Debian/Ubuntu machine; does nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  libboost-dev libboost-program-options-dev
  nlohmann-json3-dev libsimdjson-dev libcpprest-dev libspdlog-dev libfmt-dev
  # The subcommands' flags (src/cmd/flags.h): CLI11, header-only.
  libcli11-dev
  libhwloc-dev hwloc-nox libyaml-cpp-dev libssl-dev libre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # The chart tests' object checker (tests/chart/check.py). helm itself, and the e2e suite's
  # peers, are built by the machine's Go (/usr/local/go; not Debian's golang-go 1.19) from the Go
  # module proxy (e2e/build-peers.sh).
  python3 python3-yaml python3-jsonschema
  # Coverage-guided fuzzing (fuzz/, scripts/fuzz.sh): clang 14 and its runtime libraries
  # (libFuzzer, ASan, UBSan); gcc stays the compiler of every other build.
  clang libclang-rt-14-dev llvm
  # The C++ sources' format (scripts/format.sh --check, in scripts/test.sh).
  clang-format
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
