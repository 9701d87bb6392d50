#!/usr/bin/env bash
# Builds the real upstream peers the e2e suite runs toposched against, from the Go module proxy,
# at the versions pinned in e2e/tools/*/go.mod (+ go.sum), into a cache outside the tree:
#
#   ${TOPOSCHED_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toposched-e2e}/<peer>-<version>/
#
# A peer whose directory is complete (it holds .complete) is not rebuilt: the cache is reused
# across runs and checkouts. Each build goes to a temporary directory first and is renamed into
# place only when every binary of the peer built, so an interrupted build never looks complete.
#
# usage: e2e/build-peers.sh [PEER...]     (default: etcd kube helm kwok prometheus-operator volcano hami;
#                                          PEER in those and promtool)
# env:   GO (default: go on PATH, else /usr/local/go/bin/go), TOPOSCHED_E2E_CACHE,
#        TOPOSCHED_SHARED_PEERS (default: ../shared/peers next to the repository)
#
# volcano is not on the module proxy (it answers 403 for volcano.sh/volcano and volcano.sh/apis):
# it builds from the upstream source tree in $TOPOSCHED_SHARED_PEERS/volcano-<tag> (read-only;
# `go build` writes only to GOCACHE and GOMODCACHE, every dependency comes from the proxy and is
# pinned by that tree's own go.sum), into <cache>/volcano-<tag>/. The tests install Volcano with helm
# from that tree's own chart (installer/helm/chart/volcano), in place.
#
# hami is not on the module proxy either (403 for github.com/Project-HAMi/HAMi): its scheduler
# (hami-scheduler) builds from $TOPOSCHED_SHARED_PEERS/hami-<tag> as volcano does, with cgo (its
# go-nvml binding; no NVIDIA library is needed to build or to run it without GPUs), and
# hami-peer, the module e2e/tools/hami (HAMi's own decoders, node registration and device
# plugin side of a bind, for the tests), builds from a copy of that module whose replace line
# names the same tree, into <cache>/hami-<tag>/; hami-peer is rebuilt when e2e/tools/hami changes
# (its files' hash, in .tool-hash, is what the tests check).
#
# promtool is not a peer of the e2e suite: tests/chart/run.sh checks the chart's PrometheusRule
# with it (scripts/promtool-path.sh builds it on demand, and the check is skipped, saying why,
# when it cannot be built). prometheus-operator builds nothing: it is the Prometheus Operator's
# CRDs (ServiceMonitor, PrometheusRule) from the pinned module, which the e2e control plane
# installs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOPOSCHED_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toposched-e2e}

GO=${GO:-}
if [[ -z "$GO" ]]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else echo "build-peers: no Go toolchain found (need go on PATH or /usr/local/go/bin/go)" >&2; exit 1
  fi
fi
# Never let `go` fetch a newer toolchain behind our back: an old go must fail here, clearly.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

# version_of DIR MODULE: the version DIR/go.mod requires of MODULE.
version_of() {
  local v
  v=$(awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == "require" ? $3 : $2); exit }' "$1/go.mod")
  [[ -n "$v" ]] || { echo "build-peers: $1/go.mod does not require $2" >&2; exit 1; }
  echo "$v"
}

# build_peer NAME MODULE LDFLAGS PKG:OUT... (run in e2e/tools/NAME; $tags: go build -tags)
build_peer() {
  local name=$1 module=$2 ldflags=$3; shift 3
  local dir="$here/tools/$name" version dest tmp start secs spec pkg out
  version=$(version_of "$dir" "$module")
  dest="$cache/$name-$version"
  if [[ -f "$dest/.complete" ]]; then
    # A binary added to a peer after its version was cached (kubectl, issue 17;
    # kube-controller-manager, issue 46) is built alone into the same directory; the others are
    # not rebuilt.
    local missing=()
    for spec in "$@"; do [[ -x "$dest/${spec##*:}" ]] || missing+=("$spec"); done
    if [[ ${#missing[@]} -eq 0 ]]; then
      echo "build-peers: $name $version: cached in $dest"
      return 0
    fi
    for spec in "${missing[@]}"; do
      pkg=${spec%%:*}; out=${spec##*:}
      echo "build-peers: $name $version: cached, but without $out: building $pkg ..."
      if ! (cd "$dir" && "$GO" build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$dest/.$out.tmp" "$pkg"); then
        rm -f "$dest/.$out.tmp"
        echo "build-peers: $name $version: go build $pkg failed" >&2
        return 1
      fi
      mv "$dest/.$out.tmp" "$dest/$out"
    done
    return 0
  fi
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.$name-$version.XXXXXX")
  echo "build-peers: $name $version: building $* ..."
  start=$(date +%s)
  for spec in "$@"; do
    pkg=${spec%%:*}; out=${spec##*:}
    if ! (cd "$dir" && "$GO" build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$tmp/$out" "$pkg"); then
      rm -rf "$tmp"
      echo "build-peers: $name $version: go build $pkg failed" >&2
      return 1
    fi
  done
  if [[ "$name" == kwok ]]; then
    # kwok's own stage definitions (node: initialize + heartbeat; pod: ready/complete/delete),
    # from the same module version, as `kwokctl` configures a cluster.
    local src
    src=$(cd "$dir" && "$GO" list -m -f '{{.Dir}}' "$module")
    mkdir -p "$tmp/stages"
    cp "$src"/kustomize/stage/node/fast/node-initialize.yaml "$src"/kustomize/stage/node/heartbeat/node-heartbeat.yaml \
       "$src"/kustomize/stage/pod/fast/pod-ready.yaml "$src"/kustomize/stage/pod/fast/pod-complete.yaml \
       "$src"/kustomize/stage/pod/fast/pod-delete.yaml "$tmp/stages/"
    chmod -R u+w "$tmp/stages"
  fi
  secs=$(( $(date +%s) - start ))
  echo "$version built in ${secs}s with $("$GO" env GOVERSION)" > "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "build-peers: $name $version: built in ${secs}s -> $dest"
}

# build_source_peer NAME SRC TAG LDFLAGS PKG:OUT...: like build_peer, from the source tree SRC
# (a module of its own, its go.sum complete) instead of a module of e2e/tools; keyed by TAG.
build_source_peer() {
  local name=$1 src=$2 tag=$3 ldflags=$4; shift 4
  local dest="$cache/$name-$tag" tmp start secs spec pkg out missing=()
  if [[ ! -f "$src/go.mod" ]]; then
    echo "build-peers: $name $tag: no source tree at $src (set TOPOSCHED_SHARED_PEERS)" >&2
    return 1
  fi
  if [[ -f "$dest/.complete" ]]; then
    for spec in "$@"; do [[ -x "$dest/${spec##*:}" ]] || missing+=("$spec"); done
    if [[ ${#missing[@]} -eq 0 ]]; then
      echo "build-peers: $name $tag: cached in $dest"
      return 0
    fi
    rm -f "$dest/.complete"   # rebuilt whole below: a partial peer is never used
  fi
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.$name-$tag.XXXXXX")
  echo "build-peers: $name $tag: building $* from $src ..."
  start=$(date +%s)
  for spec in "$@"; do
    pkg=${spec%%:*}; out=${spec##*:}
    if ! (cd "$src" && CGO_ENABLED=${cgo:-0} "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp/$out" "$pkg"); then
      rm -rf "$tmp"
      echo "build-peers: $name $tag: go build $pkg failed" >&2
      return 1
    fi
  done
  secs=$(( $(date +%s) - start ))
  echo "$tag built in ${secs}s with $("$GO" env GOVERSION) from $src" > "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "build-peers: $name $tag: built in ${secs}s -> $dest"
}

# fetch_crds NAME MODULE SUBDIR FILE...: FILEs of the pinned MODULE's SUBDIR into <cache>/NAME-<version>/crds/
# (the module comes from the proxy into the module cache; nothing is built).
fetch_crds() {
  local name=$1 module=$2 sub=$3; shift 3
  local dir="$here/tools/$name" version dest tmp src f
  version=$(version_of "$dir" "$module")
  dest="$cache/$name-$version"
  if [[ -f "$dest/.complete" ]]; then
    echo "build-peers: $name $version: cached in $dest"
    return 0
  fi
  src=$(cd "$dir" && "$GO" mod download "$module" && "$GO" list -m -f '{{.Dir}}' "$module")
  if [[ -z "$src" || ! -d "$src/$sub" ]]; then
    echo "build-peers: $name $version: go mod download $module gave no $sub" >&2
    return 1
  fi
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.$name-$version.XXXXXX")
  mkdir -p "$tmp/crds"
  for f in "$@"; do
    cp "$src/$sub/$f" "$tmp/crds/" || { rm -rf "$tmp"; echo "build-peers: $name $version: no $sub/$f" >&2; return 1; }
  done
  chmod -R u+w "$tmp/crds"
  echo "$version: $* from $module $sub" > "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "build-peers: $name $version: CRDs -> $dest/crds"
}

kube_ldflags() {
  local v=$1 major minor
  major=$(echo "${v#v}" | cut -d. -f1); minor=$(echo "${v#v}" | cut -d. -f2)
  local f="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    f+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

shared_peers=${TOPOSCHED_SHARED_PEERS:-$(dirname "$(dirname "$here")")/shared/peers}
volcano_tag=v1.13.3
hami_tag=v2.10.0

# tool_hash: what hami-peer is built from (the tests compare it with <cache>/hami-<tag>/.tool-hash).
tool_hash() { cat "$here/tools/hami/main.go" "$here/tools/hami/go.mod" "$here/tools/hami/go.sum" | sha256sum | cut -c1-16; }

# build_hami_peer: hami-peer into <cache>/hami-<tag>/ from a copy of e2e/tools/hami whose replace
# line names $shared_peers/hami-<tag> (the checked-in one assumes ../shared next to the clone).
build_hami_peer() {
  local dest="$cache/hami-$hami_tag" hash tmp start
  hash=$(tool_hash)
  if [[ -x "$dest/hami-peer" && "$(cat "$dest/.tool-hash" 2>/dev/null)" == "$hash" ]]; then
    echo "build-peers: hami-peer $hash: cached in $dest"
    return 0
  fi
  tmp=$(mktemp -d "$cache/.hami-peer.XXXXXX")
  cp "$here/tools/hami/main.go" "$here/tools/hami/go.mod" "$here/tools/hami/go.sum" "$tmp/"
  start=$(date +%s)
  if ! (cd "$tmp" && "$GO" mod edit -replace "github.com/Project-HAMi/HAMi=$shared_peers/hami-$hami_tag" &&
        CGO_ENABLED=1 "$GO" build -trimpath -ldflags "-s -w" -o "$tmp/hami-peer" .); then
    rm -rf "$tmp"
    echo "build-peers: hami-peer: go build failed" >&2
    return 1
  fi
  mv "$tmp/hami-peer" "$dest/hami-peer"
  echo "$hash" > "$dest/.tool-hash"
  rm -rf "$tmp"
  echo "build-peers: hami-peer $hash: built in $(( $(date +%s) - start ))s -> $dest"
}

peers=("$@")
defaults=0
if [[ ${#peers[@]} -eq 0 ]]; then
  peers=(etcd kube helm kwok prometheus-operator volcano hami)
  defaults=1
fi

# The newest `go` directive among the test module and the requested peers' modules is the
# minimum toolchain (promtool's, 1.26.7, binds only when promtool is asked for).
mods=("$here/go.mod")
for p in "${peers[@]}"; do
  case "$p" in
    kube|etcd|helm|kwok|prometheus-operator|promtool) mods+=("$here/tools/$p/go.mod") ;;
    volcano) [[ -f "$shared_peers/volcano-$volcano_tag/go.mod" ]] && mods+=("$shared_peers/volcano-$volcano_tag/go.mod") ;;
    hami) [[ -f "$shared_peers/hami-$hami_tag/go.mod" ]] && mods+=("$shared_peers/hami-$hami_tag/go.mod" "$here/tools/hami/go.mod") ;;
    *) echo "build-peers: unknown peer '$p' (kube etcd helm kwok prometheus-operator volcano hami promtool)" >&2; exit 2 ;;
  esac
done
need=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "${mods[@]}" | sort -V | tail -1)
have=$("$GO" env GOVERSION | sed 's/^go//; s/[^0-9.].*$//')
if [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]]; then
  echo "build-peers: $GO is go$have, but ${peers[*]} need go >= $need (e2e/go.mod, e2e/tools/*/go.mod)." >&2
  echo "build-peers: install Go $need or newer (e.g. at /usr/local/go) and put it first on PATH." >&2
  exit 1
fi

total_start=$(date +%s)
for p in "${peers[@]}"; do
  case "$p" in
    kube)
      v=$(version_of "$here/tools/kube" k8s.io/kubernetes)
      build_peer kube k8s.io/kubernetes "$(kube_ldflags "$v")" \
        k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler:kube-scheduler \
        k8s.io/kubernetes/cmd/kubectl:kubectl k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager ;;
    etcd)
      build_peer etcd go.etcd.io/etcd/server/v3 "-s -w" go.etcd.io/etcd/server/v3:etcd ;;
    helm)
      v=$(version_of "$here/tools/helm" helm.sh/helm/v4)
      build_peer helm helm.sh/helm/v4 "-s -w -X helm.sh/helm/v4/internal/version.version=$v" helm.sh/helm/v4/cmd/helm:helm ;;
    kwok)
      v=$(version_of "$here/tools/kwok" sigs.k8s.io/kwok)
      build_peer kwok sigs.k8s.io/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$v" sigs.k8s.io/kwok/cmd/kwok:kwok ;;
    prometheus-operator)
      fetch_crds prometheus-operator github.com/prometheus-operator/prometheus-operator example/prometheus-operator-crd \
        monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml ;;
    promtool)
      # Service discovery is compiled out (remove_all_sd): promtool checks and tests rules here,
      # and the cloud SDKs would triple the build. Stamped with Prometheus' own version (VERSION).
      v=$(cd "$here/tools/promtool" && "$GO" mod download github.com/prometheus/prometheus &&
          "$GO" list -m -f '{{.Dir}}' github.com/prometheus/prometheus)
      v=$(cat "$v/VERSION")
      tags=remove_all_sd build_peer promtool github.com/prometheus/prometheus \
        "-s -w -X github.com/prometheus/common/version.Version=$v" \
        github.com/prometheus/prometheus/cmd/promtool:promtool ;;
    volcano)
      if [[ $defaults -eq 1 && ! -f "$shared_peers/volcano-$volcano_tag/go.mod" ]]; then
        # As the topology exports: where the shared folder is absent, its tests are skipped
        # (they say so); asked for by name, a missing tree is an error (build_source_peer).
        echo "build-peers: volcano $volcano_tag: no source tree at $shared_peers/volcano-$volcano_tag (set TOPOSCHED_SHARED_PEERS): not built; the Volcano tests will be skipped"
        continue
      fi
      # vc-scheduler and vc-controller-manager (PodGroups for plain pods, Jobs). Not
      # vc-webhook-manager: the tests install Volcano with custom.admission_enable=false (no
      # Service routing here reaches a webhook server; e2e/README.md). Static
      # (CGO_ENABLED=0), stamped with the tag and commit as Volcano's Makefile does.
      v="-s -w -X volcano.sh/volcano/pkg/version.Version=$volcano_tag -X volcano.sh/volcano/pkg/version.GitSHA=5fe5adf1cc501a3d66950a84a47e0543606bf47e"
      build_source_peer volcano "$shared_peers/volcano-$volcano_tag" "$volcano_tag" "$v" \
        ./cmd/scheduler:vc-scheduler ./cmd/controller-manager:vc-controller-manager ;;
    hami)
      if [[ $defaults -eq 1 && ! -f "$shared_peers/hami-$hami_tag/go.mod" ]]; then
        echo "build-peers: hami $hami_tag: no source tree at $shared_peers/hami-$hami_tag (set TOPOSCHED_SHARED_PEERS): not built; the HAMi tests will be skipped"
        continue
      fi
      # Stamped as HAMi's Makefile does (pkg/version).
      v="-s -w -X github.com/Project-HAMi/HAMi/pkg/version.version=$hami_tag -X github.com/Project-HAMi/HAMi/pkg/version.revision=4707fb02c91c545bc7343ce26dba4c32919f9a3e"
      cgo=1 build_source_peer hami "$shared_peers/hami-$hami_tag" "$hami_tag" "$v" ./cmd/scheduler:hami-scheduler
      build_hami_peer ;;
    *) echo "build-peers: unknown peer '$p' (kube etcd helm kwok prometheus-operator volcano hami promtool)" >&2; exit 2 ;;
  esac
done
echo "build-peers: done in $(( $(date +%s) - total_start ))s; cache: $cache"
