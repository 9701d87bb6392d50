#!/usr/bin/env python3
"""The documentation's commands, run against the built binary, and their printed output checked.

Every `toposched ...` command in a code block of README.md and docs/*.md (fenced or indented,
with or without a leading "$ ") is found and:

  * run, from a scratch copy of the repository's layout (symlinks; files the command writes land
    there, not in the repository), with the binary replaced by $TOPOSCHED_BIN; it must exit 0
    within --timeout seconds;
  * or, when it is a synopsis (placeholders like FILE, DIR, [--flag], ...), not run: each --flag it
    names must be listed by `toposched <command> --help`;
  * or skipped, when the documentation marks it so with an HTML comment before its block:

        <!-- docs-test: skip "serve --kube", "agent" -- needs a cluster -->   commands containing
                                                                              any quoted text
        <!-- docs-test: skip -- needs a cluster -->                           the whole block
        <!-- docs-test: slow "simulate --trace" -- minutes -->                run only with --slow

    Several markers may precede one block. The reason after "--" is printed. Skipped commands
    still get the --help flag check.

A `toposched serve` or `toposched agent` command (they run until stopped, or need a cluster)
that is neither a synopsis nor marked fails the test: the marker is the explicit list of what
the test does not run.

Example output. A fenced block marked

    <!-- docs-test: output -->

holds one command on its first line, after "$ " (continued with a trailing backslash), and below
it what the command prints on stdout. The command runs as above and its stdout must match the
rest of the block line by line (trailing blanks ignored, tabs significant, trailing empty lines
ignored). A line that is exactly "..." stands for any number of lines left out, so an example
may be abridged at its start, middle or end; nothing else is a wildcard. Mark only output that
is deterministic (topo, place, version, help texts, the simulator for a fixed seed without its
timings); a change to the binary's output then fails here until the docs show it.

Data paths. The docs name the folders a user has: `data/alibaba-gpu-v2023` (what
`scripts/fetch-trace.sh data/alibaba-gpu-v2023` downloads) and `data/topologies` (real topology
exports). In the scratch tree `data/` maps them to ../shared/traces/alibaba-gpu-v2023 and
../shared/topologies, so the test reads the shared copies and needs no network. Scripts other
than the binary (scripts/fetch-trace.sh, which downloads from GitHub) are not run.

Only the Python standard library; exits 1 when anything failed.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBCOMMANDS = ("topo", "agent", "place", "simulate", "serve", "advise", "version", "help")
# The binary at a command position: line start (after "$ "), after `time`, `&&`, `|`, `;`.
COMMAND = re.compile(
    r"(?:^|(?<=&&\s)|(?<=\|\s)|(?<=;\s)|(?<=^time\s))(?:\./)?(?:build[\w.-]*/src/cmd/)?toposched\s+(" +
    "|".join(SUBCOMMANDS) + r"|--help|-h)\b")
SYNOPSIS = re.compile(r"\[--|\[[^\]]*\||\b(?:FILE|DIR|NAME|PRESET|NODE|ID|NS|DUR|N|ADDR|PATH)\b|POD\.json|"
                      r"ALLOC\.json|CONFIG\.yaml|\.\.\.|<[a-z][^>]*>")
MARKER = re.compile(r'<!--\s*docs-test:\s*(skip|slow|output)\b((?:\s*"[^"]*"\s*,?)*)\s*(?:--\s*(.*?))?\s*-->', re.S)
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


# In the scratch tree, data/<name> -> ../shared/<target> (see "Data paths" above).
DATA_PATHS = {"alibaba-gpu-v2023": "traces/alibaba-gpu-v2023", "topologies": "topologies"}


class Command:
    def __init__(self, path, line, text, markers, expected=None):
        self.path, self.line, self.text, self.markers = path, line, text, markers
        self.expected = expected  # the example output's lines, for a block marked "output"

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"

    def subcommand(self):
        m = COMMAND.search(self.text)
        return m.group(1) if m else ""


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def parse_marker(match):
    kind, items, reason = match.group(1), match.group(2).strip(), (match.group(3) or "").strip()
    quoted = re.findall(r'"([^"]+)"', items)
    return {"kind": kind, "items": quoted, "reason": reason or "(no reason given)"}


def code_blocks(path):
    """(first line number, lines, marker) for each fenced or indented code block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, markers, i = [], [], 0
    pending_comment = []
    while i < len(lines):
        line = lines[i]
        if "<!--" in line or pending_comment:
            pending_comment.append(line)
            if "-->" in line:
                m = MARKER.search("\n".join(pending_comment))
                if m:
                    markers.append(parse_marker(m))
                pending_comment = []
            i += 1
            continue
        fence = re.match(r"^(\s*)(```+|~~~+)", line)
        if fence:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence.group(2)):
                body.append(lines[i])
                i += 1
            blocks.append((start + 1, body, markers))
            markers = []
            i += 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            blocks.append((start + 1, body, markers))
            markers = []
            continue
        i += 1
    return blocks


def output_example(path, first, body, markers):
    """The command and expected output of a block marked "output"."""
    if not body or not body[0].strip().startswith("$ "):
        raise SystemExit(f"docs-test: {os.path.relpath(path, ROOT)}:{first}: a block marked output must start "
                         "with '$ command'")
    text, j = body[0].strip()[2:], 1
    while text.endswith("\\") and j < len(body):
        text = text[:-1].rstrip() + " " + body[j].strip()
        j += 1
    expected = [line.rstrip() for line in body[j:]]
    while expected and not expected[-1]:
        expected.pop()
    return Command(path, first, text, markers, expected)


def output_mismatch(expected, actual_text):
    """None when `actual_text` matches the expected lines ("..." skips any lines), else why not."""
    actual = [line.rstrip() for line in actual_text.split("\n")]
    while actual and not actual[-1]:
        actual.pop()

    def match(e, a):
        if e == len(expected):
            return a == len(actual)
        if expected[e] == "...":
            return any(match(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and expected[e] == actual[a] and match(e + 1, a + 1)

    if match(0, 0):
        return None
    # Point at the first expected line that is not where it should be.
    a = 0
    for e, line in enumerate(expected):
        if line == "...":
            continue
        if line in actual[a:]:
            a = actual.index(line, a) + 1
            continue
        near = actual[a] if a < len(actual) else "(end of output)"
        return f"output differs at example line {e + 1}: docs {line!r}, binary {near!r}"
    return "output differs: the example's lines are there, but with lines between or after them " \
           "(add '...' where the example leaves lines out)"


def commands_in(path):
    out = []
    for first, body, markers in code_blocks(path):
        if any(m["kind"] == "output" for m in markers):
            out.append(output_example(path, first, body, markers))
            continue
        j = 0
        while j < len(body):
            raw, number = body[j], first + j
            text = raw.strip()
            if text.startswith("$ "):
                text = text[2:]
            # Backslash continuations, as the shell joins them.
            while text.endswith("\\") and j + 1 < len(body):
                j += 1
                text = text[:-1].rstrip() + " " + body[j].strip()
            j += 1
            if not COMMAND.search(text):
                continue
            # A synopsis continues on indented lines of options: "    [--interval 60s] ...".
            while SYNOPSIS.search(text) and j < len(body) and re.match(r"^\s+\[", body[j]):
                text += " " + body[j].strip()
                j += 1
            out.append(Command(path, number, text, markers))
    return out


def inline_commands(path):
    """`toposched <command> ...` in prose (inline code): not run, their flags checked."""
    out = []
    with open(path, encoding="utf-8") as f:
        in_fence = False
        for number, line in enumerate(f, 1):
            if re.match(r"^\s*(```|~~~)", line):
                in_fence = not in_fence
                continue
            if in_fence or line.startswith("    "):
                continue
            for span in re.findall(r"`([^`]+)`", line):
                if COMMAND.match(span.strip()):
                    out.append(Command(path, number, span.strip(), []))
    return out


def strip_comment(text):
    """The command without a trailing shell comment (" # ..." outside quotes)."""
    quote = None
    for k, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or text[k - 1].isspace()):
            return text[:k].rstrip()
    return text


def help_text(binary, subcommand, cache):
    if subcommand not in cache:
        if subcommand in ("version", "help", "--help", "-h", ""):
            cache[subcommand] = ""
        else:
            r = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True, timeout=30)
            cache[subcommand] = r.stdout if r.returncode == 0 else None
    return cache[subcommand]


def check_flags(cmd, binary, cache):
    """Every --flag the command names is one `toposched <subcommand> --help` lists."""
    text = strip_comment(cmd.text)
    # Only the toposched part of a compound line.
    m = COMMAND.search(text)
    part = re.split(r"\s(?:&&|\|\|?|;)\s", text[m.start():])[0]
    sub = cmd.subcommand()
    help_out = help_text(binary, sub, cache)
    if help_out is None:
        return [f"`toposched {sub} --help` failed"]
    if not help_out:
        return []
    listed = set(FLAG.findall(help_out))
    return [f"{flag} is not a flag of `toposched {sub}` (see its --help)"
            for flag in FLAG.findall(part) if flag not in listed and flag not in ("--help",)]


def scratch_tree():
    """A directory with a symlink to each top-level entry of the repository and ../shared beside
    it: relative paths in the docs resolve, and what commands write stays out of the repo."""
    base = tempfile.mkdtemp(prefix="toposched-docs-test-")
    tree = os.path.join(base, "repo")
    os.mkdir(tree)
    for entry in os.listdir(ROOT):
        if entry in (".git", "data"):
            continue
        os.symlink(os.path.join(ROOT, entry), os.path.join(tree, entry))
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    os.mkdir(os.path.join(tree, "data"))
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(base, "shared"))
        for name, target in DATA_PATHS.items():
            os.symlink(os.path.join(shared, target), os.path.join(tree, "data", name))
    return base, tree


def run(cmd, binary, tree, timeout):
    text = strip_comment(cmd.text)
    text = re.sub(r"(?:\./)?(?:build[\w.-]*/src/cmd/)?toposched(?=\s+(?:" + "|".join(SUBCOMMANDS) + r"|--help|-h)\b)",
                  shlex.quote(binary), text)
    env = dict(os.environ, TOPOSCHED_BIN=binary)
    start = time.monotonic()
    try:
        r = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=tree, capture_output=True, text=True,
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout} s", time.monotonic() - start
    # 141: a producer cut off by `| head` (SIGPIPE under pipefail) is not a failure.
    if r.returncode not in (0, 141):
        tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-3:]
        return f"exit {r.returncode}: " + " / ".join(tail), time.monotonic() - start
    if cmd.expected is not None:
        return output_mismatch(cmd.expected, r.stdout), time.monotonic() - start
    return None, time.monotonic() - start


def marked(cmd, kind):
    """The reason of the first marker of `kind` that covers the command, else None."""
    for m in cmd.markers:
        if m["kind"] == kind and (not m["items"] or any(item in cmd.text for item in m["items"])):
            return m["reason"]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default=os.environ.get("TOPOSCHED_BIN", os.path.join(ROOT, "build/src/cmd/toposched")))
    parser.add_argument("--timeout", type=int, default=120, help="seconds per command")
    parser.add_argument("--slow", action="store_true", help="also run the commands marked slow")
    parser.add_argument("--list", action="store_true", help="list the commands and what happens to each, run none")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    if not args.list and not os.access(binary, os.X_OK):
        print(f"docs-test: {binary} is not an executable (build first, or set TOPOSCHED_BIN)", file=sys.stderr)
        return 2

    commands = [c for f in doc_files() for c in commands_in(f)]
    inline = [c for f in doc_files() for c in inline_commands(f)]
    base, tree = scratch_tree()
    failures, counts, helps, results = [], {"ran": 0, "synopsis": 0, "skipped": 0, "slow": 0, "outputs": 0}, {}, {}
    try:
        for cmd in commands:
            problems = [] if args.list else check_flags(cmd, binary, helps)
            skip, slow = marked(cmd, "skip"), marked(cmd, "slow")
            synopsis = bool(SYNOPSIS.search(strip_comment(cmd.text)))
            if synopsis:
                action = "synopsis"
            elif skip is not None:
                action = "skipped"
            elif slow is not None and not args.slow:
                action = "slow"
            elif cmd.subcommand() in ("serve", "agent") and "--help" not in cmd.text and "--once" not in cmd.text:
                action = "unmarked"
                problems.append("runs until stopped or needs a cluster: mark it "
                                "(<!-- docs-test: skip \"...\" -- why -->) or make it runnable")
            else:
                action = "run"
            if args.list:
                print(f"{action:9} {cmd.where()}: {cmd.text}")
                continue
            elapsed = 0.0
            if action == "run" and not problems:
                # The same command in several places runs once.
                key = re.sub(r"\s+", " ", COMMAND.sub(lambda m: "toposched " + m.group(1), strip_comment(cmd.text)))
                if cmd.expected is not None:
                    key = (key, cmd.where())  # each example's output is checked on its own
                    counts["outputs"] += 1
                if key not in results:
                    results[key] = run(cmd, binary, tree, args.timeout)
                error, elapsed = results[key]
                if error:
                    problems.append(error)
                counts["ran"] += 1
            elif action in counts:
                counts[action] += 1
            reason = skip or slow or ""
            for p in problems:
                failures.append(f"{cmd.where()}: {cmd.text}\n    {p}")
            if args.verbose or problems:
                status = "FAIL" if problems else action
                extra = f" ({elapsed:.1f} s)" if action == "run" else (f" ({reason})" if reason else "")
                print(f"docs-test: {status:8} {cmd.where()}{extra}: {cmd.text}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for cmd in inline:
        problems = [] if args.list else check_flags(cmd, binary, helps)
        if args.list or args.verbose:
            print(f"inline    {cmd.where()}: {cmd.text}")
        for p in problems:
            failures.append(f"{cmd.where()}: `{cmd.text}`\n    {p}")
    if args.list:
        return 0
    print(f"docs-test: {len(commands)} commands in README.md and docs/*.md: {counts['ran']} ran "
          f"({counts['outputs']} with their example output checked), "
          f"{counts['synopsis']} synopses checked against --help, {counts['skipped']} skipped as marked, "
          f"{counts['slow']} slow not run (--slow runs them); {len(inline)} in prose checked against --help; "
          f"{len(failures)} failed")
    for f in failures:
        print("  " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
