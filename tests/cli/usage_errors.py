#!/usr/bin/env python3
"""Every subcommand refuses a bad flag value the same way: exit 2, one line on stderr that names
the flag, nothing on stdout (README.md, "Exit codes").

Walks `toposched --help` for the subcommands and each subcommand's --help for its flags, and
gives every flag whose value is checked at parse time (numbers, durations, quantities,
booleans, choices) a value it must refuse; adds an unknown flag to every subcommand, and the
usage errors found only after parsing (listed in EXTRA). Also: every --help exits 0 and keeps
within 100 columns; an input that cannot be read exits 1 and says why.

    usage_errors.py BINARY     (CTest runs it: src/cmd/CMakeLists.txt)
"""

import os
import re
import subprocess
import sys
import tempfile

# Value names (as --help prints them) whose values the parser checks, and a value each refuses.
CHECKED = {"N": "many", "W": "heavy", "F": "half", "B": "big", "MS": "soon", "RPS": "fast", "DUR": "soon",
           "QUANTITY": "lots", "true|false": "maybe"}

# Usage errors found after the flags parse: (args, text the message must contain).
EXTRA = [
    (["version", "--bogus"], "--bogus"),
    (["version", "extra"], "extra"),
    (["frobnicate"], "frobnicate"),
    (["topo", "--synthetic", "nope"], "--synthetic"),
    (["topo", "--input", "x.xml", "--synthetic", "hgx-h100-8gpu"], "--synthetic"),
    (["agent", "--once", "--synthetic", "nope"], "--synthetic"),
    (["agent", "--output", "x.json"], "--once"),
    (["place", "--topology", "x.xml"], "--request"),
    (["simulate", "--trace", "/nonexistent", "--seeds", "5-1"], "--seeds"),
    (["simulate", "--trace", "/nonexistent", "--seeds", "x"], "--seeds"),
    (["simulate", "--trace", "/nonexistent", "--policies", "nope"], "--policies"),
    (["simulate", "--policies", "nope"], "--policies"),
    (["simulate", "--trace", "/nonexistent", "--families", "bogus"], "--families"),
    (["simulate", "--trace", "/nonexistent", "--families", "gpushare:150"], "--families"),
    (["simulate", "--trace", "/nonexistent", "--families", "all", "--variants", "default"], "--families"),
    (["simulate", "--trace", "/nonexistent", "--family-seed", "3"], "--family-seed"),
    (["simulate", "--families", "all"], "--families"),
    (["simulate", "--topology-mix", "10"], "--topology-mix"),
    (["simulate", "--topologies", "/nonexistent", "--topology-mix", "10", "--copies", "2"], "--topology-mix"),
    (["simulate", "--mix-seed", "3"], "--mix-seed"),
    (["simulate", "--trace", "/nonexistent", "--topology-mix", "10"], "--trace"),
    (["simulate", "--shapes", "nope=2"], "--shapes"),
    (["simulate", "--seeds", "1-3"], "--seeds"),
    (["simulate", "--dra", "--seeds", "3-1"], "--seeds"),
    (["simulate", "--dra", "--seeds", "1-3", "--seed", "2"], "--seed"),
    (["simulate", "--dra", "--policies", "toposched"], "--policies"),
    (["simulate", "--dra", "--workload", "x.json"], "--workload"),
    (["simulate", "--dra", "--trace", "/nonexistent"], "--dra"),
    (["simulate", "--nodes", "4", "--shapes", "pcie-4gpu=2"], "--shapes"),
    (["serve"], "--cluster"),
    (["serve", "--kube", "--cluster", "/tmp"], "--cluster"),
    (["serve", "--cluster", "/tmp", "--tls-cert", "c.pem"], "--tls-key"),
    (["advise", "--model", "nope"], "nope"),
    (["advise", "--prompt", "nope"], "--prompt"),
]

failures = []


def run(binary, args, timeout=60):
    try:
        return subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return None


def expect_usage_error(binary, args, must_name):
    r = run(binary, args)
    what = "toposched " + " ".join(args)
    if r is None:
        failures.append(f"{what}: still running after 60 s (a usage error must stop before any work)")
        return
    lines = r.stderr.strip("\n").split("\n")
    if r.returncode != 2:
        failures.append(f"{what}: exit {r.returncode}, want 2; stderr: {r.stderr.strip()[:200]}")
    elif len(lines) != 1 or not lines[0].startswith("toposched"):
        failures.append(f"{what}: want one line starting 'toposched', got {len(lines)}: {r.stderr.strip()[:300]}")
    elif must_name not in lines[0]:
        failures.append(f"{what}: the message does not name {must_name}: {lines[0]}")
    elif r.stdout:
        failures.append(f"{what}: printed on stdout: {r.stdout[:200]}")


def subcommands(binary):
    r = run(binary, ["--help"])
    if r is None or r.returncode != 0:
        sys.exit("usage_errors: `toposched --help` failed")
    block = r.stdout.split("commands:", 1)[1]
    return re.findall(r"^  ([a-z]+)\s", block, re.M)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    count = 0
    for sub in subcommands(binary):
        r = run(binary, [sub, "--help"])
        if r is None or r.returncode != 0:
            failures.append(f"toposched {sub} --help: exit {None if r is None else r.returncode}, want 0")
            continue
        for line in r.stdout.split("\n"):
            if len(line) > 100:
                failures.append(f"toposched {sub} --help: a line of {len(line)} columns (at most 100): {line}")
        expect_usage_error(binary, [sub, "--no-such-flag"], "--no-such-flag")
        count += 1
        for flag, value_name in re.findall(r"^  (--[a-z0-9-]+) (\S+)", r.stdout, re.M):
            if value_name in CHECKED:
                bad = CHECKED[value_name]
            elif re.fullmatch(r"[a-z]+(\|[a-z]+)+", value_name):
                bad = "nope"  # a choice
            else:
                continue  # free text (FILE, NAME, ...): checked where it is used, see EXTRA
            expect_usage_error(binary, [sub, flag, bad], flag)
            expect_usage_error(binary, [sub, f"{flag}={bad}"], flag)
            count += 2
    for args, must_name in EXTRA:
        expect_usage_error(binary, args, must_name)
        count += 1

    # Inputs that cannot be read: exit 1, and the message says which and why.
    with tempfile.TemporaryDirectory() as tmp:
        missing = os.path.join(tmp, "absent", "topology.json")
        for args, want in [
            (["agent", "--once", "--synthetic", "pcie-4gpu", "--output", missing],
             "the directory " + os.path.dirname(missing) + " does not exist"),
            (["place", "--topology", os.path.join(tmp, "no.xml"), "--request", "p.json"], "No such file or directory"),
            (["topo", "--input", os.path.join(tmp, "no.xml")], "cannot open"),
        ]:
            r = run(binary, args)
            what = "toposched " + " ".join(args)
            if r is None or r.returncode != 1 or want not in r.stderr:
                failures.append(f"{what}: want exit 1 and '{want}', got exit "
                                f"{None if r is None else r.returncode}: {'' if r is None else r.stderr.strip()}")
            count += 1

    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    print(f"usage_errors: {count} cases, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
