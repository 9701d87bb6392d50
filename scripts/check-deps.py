#!/usr/bin/env python3
"""Fails when a folder includes another against the dependency graph of docs/architecture.md.

Every product source (src/<component>/, plugins/, include/toposched/<component>/; tests, fuzz
targets and benchmarks are not checked) may include headers of the components listed for it
below and of nothing else. A component is a folder of src/ (its public headers are in
include/toposched/<component>/); plugins/ is the component "plugins". Run by scripts/test.sh.

usage: scripts/check-deps.py [REPO_ROOT]
"""

import os
import re
import sys

# component -> the components it may include (the graph drawn in docs/architecture.md).
ALLOWED = {
    "common": set(),
    "topology": {"common"},
    "agent": {"common", "topology"},
    "placement": {"common", "topology"},
    "pd": {"common", "topology"},
    # framework -> pd: the base Plugin's CheckNetwork(pd::NetworkConfig) (issue 18 item 1, open).
    "framework": {"common", "topology", "placement", "pd"},
    "plugins": {"common", "topology", "placement", "pd", "framework"},
    "state": {"common", "topology", "placement", "framework"},
    "metrics": {"common"},
    "wire": {"common"},
    "server": {"common", "metrics"},
    "extender": {"common", "topology", "placement", "framework", "state", "metrics", "wire", "server"},
    "kube": {"common", "topology", "placement", "pd", "state", "metrics", "extender"},
    # simulate -> extender: the trace replay's extender policies run the extender's verbs.
    "simulate": {"common", "topology", "agent", "placement", "pd", "framework", "plugins", "extender", "state",
                 "metrics", "wire", "server"},
    "cmd": None,  # the executable: anything
}
# Single headers a component may include from a component it otherwise must not reach.
ALLOWED_HEADERS = {
    # The kube source implements the extender's BindHooks; it must not reach the HTTP server.
    "kube": {"toposched/extender/bind_hooks.h"},
}
# kube may include only those headers of the extender.
HEADER_ONLY = {("kube", "extender")}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def component_of(path):
    parts = path.split(os.sep)
    if parts[0] == "src":
        return parts[1]
    if parts[0] == "plugins":
        return "plugins"
    if parts[0] == "include" and len(parts) > 2:
        return parts[2]
    return None


def target_of(header):
    m = re.match(r"toposched/([a-z_]+)/", header)
    if m:
        return m.group(1)
    if header.startswith("plugins/"):
        return "plugins"
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    os.chdir(root)
    errors = []
    checked = 0
    for top in ("src", "plugins", "include"):
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")) or name.endswith("_test.cc") or "testing" in name:
                    continue
                path = os.path.join(dirpath, name)
                comp = component_of(path)
                if comp is None:
                    continue
                if comp not in ALLOWED:
                    errors.append(f"{path}: component '{comp}' is not in the graph (add it to scripts/check-deps.py "
                                  "and docs/architecture.md)")
                    continue
                checked += 1
                allowed = ALLOWED[comp]
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1)
                        target = target_of(header)
                        if target is None or target == comp or allowed is None:
                            continue
                        if header in ALLOWED_HEADERS.get(comp, set()):
                            continue
                        if target in allowed and (comp, target) not in HEADER_ONLY:
                            continue
                        errors.append(f"{path}:{lineno}: {comp} must not include {header} ({comp} -> {target} "
                                      "is not in the dependency graph, docs/architecture.md)")
    for e in errors:
        print(e)
    print(f"check-deps: {checked} files, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
