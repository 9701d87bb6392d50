"""The chart's monitoring objects against the metrics the code exports (tests/chart/check.py uses it).

exported_metrics() reads every metric family the C++ sources register (Registry::AddCounter,
AddGauge, AddHistogram in src/ and plugins/): name, type and label names. promql_uses() reads a
PromQL expression far enough to say, for every metric selector in it, which functions enclose it
and which labels it matches on, and which labels its aggregations group by. check_expr() then
refuses:
  - a metric the code does not export (histograms by their _bucket, _sum and _count series);
  - a counter not directly under rate(), irate() or increase(), a gauge under one of them (a
    gauge's rate is meaningless), a histogram's _bucket outside histogram_quantile(rate(...));
  - a label matcher or grouping label the metric family does not have (target labels the
    Prometheus Operator adds, and le for buckets, aside);
  - an expression that names no metric at all.
"""
import os
import re

# Labels Prometheus (with the Prometheus Operator's ServiceMonitor) puts on every scraped series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
# Metrics Prometheus itself writes, allowed in alerts.
PROMETHEUS_METRICS = {"up": ("gauge", set())}
RATE_FUNCTIONS = {"rate", "irate", "increase"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"bool", "and", "or", "unless", "offset", "atan2", "inf", "nan", "start", "end"}

_ADD = re.compile(r"\bAdd(Counter|Gauge|Histogram)\s*\(")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _call_args(text, start):
    """The top-level arguments of the call whose '(' is at text[start - 1], as source strings."""
    depth, args, current, i = 0, [], [], start
    while i < len(text):
        c = text[i]
        if c == '"':
            m = _STRING.match(text, i)
            current.append(m.group(0))
            i = m.end()
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            if depth == 0:
                args.append("".join(current).strip())
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(c)
        i += 1
    raise ValueError("unterminated call")


def exported_metrics(root):
    """{name: (type, {label names})} of every family registered in root/src and root/plugins."""
    found = {}
    for top in ("src", "plugins"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".cc", ".h")) or name.endswith("_test.cc"):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    text = f.read()
                for m in _ADD.finditer(text):
                    args = _call_args(text, m.end())
                    metric = _STRING.fullmatch(args[0]) if args else None
                    if not metric:
                        continue  # the declaration in metrics.h, or a name built at run time
                    labels = set(_STRING.findall(args[2])) if len(args) > 2 and args[2].startswith("{") else set()
                    found[metric.group(1)] = (m.group(1).lower(), labels)
    return found


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<number>[0-9][0-9a-zA-Z_.]*|\.[0-9]+)
  | (?P<variable>\$[a-zA-Z_{}]+)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){}\[\],@])
""", re.X)


def _tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group(0)))
    return out


def promql_uses(expr):
    """([(metric, [enclosing functions, innermost first], {matched labels})], {grouping labels})."""
    toks = _tokens(expr)
    uses, grouping = [], set()
    stack = []          # per open '(': the function or clause it belongs to ("" = plain parentheses)
    resume = None       # the aggregation whose by/without clause just closed
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text == "(":
            prev_kind, prev = toks[i - 1] if i else ("", "")
            if prev_kind == "ident" and prev not in ("and", "or", "unless", "bool"):
                stack.append(prev)
                if prev in ("by", "without") and i >= 2 and toks[i - 2][0] == "ident":
                    stack[-1] = ("by", toks[i - 2][1])
            elif prev == ")" and resume:
                stack.append(resume)
            else:
                stack.append("")
            resume = None
        elif text == ")":
            top = stack.pop()
            resume = top[1] if isinstance(top, tuple) else None
        elif text == "[":
            while toks[i][1] != "]":  # a range or subquery: durations and variables only
                i += 1
        elif kind == "ident" and stack and (isinstance(stack[-1], tuple) or stack[-1] in GROUPING):
            grouping.add(text)  # a label in by (...), on (...), group_left (...)
        elif kind == "ident" and nxt != "(" and text not in KEYWORDS and not (nxt == "by" or nxt == "without"):
            labels = set()
            if nxt == "{":
                i += 2
                while toks[i][1] != "}":
                    if toks[i][0] == "ident" and toks[i + 1][1] in ("=", "!=", "=~", "!~"):
                        labels.add(toks[i][1])
                    i += 1
            functions = [f[1] if isinstance(f, tuple) else f for f in reversed(stack) if f != ""]
            uses.append((text, functions, labels))
        elif text == "{":  # a selector without a metric name: {__name__=...}
            raise ValueError("selectors without a metric name are not checked; name the metric")
        i += 1
    return uses, grouping


def check_expr(expr, metrics, where, fail, allow_prometheus=False, series_selector=False):
    """Reports through fail(where, message) every way expr misuses the exported metrics; returns
    the metric families it names. series_selector: expr only selects series (label_values() of a
    dashboard variable), so the type rules do not apply."""
    try:
        uses, grouping = promql_uses(expr)
    except (ValueError, IndexError) as e:
        fail(where, f"cannot read the expression {expr!r}: {e}")
        return set()
    known = dict(metrics)
    if allow_prometheus:
        known.update(PROMETHEUS_METRICS)
    names, all_labels = set(), set(TARGET_LABELS)
    for name, functions, labels in uses:
        family, part = name, ""
        for suffix in ("_bucket", "_sum", "_count"):
            if name not in known and name.endswith(suffix) and known.get(name[:-len(suffix)], ("",))[0] == "histogram":
                family, part = name[:-len(suffix)], suffix
        if family not in known:
            fail(where, f"{name} is not a metric the code exports")
            continue
        names.add(family)
        kind, family_labels = known[family]
        all_labels |= family_labels | ({"le"} if part == "_bucket" else set())
        innermost = functions[0] if functions else ""
        if series_selector:
            pass
        elif kind == "counter" and innermost not in RATE_FUNCTIONS:
            fail(where, f"counter {name} must be read through rate(), irate() or increase(), not {innermost or 'as is'}")
        elif kind == "gauge" and innermost in RATE_FUNCTIONS:
            fail(where, f"gauge {name} under {innermost}(): a gauge has no rate (use deriv() or delta())")
        elif kind == "histogram":
            if not part:
                fail(where, f"histogram {name} has no series of that name: use {name}_bucket, _sum or _count")
            elif innermost not in RATE_FUNCTIONS:
                fail(where, f"{name} is cumulative: read it through rate() or increase()")
            elif part == "_bucket" and "histogram_quantile" not in functions:
                fail(where, f"{name} outside histogram_quantile()")
        for label in labels - family_labels - TARGET_LABELS - ({"le"} if part == "_bucket" else set()):
            fail(where, f"{name} has no label {label!r} (its labels: {sorted(family_labels) or 'none'})")
    for label in grouping - all_labels:
        fail(where, f"grouping by {label!r}, which none of the metrics carries")
    if not uses:
        fail(where, f"the expression names no metric: {expr!r}")
    return names


def dashboard_exprs(dashboard):
    """(where, expr) of every panel query, rows' nested panels included, and the metrics the
    template variables' label_values() queries name."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p.get('id')} {p.get('title')!r} {t.get('refId')}", t.get("expr", "")))
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    return out
