#!/usr/bin/env python3
"""The images install the Debian packages their binaries link, and the extender's none of hwloc.

usage: check_image_libs.py DOCKERFILE TOPOSCHED_BIN EXTENDER_BIN

For each binary, `ldd` names the shared libraries and `dpkg -S` the bookworm packages that ship
them (this machine builds with the same packages the image's build stage installs); every one
must be in the apt-get install list of the image's stage (the default, last stage for
`toposched`; the `extender` stage for `toposched-extender`), except what debian:bookworm-slim
already has. Found a missing libre2-9 when written. No Docker engine needed.
"""
import re
import subprocess
import sys

BASE = {"libc6", "libgcc-s1"}  # in debian:bookworm-slim already


def packages_linked(binary):
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    paths = [m.group(1) for m in re.finditer(r"=> (/\S+)", out)]
    pkgs = set()
    for p in paths:
        real = subprocess.run(["readlink", "-f", p], check=True, capture_output=True, text=True).stdout.strip()
        found = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
        if found.returncode != 0:
            found = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if found.returncode != 0:
            sys.exit(f"{binary}: no Debian package ships {p}")
        pkgs.add(found.stdout.split(":")[0].strip())
    return pkgs


def stages(dockerfile):
    """{stage name or '' for an unnamed one: [packages apt-get installs]}, and the last stage."""
    text = open(dockerfile).read().replace("\\\n", " ")
    result, order, current = {}, [], None
    for line in text.splitlines():
        m = re.match(r"\s*FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            current = m.group(1) or f"#{len(order)}"
            order.append(current)
            result[current] = set()
            continue
        if current and "apt-get install" in line:
            words = line.split("apt-get install", 1)[1].split("&&")[0].split()
            result[current] |= {w for w in words if not w.startswith("-")}
    return result, order[-1]


def main():
    dockerfile, toposched, extender = sys.argv[1:4]
    st, last = stages(dockerfile)
    failed = False
    for binary, stage in ((toposched, last), (extender, "extender")):
        need = packages_linked(binary) - BASE
        missing = sorted(need - st.get(stage, set()))
        if missing:
            print(f"{dockerfile}: stage {stage} does not install {missing}, which {binary} links")
            failed = True
        if stage == "extender" and any("hwloc" in p for p in st.get(stage, set()) | need):
            print(f"{dockerfile}: the extender stage installs or links hwloc")
            failed = True
    if failed:
        sys.exit(1)
    print("image libraries: ok")


if __name__ == "__main__":
    main()
