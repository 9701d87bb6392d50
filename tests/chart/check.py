#!/usr/bin/env python3
"""Checks every object of a rendered toposched chart (tests/chart/run.sh renders it).

usage: check.py --schemas DIR [--toposched BIN] CASE.yaml[:NOTES.txt] ...

Each CASE file is helm template's output for one values file; its name (without
.yaml) is the case name, and the line "# case: mode=<schedulerMode> release=<name>
namespace=<ns>" at its top says what was rendered. For every object:

  - the YAML parses, with duplicate keys refused (PyYAML would keep the last one silently);
  - apiVersion, kind and metadata.name are present, namespaced kinds sit in the release
    namespace, cluster-scoped kinds have none;
  - labels: app.kubernetes.io/instance is the release, part-of is toposched, managed-by and
    helm.sh/chart are set; workload selectors select their own pod template; the Service,
    PodDisruptionBudget, NetworkPolicies and ServiceMonitor select pods or Services that exist;
    service accounts, ConfigMaps and roles referenced exist in the render;
  - the object validates against the Kubernetes JSON schema of its kind in DIR (kubeconform's
    standalone-strict files: unknown fields are errors). Kinds without a schema there
    (ServiceMonitor, PrometheusRule) are checked against the ObjectMeta schema plus a strict hand-written
    schema of the fields the chart uses;
  - RBAC grants exactly the API calls the code makes (the pinned sets below, the same as
    tests/integration/manifests_test.cc's), no wildcards, no Secrets;
  - the payloads: the extender's config keys (include/toposched/framework/config.h,
    pd/network.h), the KubeSchedulerConfiguration's extender entry, volcano-scheduler.conf's
    extender arguments; every flag in the containers' args is in `toposched <cmd> --help`
    (when --toposched names a built binary);
  - TLS (--tls CASE=EXPECT, one per case: off, generated-mtls, own-tls or own-mtls): what the
    case must render, and that it is wired: every file --tls-cert/--tls-key/--tls-client-ca and
    the scheduler's tlsConfig caFile/certFile/keyFile name is a key of a mounted Secret, every
    Secret volume names a rendered Secret or one the values file names, never --tls-client-ca in
    volcano mode; the Secrets the chart generates are kubernetes.io/tls with tls.crt, tls.key
    and ca.crt, and (openssl, when on PATH) each certificate chains to that ca.crt for its
    purpose (server: the Service's names; client: client auth) and matches its key; the
    scheduler carries checksum/tls exactly when they are generated;
  - monitoring (tests/chart/monitoring.py): every PromQL expression of the PrometheusRule and of
    the Grafana dashboard names only metrics the C++ code registers, with their real labels,
    counters through rate()/increase() and gauges not; the dashboard JSON parses and has a panel
    for each subject the chart promises; the rule's job matcher is the Service the ServiceMonitor
    scrapes. With --promtool: `promtool check rules` (lint fatal) on every rendered rule, and
    `promtool test rules` of --rule-tests CASE=FILE on that case's rule.

Exits 1 after printing every failure.
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml

import monitoring

FAILURES = []


def fail(where, message):
    FAILURES.append(f"{where}: {message}")


# ---- YAML with duplicate keys refused ---------------------------------------------------------

class StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        keys.add(key)
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_all(text, where):
    try:
        return [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
    except yaml.YAMLError as e:
        fail(where, f"invalid YAML: {e}")
        return []


# ---- what the code calls: the pinned RBAC ------------------------------------------------------

def grants_of(rules):
    out = set()
    for rule in rules:
        for g in rule.get("apiGroups", []):
            for r in rule.get("resources", []):
                for v in rule.get("verbs", []):
                    out.add((g, r, v, tuple(rule.get("resourceNames", []))))
    return out


# (apiGroup, resource, verb, resourceNames): tests/integration/manifests_test.cc
# Rbac.EachRoleGrantsExactlyWhatItsCodePathsUse and deploy/README.md's table; the scheduler's
# Lease Role mirrors the extender's.
def expected_roles(fullname, namespace, mode, agent, hyper_nodes=False, dra=False):
    ext, sched = f"{fullname}-extender", f"{fullname}-scheduler"
    roles = {
        ("ClusterRole", "", ext): {
            ("", "nodes", "get", ()), ("", "nodes", "list", ()), ("", "nodes", "watch", ()),
            ("", "nodes", "update", ()),
            ("", "pods", "get", ()), ("", "pods", "list", ()), ("", "pods", "watch", ()), ("", "pods", "patch", ()),
            ("", "pods/binding", "create", ()), ("", "events", "create", ()), ("", "events", "patch", ()),
            ("toposched.io", "nodetopologies", "get", ()), ("toposched.io", "nodetopologies", "list", ()),
            ("toposched.io", "nodetopologies", "watch", ())},
        ("Role", namespace, f"{ext}-leader"): {
            ("coordination.k8s.io", "leases", "create", ()),
            ("coordination.k8s.io", "leases", "get", (ext,)), ("coordination.k8s.io", "leases", "update", (ext,))},
    }
    if hyper_nodes:  # config.network.hyperNodes: the extender's HyperNode informer
        roles[("ClusterRole", "", ext)] |= {("topology.volcano.sh", "hypernodes", v, ()) for v in ("get", "list", "watch")}
    if dra:  # extender.dra: the extender's DRA informers
        roles[("ClusterRole", "", ext)] |= {
            ("resource.k8s.io", r, v, ())
            for r in ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses")
            for v in ("get", "list", "watch")}
    if agent:
        roles[("ClusterRole", "", f"{fullname}-agent")] = {
            ("", "nodes", "get", ()), ("", "nodes", "patch", ()),
            ("toposched.io", "nodetopologies", "get", ()), ("toposched.io", "nodetopologies", "create", ()),
            ("toposched.io", "nodetopologies", "patch", ()), ("toposched.io", "nodetopologies/status", "patch", ())}
    if mode == "secondary":
        roles[("Role", namespace, f"{sched}-leader")] = {
            ("coordination.k8s.io", "leases", "create", ()),
            ("coordination.k8s.io", "leases", "get", (sched,)), ("coordination.k8s.io", "leases", "update", (sched,))}
    return roles


# Built-in roles a binding may name: the upstream scheduler roles, as HAMi's chart binds them.
BUILTIN_ROLES = {"system:kube-scheduler", "system:volume-scheduler"}

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}

# Strict schema for the ServiceMonitor fields the chart uses (no schema in the shared folder).
SERVICE_MONITOR_SPEC = {
    "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
    "properties": {
        "selector": {"type": "object", "additionalProperties": False,
                     "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "namespaceSelector": {"type": "object", "additionalProperties": False,
                              "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}}},
        "endpoints": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["port"],
            "properties": {
                "port": {"type": "string"}, "path": {"type": "string"},
                "interval": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"},
                "scheme": {"enum": ["http", "https"]},
                "tlsConfig": {"type": "object", "additionalProperties": False, "properties": {
                    "serverName": {"type": "string"}, "insecureSkipVerify": {"type": "boolean"},
                    "ca": {"type": "object", "additionalProperties": False, "properties": {
                        "secret": {"type": "object", "additionalProperties": False, "required": ["name", "key"],
                                   "properties": {"name": {"type": "string"}, "key": {"type": "string"}}}}}}}}}}},
}


# Strict schema for the PrometheusRule fields the chart uses.
PROMETHEUS_RULE_SPEC = {
    "type": "object", "additionalProperties": False, "required": ["groups"],
    "properties": {"groups": {"type": "array", "minItems": 1, "items": {
        "type": "object", "additionalProperties": False, "required": ["name", "rules"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "rules": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["alert", "expr", "labels", "annotations"],
                "properties": {
                    "alert": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                    "expr": {"type": "string", "minLength": 1},
                    "for": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"},
                    "labels": {"type": "object", "required": ["severity"], "additionalProperties": {"type": "string"},
                               "properties": {"severity": {"enum": ["critical", "warning", "info"]}}},
                    "annotations": {"type": "object", "required": ["summary", "description"],
                                    "additionalProperties": {"type": "string"}}}}}}}}},
}
CUSTOM_SPECS = {"ServiceMonitor": SERVICE_MONITOR_SPEC, "PrometheusRule": PROMETHEUS_RULE_SPEC}

# What the dashboard must show (the metric families behind each subject the chart promises).
DASHBOARD_SUBJECTS = {
    "requests per verb": "toposched_requests_total",
    "latency per verb": "toposched_request_duration_seconds",
    "filter rejections by reason": "toposched_filter_rejections_total",
    "placements by GPU->NIC class": "toposched_placements_total",
    "binds and bind failures": "toposched_binds_total",
    "reservation outcomes": "toposched_reservations_total",
    "store size": "toposched_state_nodes",
    "leader": "toposched_kube_leader",
}


def schema_file(api_version, kind):
    """kubeconform's file name rule: kind-[group prefix-]version.json."""
    group, _, version = api_version.rpartition("/")
    prefix = group.split(".")[0]
    return f"{kind.lower()}-{prefix}-{version}.json" if group else f"{kind.lower()}-{version}.json"


class NoSchemas:
    def validate(self, obj, where):
        pass


class Schemas:
    def __init__(self, folder):
        self.folder, self.cache = folder, {}

    def get(self, name):
        if name not in self.cache:
            path = os.path.join(self.folder, name)
            self.cache[name] = json.load(open(path)) if os.path.exists(path) else None
        return self.cache[name]

    def validate(self, obj, where):
        kind = obj.get("kind")
        schema = self.get(schema_file(obj.get("apiVersion", ""), kind))
        if schema is None and kind in CUSTOM_SPECS:
            meta = self.get("configmap-v1.json")["properties"]["metadata"]
            schema = {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
                      "properties": {"apiVersion": {"enum": ["monitoring.coreos.com/v1"]}, "kind": {"enum": [kind]},
                                     "metadata": meta, "spec": CUSTOM_SPECS[kind]}}
        if schema is None:
            fail(where, f"no schema {schema_file(obj.get('apiVersion', ''), kind)} in {self.folder}")
            return
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        for error in sorted(validator_cls(schema).iter_errors(obj), key=lambda e: list(e.absolute_path)):
            path = ".".join(str(p) for p in error.absolute_path) or "(root)"
            fail(where, f"schema: {path}: {error.message[:300]}")


# ---- payload checks ------------------------------------------------------------------------------

CONFIG_KEYS = {"plugins", "engine", "request", "network"}
ENGINE_KEYS = {"defaultGpuPolicy", "maxSharesPerGpu"}
REQUEST_KEYS = {"rdmaResources", "poolLabel"}
NETWORK_KEYS = {"tiers", "hyperNodes", "sameNodeIpc", "paths", "alignment", "transferOverheadUs"}
PATH_KINDS = {"same-node-ipc", "same-node-rdma", "nvlink-domain", "leaf", "spine", "zone", "beyond"}
TIER_PATHS = {"nvlink-domain", "leaf", "spine", "zone"}
ALIGNMENT_KEYS = {"PIX", "PXB", "PHB", "NODE", "SYS"}
KUBE_EXTENDER_KEYS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb", "weight", "enableHTTPS",
                      "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
TLS_CONFIG_KEYS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
VOLCANO_KEYS = {"extender.urlPrefix", "extender.httpTimeout", "extender.onSessionOpenVerb", "extender.onSessionCloseVerb",
                "extender.predicateVerb", "extender.prioritizeVerb", "extender.preemptableVerb",
                "extender.reclaimableVerb", "extender.queueOverusedVerb", "extender.jobEnqueueableVerb",
                "extender.jobReadyVerb", "extender.allocateFuncVerb",
                "extender.deallocateFuncVerb", "extender.ignorable", "extender.managedResources"}
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")


def unknown(where, found, known):
    for key in set(found) - known:
        fail(where, f"unknown key {key!r} (known: {', '.join(sorted(known))})")


def check_extender_config(text, where):
    docs = load_all(text, where)
    config = docs[0] if docs else {}
    if not isinstance(config, dict):
        fail(where, "config is not a map")
        return
    unknown(where, config, CONFIG_KEYS)
    for i, plugin in enumerate(config.get("plugins") or []):
        unknown(f"{where} plugins[{i}]", plugin, {"name", "weight", "args"})
        if not isinstance(plugin.get("weight", 0), int) or not 0 <= plugin.get("weight", 0) <= 100:
            fail(where, f"plugins[{i}].weight must be an integer 0..100")
        for key, value in (plugin.get("args") or {}).items():
            if not isinstance(value, str):
                fail(where, f"plugins[{i}].args.{key} must be a string (the config takes string args)")
    unknown(f"{where} engine", config.get("engine", {}), ENGINE_KEYS)
    if config.get("engine", {}).get("defaultGpuPolicy", "spread") not in ("binpack", "spread"):
        fail(where, "engine.defaultGpuPolicy must be binpack or spread")
    unknown(f"{where} request", config.get("request", {}), REQUEST_KEYS)
    for r in config.get("request", {}).get("rdmaResources", []):
        if "/" not in r:
            fail(where, f"request.rdmaResources entry {r!r} has no '/'")
    network = config.get("network", {})
    unknown(f"{where} network", network, NETWORK_KEYS)
    labels = [t.get("label") for t in network.get("tiers", [])]
    if len(labels) != len(set(labels)) or not all(labels):
        fail(where, "network.tiers labels must be non-empty and distinct")
    for t in network.get("tiers", []):
        unknown(f"{where} network.tiers", t, {"label", "path"})
        if t.get("path") not in TIER_PATHS:
            fail(where, f"network.tiers path {t.get('path')!r} not in {sorted(TIER_PATHS)}")
    unknown(f"{where} network.paths", network.get("paths", {}), PATH_KINDS)
    unknown(f"{where} network.alignment", network.get("alignment", {}), ALIGNMENT_KEYS)


def check_kube_scheduler_config(text, where, ctx):
    docs = load_all(text, where)
    if len(docs) != 1:
        fail(where, "expected one KubeSchedulerConfiguration document")
        return
    cfg = docs[0]
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1" or cfg.get("kind") != "KubeSchedulerConfiguration":
        fail(where, "not a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration")
    check_kube_extenders(cfg.get("extenders") or [], where, ctx)
    check_binpack_gpus((cfg.get("profiles") or [{}])[0], where, ctx)


def check_binpack_gpus(profile, where, ctx):
    # kubeScheduler.binpackGpus: NodeResourcesFit's MostAllocated over those resources, each
    # weight 1..100 (kube-scheduler's ValidateNodeResourcesFitArgs).
    fit = [p for p in profile.get("pluginConfig") or [] if p.get("name") == "NodeResourcesFit"]
    disabled = [p.get("name") for p in ((profile.get("plugins") or {}).get("score") or {}).get("disabled") or []]
    if not ctx["binpack"]:
        if fit or disabled:
            fail(where, "binpackGpus is empty but the profile configures NodeResourcesFit or disables score plugins")
        return
    if disabled != ["NodeResourcesBalancedAllocation"]:
        fail(where, f"binpackGpus: the profile must disable NodeResourcesBalancedAllocation only, not {disabled}")
    if len(fit) != 1:
        fail(where, "binpackGpus: the profile must configure NodeResourcesFit once")
        return
    strategy = (fit[0].get("args") or {}).get("scoringStrategy") or {}
    names = [r.get("name") for r in strategy.get("resources") or []]
    if strategy.get("type") != "MostAllocated" or names != ctx["binpack"]:
        fail(where, f"NodeResourcesFit must score MostAllocated over {ctx['binpack']}, not {strategy}")
    for r in strategy.get("resources") or []:
        if not isinstance(r.get("weight"), int) or not 1 <= r["weight"] <= 100:
            fail(where, f"NodeResourcesFit resource {r.get('name')} weight must be 1..100")


def check_kube_extenders(extenders, where, ctx):
    want = 2 if ctx["score_cpu"] else 1
    if len(extenders) != want:
        fail(where, f"expected {want} extenders (kubeScheduler.scoreCpuPods {ctx['score_cpu']}), got {len(extenders)}")
        return
    check_kube_extender(extenders[0], where, ctx)
    if want == 2:
        check_cpu_extender(extenders[1], f"{where} extenders[1]", ctx)


def check_cpu_extender(e, where, ctx):
    # Every pod reaches it (no managedResources); it scores only, and kube-scheduler allows one
    # binder (validateExtenders); a prioritize failure only drops its scores.
    check_kube_connection(e, where, ctx)
    if e.get("prioritizeVerb") != "prioritize-cpu" or not isinstance(e.get("weight"), int) or e["weight"] <= 0:
        fail(where, "the CPU-only pods' entry must name prioritize-cpu with a positive weight")
    for key in ("filterVerb", "preemptVerb", "bindVerb", "managedResources"):
        if key in e:
            fail(where, f"the CPU-only pods' entry must not set {key}")
    if e.get("ignorable") is not True:
        fail(where, "the CPU-only pods' entry must be ignorable")


def check_kube_extender(e, where, ctx):
    check_kube_connection(e, where, ctx)
    if e.get("ignorable") is not False or e.get("bindVerb") != "bind":
        fail(where, "the binding extender must not be ignorable")
    names = [r["name"] for r in e.get("managedResources", [])]
    if len(names) != len(set(names)) or "nvidia.com/gpu" not in names:
        fail(where, "managedResources must be distinct and include nvidia.com/gpu")


def check_kube_connection(e, where, ctx):
    unknown(where, e, KUBE_EXTENDER_KEYS)
    unknown(f"{where} tlsConfig", e.get("tlsConfig", {}), TLS_CONFIG_KEYS)
    expected_url = f"{ctx['scheme']}://{ctx['fullname']}-extender.{ctx['namespace']}.svc:{ctx['service_port']}/scheduler"
    if e.get("urlPrefix") != expected_url:
        fail(where, f"urlPrefix {e.get('urlPrefix')!r} != the extender Service {expected_url!r}")
    if e.get("enableHTTPS") is not ctx["tls"]:
        fail(where, f"enableHTTPS must be {ctx['tls']} to match extender.tls.enabled")
    if ctx["tls"] and "tlsConfig" not in e:
        fail(where, "TLS on but no tlsConfig")
    tls_config = e.get("tlsConfig") or {}
    if ctx["tls"] and not ctx["insecure"] and not tls_config.get("caFile"):
        fail(where, "TLS verified against a CA but no tlsConfig.caFile")
    if ctx["tls"] and tls_config.get("serverName") not in (None, f"{ctx['fullname']}-extender.{ctx['namespace']}.svc"):
        fail(where, f"tlsConfig.serverName {tls_config.get('serverName')!r} is not the extender Service's name")
    if bool(tls_config.get("certFile") and tls_config.get("keyFile")) != ctx["mtls"]:
        fail(where, f"tlsConfig certFile/keyFile {'missing' if ctx['mtls'] else 'set'}, "
                    f"but the extender {'requires' if ctx['mtls'] else 'does not require'} a client certificate")
    if not GO_DURATION.match(str(e.get("httpTimeout", ""))):
        fail(where, "httpTimeout is not a Go duration")


def check_volcano_conf(text, where, ctx):
    docs = load_all(text, where)
    args = None
    for tier in (docs[0] if docs else {}).get("tiers", []):
        for plugin in tier.get("plugins", []):
            if plugin.get("name") == "extender":
                args = plugin.get("arguments")
    if not isinstance(args, dict):
        fail(where, "no extender plugin")
        return
    unknown(where, args, VOLCANO_KEYS)
    url = f"{ctx['scheme']}://{ctx['fullname']}-extender.{ctx['namespace']}.svc:{ctx['service_port']}/volcano"
    if args.get("extender.urlPrefix") != url:
        fail(where, f"extender.urlPrefix {args.get('extender.urlPrefix')!r} != {url!r}")
    if not GO_DURATION.match(str(args.get("extender.httpTimeout", ""))):
        fail(where, "extender.httpTimeout is not a Go duration")
    if args.get("extender.ignorable") is not False:
        fail(where, "extender.ignorable must be false")


# ---- the objects -------------------------------------------------------------------------------

def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_templates(objs):
    return [(o, o["spec"]["template"]) for o in objs if o["kind"] in ("Deployment", "DaemonSet")]


def help_text(binary, sub, cache={}):
    if sub not in cache:
        try:
            cache[sub] = subprocess.run([binary, sub, "--help"], capture_output=True, text=True, timeout=20).stdout
        except OSError:
            cache[sub] = ""
    return cache[sub]


def check_case(path, notes_path, schemas, toposched, opts):
    case = os.path.basename(path)[:-len(".yaml")]
    text = open(path, encoding="utf-8").read()
    m = re.match(r"# case: mode=(\S+) release=(\S+) namespace=(\S+) values=(\S*)", text)
    if not m:
        fail(case, "missing '# case:' header")
        return 0
    mode, release, namespace, values = m.groups()
    objs = load_all(text, case)
    if not objs:
        fail(case, "rendered nothing")
        return 0
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)

    deployments = {o["metadata"]["name"]: o for o in by_kind.get("Deployment", [])}
    ext_deploy = next((o for n, o in deployments.items() if n.endswith("-extender")), None)
    if ext_deploy is None:
        fail(case, "no extender Deployment")
        return len(objs)
    fullname = ext_deploy["metadata"]["name"][:-len("-extender")]
    args = ext_deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    tls = "--tls-cert" in args
    values_doc = (yaml.safe_load(open(values, encoding="utf-8")) if values else None) or {}
    tls_values = ((values_doc.get("extender") or {}).get("tls") or {})
    service = next((o for o in by_kind.get("Service", []) if o["metadata"]["name"] == f"{fullname}-extender"), None)
    ctx = {"fullname": fullname, "namespace": namespace, "tls": tls, "scheme": "https" if tls else "http",
           "mtls": "--tls-client-ca" in args, "insecure": tls_values.get("insecureSkipVerify") is True,
           "service_port": service["spec"]["ports"][0]["port"] if service else None,
           "score_cpu": (values_doc.get("kubeScheduler") or {}).get("scoreCpuPods", True) is not False,
           "binpack": (values_doc.get("kubeScheduler") or {}).get("binpackGpus", ["nvidia.com/gpu", "amd.com/gpu"])}

    names = set()
    for i, o in enumerate(objs):
        where = f"{case}: {o.get('kind', '?')}/{o.get('metadata', {}).get('name', '?')}"
        if not isinstance(o, dict) or not o.get("apiVersion") or not o.get("kind") or not o.get("metadata", {}).get("name"):
            fail(f"{case}: document {i}", "apiVersion, kind and metadata.name are required")
            continue
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        if key in names:
            fail(where, "rendered twice")
        names.add(key)
        ns = o["metadata"].get("namespace")
        if o["kind"] in CLUSTER_SCOPED:
            if ns:
                fail(where, "cluster-scoped object with a namespace")
        elif ns != namespace:
            fail(where, f"namespace {ns!r}, expected the release namespace {namespace!r}")
        labels = o["metadata"].get("labels") or {}
        for k, v in {"app.kubernetes.io/instance": release, "app.kubernetes.io/part-of": "toposched"}.items():
            if labels.get(k) != v:
                fail(where, f"label {k}={labels.get(k)!r}, expected {v!r}")
        for k in ("app.kubernetes.io/managed-by", "helm.sh/chart", "app.kubernetes.io/version"):
            if k not in labels:
                fail(where, f"label {k} missing")
        if not o["metadata"]["name"].startswith(fullname) and o["kind"] != "Namespace":
            fail(where, f"name does not start with the release's prefix {fullname!r}")
        schemas.validate(o, where)

    # Workloads: selectors, service accounts, config maps, security.
    accounts = {o["metadata"]["name"] for o in by_kind.get("ServiceAccount", [])}
    config_maps = {o["metadata"]["name"]: o for o in by_kind.get("ConfigMap", [])}
    for o, template in pod_templates(objs):
        where = f"{case}: {o['kind']}/{o['metadata']['name']}"
        pod_labels = template["metadata"]["labels"]
        if not selects(o["spec"]["selector"]["matchLabels"], pod_labels):
            fail(where, "selector does not select its own pod template")
        if pod_labels.get("app.kubernetes.io/component") not in ("agent", "extender", "scheduler"):
            fail(where, "pod template lacks app.kubernetes.io/component")
        spec = template["spec"]
        if spec.get("serviceAccountName") not in accounts:
            fail(where, f"serviceAccountName {spec.get('serviceAccountName')!r} is not rendered")
        for v in spec.get("volumes", []):
            if "configMap" in v and v["configMap"]["name"] not in config_maps:
                fail(where, f"volume {v['name']} names ConfigMap {v['configMap']['name']} that is not rendered")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            ok = (sc.get("runAsNonRoot") is True and sc.get("readOnlyRootFilesystem") is True
                  and sc.get("allowPrivilegeEscalation") is False and sc.get("runAsUser", 0) != 0
                  and "ALL" in sc.get("capabilities", {}).get("drop", [])
                  and sc.get("seccompProfile", {}).get("type") == "RuntimeDefault")
            if not ok:
                fail(where, f"container {c['name']} is not non-root / read-only / no-caps / RuntimeDefault")
            for mount in c.get("volumeMounts", []):
                if mount["name"] not in volumes:
                    fail(where, f"mount {mount['name']} has no volume")
                elif "hostPath" in volumes[mount["name"]] and not mount.get("readOnly"):
                    fail(where, f"hostPath mount {mount['mountPath']} is writable")
            env = {e["name"] for e in c.get("env", [])}
            for arg in c.get("args", []) + c.get("command", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
                    if var not in env:
                        fail(where, f"$({var}) in args is no env var of the container")
            # toposched-extender is `toposched serve` (it accepts a leading "serve").
            if toposched and c.get("command") in (["/usr/local/bin/toposched"], ["/usr/local/bin/toposched-extender"]):
                sub = c["args"][0]
                text_help = help_text(toposched, sub)
                for arg in c["args"]:
                    if arg.startswith("--") and not re.search(r"(^|[^-A-Za-z0-9])" + re.escape(arg.split("=")[0]) + r"($|[^-A-Za-z0-9])", text_help):
                        fail(where, f"toposched {sub} --help does not mention {arg}")

    # The extender: env, probes, port, Service selecting the leader, PDB.
    ext_spec = ext_deploy["spec"]["template"]["spec"]
    ext_c = ext_spec["containers"][0]
    ext_labels = ext_deploy["spec"]["template"]["metadata"]["labels"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in ext_c.get("env", [])}
    if env.get("POD_NAME") != "metadata.name" or env.get("POD_NAMESPACE") != "metadata.namespace":
        fail(case, "extender needs POD_NAME and POD_NAMESPACE from the downward API (Lease identity, leader label)")
    port = int(args[args.index("--port") + 1])
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = ext_c.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or get.get("port") != port or get.get("scheme", "HTTP") != ctx["scheme"].upper():
            fail(case, f"extender {probe} must GET {path} on {port} over {ctx['scheme']}")
    if ext_deploy["spec"]["replicas"] < 2 and "--leader-elect" in args:
        fail(case, "extender runs fewer than 2 replicas")
    if f"{fullname}-extender" != args[args.index("--lease-name") + 1]:
        fail(case, "--lease-name differs from the Lease the Role grants")
    if service is None:
        fail(case, "no extender Service")
    else:
        selector = dict(service["spec"]["selector"])
        if selector.pop("toposched.io/leader", None) != "true":
            fail(case, "the extender Service must select toposched.io/leader=\"true\" (only the leader binds)")
        if not selects(selector, ext_labels):
            fail(case, "the extender Service does not select the extender pods")
        if service["spec"]["ports"][0]["targetPort"] != port:
            fail(case, "Service targetPort != --port")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        if not selects(pdb["spec"]["selector"]["matchLabels"], ext_labels):
            fail(case, "the PDB does not select the extender pods")
        if pdb["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow" or "minAvailable" in pdb["spec"]:
            fail(case, "the PDB must be maxUnavailable with unhealthyPodEvictionPolicy AlwaysAllow")
    all_pod_labels = [t["metadata"]["labels"] for _, t in pod_templates(objs)]
    for np in by_kind.get("NetworkPolicy", []):
        if not any(selects(np["spec"]["podSelector"]["matchLabels"], lbl) for lbl in all_pod_labels):
            fail(case, f"NetworkPolicy {np['metadata']['name']} selects no pods of the chart")
        for rule in np["spec"].get("ingress", []):
            if not rule.get("from"):
                fail(case, f"NetworkPolicy {np['metadata']['name']}: an ingress rule without sources admits everyone")
    for sm in by_kind.get("ServiceMonitor", []):
        targets = [s for s in by_kind.get("Service", []) if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        if not targets:
            fail(case, "the ServiceMonitor selects no Service")
        for s in targets:
            if "toposched.io/leader" in s["spec"]["selector"]:
                fail(case, "the ServiceMonitor must scrape every replica, not only the leader")
            if sm["spec"]["endpoints"][0]["port"] not in [p["name"] for p in s["spec"]["ports"]]:
                fail(case, "the ServiceMonitor's port is not a port of its Service")

    # RBAC: exactly the pinned grants; bindings join rendered roles (or the upstream scheduler
    # roles) and rendered service accounts.
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in by_kind.get("ClusterRole", []) + by_kind.get("Role", [])}
    agent = any(o["metadata"]["name"].endswith("-agent") for o in by_kind.get("DaemonSet", []))
    hyper_nodes = False
    for cm in by_kind.get("ConfigMap", []):
        if cm["metadata"]["name"] == f"{fullname}-extender-config":
            rendered = yaml.safe_load(cm.get("data", {}).get("config.yaml", "")) or {}
            hyper_nodes = bool((rendered.get("network") or {}).get("hyperNodes"))
    # extender.dra: the extender Deployment's `--dra true`.
    dra = False
    for d in by_kind.get("Deployment", []):
        if d["metadata"]["name"] == f"{fullname}-extender":
            args = d["spec"]["template"]["spec"]["containers"][0].get("args", [])
            dra = any(a == "--dra" and i + 1 < len(args) and args[i + 1] == "true" for i, a in enumerate(args))
    expected = expected_roles(fullname, namespace, mode, agent, hyper_nodes, dra)
    if set(roles) != set(expected):
        fail(case, f"roles {sorted(roles)} != expected {sorted(expected)}")
    for key, grants in expected.items():
        if key in roles and grants_of(roles[key]["rules"]) != grants:
            got = grants_of(roles[key]["rules"])
            fail(case, f"{key[0]} {key[2]}: extra {sorted(got - grants)}, missing {sorted(grants - got)}")
    for o in by_kind.get("ClusterRoleBinding", []) + by_kind.get("RoleBinding", []):
        ref = o["roleRef"]
        ns = o["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        if (ref["kind"], ns, ref["name"]) not in roles and ref["name"] not in BUILTIN_ROLES:
            fail(case, f"{o['kind']} {o['metadata']['name']} references {ref['kind']} {ref['name']} that is not rendered")
        if ref["name"] in BUILTIN_ROLES and mode != "secondary":
            fail(case, f"{ref['name']} bound outside secondary mode")
        for s in o["subjects"]:
            if s["kind"] != "ServiceAccount" or s["name"] not in accounts or s.get("namespace") != namespace:
                fail(case, f"{o['kind']} {o['metadata']['name']} subject {s} is not a rendered ServiceAccount")
    for o in objs:
        if o["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
            blob = json.dumps(o)
            if "*" in blob or '"secrets"' in blob or "cluster-admin" in blob:
                fail(case, f"{o['kind']} {o['metadata']['name']}: wildcard, Secrets or cluster-admin")

    # Mode switch and payloads.
    sched = deployments.get(f"{fullname}-scheduler")
    volcano_cm = config_maps.get(f"{fullname}-volcano-scheduler")
    if (sched is not None) != (mode == "secondary") or (volcano_cm is not None) != (mode == "volcano"):
        fail(case, f"mode {mode}: scheduler Deployment {'present' if sched else 'absent'}, "
                   f"volcano ConfigMap {'present' if volcano_cm else 'absent'}")
    ext_cm = config_maps.get(f"{fullname}-extender-config")
    if ext_cm is None:
        fail(case, "no extender config ConfigMap")
    else:
        check_extender_config(ext_cm["data"]["config.yaml"], f"{case}: extender config.yaml")
        if "/etc/toposched/config/config.yaml" != args[args.index("--config") + 1]:
            fail(case, "--config does not point at the mounted ConfigMap")
    if sched is not None:
        cm = config_maps.get(f"{fullname}-scheduler-config")
        check_kube_scheduler_config(cm["data"]["scheduler-config.yaml"], f"{case}: scheduler-config.yaml", ctx)
    if volcano_cm is not None:
        check_volcano_conf(volcano_cm["data"]["volcano-scheduler.conf"], f"{case}: volcano-scheduler.conf", ctx)
    check_tls(case, mode, by_kind, ext_deploy, sched, config_maps, tls_values, ctx, opts)
    alerts, panels = check_monitoring(by_kind, case, opts)
    if alerts or panels:
        print(f"check.py: {case}: {alerts} alerts, {panels} dashboard panels checked against "
              f"{len(opts.metrics)} exported metrics")
    if notes_path:
        notes = open(notes_path, encoding="utf-8").read()
        if mode == "none":
            block = notes[notes.find("extenders:"):]
            block = block[:block.find("\n\n")] if "\n\n" in block else block
            docs = load_all(block, f"{case}: NOTES.txt")
            if not docs or not docs[0].get("extenders"):
                fail(case, "NOTES.txt in mode none must print an `extenders:` block")
            else:
                check_kube_extenders(docs[0]["extenders"], f"{case}: NOTES.txt extenders", ctx)
    return len(objs)


# ---- TLS between the scheduler and the extender --------------------------------------------------

TLS_EXPECTATIONS = {"off", "generated-mtls", "own-tls", "own-mtls"}
TLS_SECRET_KEYS = {"tls.crt", "tls.key", "ca.crt"}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$")


def mounted_secret_files(template, container):
    """{absolute file path: (Secret name, key)} for the Secret volumes a container mounts."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes.get(mount["name"], {}).get("secret")
        if not secret:
            continue
        items = secret.get("items") or [{"key": k, "path": k} for k in sorted(TLS_SECRET_KEYS)]
        for item in items:
            files[mount["mountPath"].rstrip("/") + "/" + item["path"]] = (secret["secretName"], item["key"])
    return files


def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def openssl(args, where, data=None):
    r = subprocess.run(["openssl"] + args, capture_output=True, text=True, timeout=30, input=data)
    if r.returncode != 0:
        fail(where, f"openssl {' '.join(args[:2])}: {(r.stdout + r.stderr).strip()[:300]}")
    return r.stdout


def check_generated_certificates(secrets, server_name, client_name, ctx, where):
    """The generated certificates chain to their ca.crt for their purpose, name what they must,
    and match their keys (openssl; skipped, saying so, without it)."""
    if not shutil.which("openssl"):
        print(f"check.py: {where}: SKIPPED the certificate checks: no openssl on PATH")
        return
    work = tempfile.mkdtemp(prefix="toposched-tls-")
    try:
        def write(name, key):
            path = os.path.join(work, f"{name}-{key}")
            with open(path, "wb") as f:
                f.write(base64.b64decode(secrets[name]["data"][key]))
            return path
        host = f"{ctx['fullname']}-extender.{ctx['namespace']}.svc"
        for name, purpose in ((server_name, "sslserver"), (client_name, "sslclient")):
            if name not in secrets:
                continue
            crt, key, ca = write(name, "tls.crt"), write(name, "tls.key"), write(name, "ca.crt")
            w = f"{where} Secret/{name}"
            openssl(["verify", "-purpose", purpose, "-CAfile", ca, crt], w)
            if purpose == "sslserver":
                # The names the scheduler may call it by: serverName (.svc), and the short forms.
                text = openssl(["x509", "-in", crt, "-noout", "-ext", "subjectAltName"], w)
                for san in (host, f"{ctx['fullname']}-extender", f"{ctx['fullname']}-extender.{ctx['namespace']}"):
                    if f"DNS:{san}" not in text:
                        fail(w, f"the server certificate does not name {san} ({text.strip()})")
            if openssl(["x509", "-in", crt, "-noout", "-pubkey"], w) != openssl(["pkey", "-in", key, "-pubout"], w):
                fail(w, "tls.key is not the key of tls.crt")
        if server_name in secrets and client_name in secrets and \
                secrets[server_name]["data"]["ca.crt"] != secrets[client_name]["data"]["ca.crt"]:
            fail(where, "the generated server and client Secrets hold different CAs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_tls(case, mode, by_kind, ext_deploy, sched, config_maps, tls_values, ctx, opts):
    where = f"{case}: TLS"
    expect = opts.tls.get(case)
    if expect is None:
        fail(where, "no --tls expectation for this case (tests/chart/run.sh)")
    args = ext_deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    fullname, generated_server, generated_client = ctx["fullname"], f"{ctx['fullname']}-extender-tls", \
        f"{ctx['fullname']}-scheduler-client-tls"
    secrets = {o["metadata"]["name"]: o for o in by_kind.get("Secret", [])}
    got = ("off" if not ctx["tls"] else ("generated" if generated_server in secrets else "own") +
           ("-mtls" if ctx["mtls"] else "-tls"))
    if expect is not None and got != expect:
        fail(where, f"renders {got}, expected {expect}")
    if mode == "volcano" and ctx["mtls"]:
        fail(where, "--tls-client-ca in volcano mode: Volcano's extender client sends no certificate")
    if ctx["tls"] != ("--tls-key" in args) or (ctx["mtls"] and not ctx["tls"]):
        fail(where, "--tls-cert, --tls-key and --tls-client-ca do not go together")

    # Generated Secrets: exactly these, complete, annotated, and their certificates sound.
    expected_secrets = set()
    if got.startswith("generated"):
        expected_secrets = {generated_server} | ({generated_client} if ctx["mtls"] else set())
    if set(secrets) != expected_secrets:
        fail(where, f"Secrets rendered {sorted(secrets)}, expected {sorted(expected_secrets)}")
    for name, secret in secrets.items():
        w = f"{where} Secret/{name}"
        if secret.get("type") != "kubernetes.io/tls" or set(secret.get("data") or {}) != TLS_SECRET_KEYS:
            fail(w, f"must be kubernetes.io/tls with exactly {sorted(TLS_SECRET_KEYS)}")
            continue
        ann = secret["metadata"].get("annotations") or {}
        not_after, renew_after = ann.get("toposched.io/tls-not-after", ""), ann.get("toposched.io/tls-renew-after", "")
        if not (RFC3339.match(not_after) and RFC3339.match(renew_after)) or not renew_after < not_after:
            fail(w, f"toposched.io/tls-not-after {not_after!r} and tls-renew-after {renew_after!r}: "
                    "RFC 3339 times, renewal first")
    if expected_secrets and set(secrets) == expected_secrets:
        check_generated_certificates(secrets, generated_server, generated_client, ctx, where)

    # Every Secret volume names a rendered Secret or one the values file names.
    named = {tls_values.get("secretName"), tls_values.get("clientSecretName")} - {None, ""}
    for o, template in pod_templates([ext_deploy] + ([sched] if sched else [])):
        for v in template["spec"].get("volumes", []):
            name = (v.get("secret") or {}).get("secretName")
            if name and name not in secrets and name not in named:
                fail(where, f"{o['metadata']['name']} mounts Secret {name}: neither rendered nor named in the values")

    # The extender's files are keys of the Secret it mounts.
    ext_files = mounted_secret_files(ext_deploy["spec"]["template"], ext_deploy["spec"]["template"]["spec"]["containers"][0])
    served = {}
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-client-ca", "ca.crt")):
        path = flag_value(args, flag)
        if path is None:
            continue
        if ext_files.get(path, (None, None))[1] != key:
            fail(where, f"extender {flag} {path} is not key {key} of a mounted Secret ({ext_files})")
        served[key] = ext_files.get(path, (None, None))[0]

    # The secondary scheduler's tlsConfig files: the CA of the extender's Secret, the client pair.
    if sched is not None:
        container = sched["spec"]["template"]["spec"]["containers"][0]
        files = mounted_secret_files(sched["spec"]["template"], container)
        cfg = yaml.safe_load(config_maps[f"{fullname}-scheduler-config"]["data"]["scheduler-config.yaml"])
        for field, key, tls_config in ((f, k, entry.get("tlsConfig") or {})
                                       for entry in (cfg.get("extenders") or [{}])
                                       for f, k in (("caFile", "ca.crt"), ("certFile", "tls.crt"), ("keyFile", "tls.key"))):
            path = tls_config.get(field)
            if path is None:
                continue
            secret, got_key = files.get(path, (None, None))
            if got_key != key:
                fail(where, f"scheduler tlsConfig.{field} {path} is not key {key} of a mounted Secret ({files})")
            elif field == "caFile" and secret != served.get("tls.crt"):
                fail(where, f"scheduler tlsConfig.caFile comes from Secret {secret}, the extender serves {served.get('tls.crt')}'s")
            elif field != "caFile" and expected_secrets and secret != generated_client:
                fail(where, f"scheduler tlsConfig.{field} comes from Secret {secret}, not the generated {generated_client}")
        annotations = sched["spec"]["template"]["metadata"].get("annotations") or {}
        if ("checksum/tls" in annotations) != bool(expected_secrets):
            fail(where, "the scheduler must carry checksum/tls exactly when the chart generates the certificates "
                        "(kube-scheduler reads caFile once)")


# ---- monitoring ------------------------------------------------------------------------------

def run_promtool(promtool, args, where):
    try:
        r = subprocess.run([promtool] + args, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(where, f"promtool {args[0]} {args[1]}: {e}")
        return False
    if r.returncode != 0:
        fail(where, f"promtool {' '.join(args[:2])} exited {r.returncode}:\n{(r.stdout + r.stderr).strip()}")
        return False
    return True


def check_prometheus_rule(rule, case, metrics_services, opts):
    """The rule's expressions against the exported metrics; promtool check rules and, when this
    case has one, promtool test rules. Returns the number of alerts."""
    where = f"{case}: PrometheusRule/{rule['metadata']['name']}"
    names, count = set(), 0
    for group in rule.get("spec", {}).get("groups", []):
        for r in group.get("rules", []):
            count += 1
            alert = r.get("alert", "?")
            if alert in names:
                fail(where, f"alert {alert} defined twice")
            names.add(alert)
            expr = str(r.get("expr", ""))
            monitoring.check_expr(expr, opts.metrics, f"{where} {alert}", fail, allow_prometheus=True)
            for job in re.findall(r'\bjob="([^"]*)"', expr):
                if metrics_services and job not in metrics_services:
                    fail(where, f"{alert}: job=\"{job}\" is no Service the ServiceMonitor scrapes ({sorted(metrics_services)})")
    if not opts.promtool:
        return count
    work = tempfile.mkdtemp(prefix="toposched-rules-")
    try:
        rules_file = os.path.join(work, "rules.yaml")
        with open(rules_file, "w") as f:
            yaml.safe_dump(rule["spec"], f, sort_keys=False)
        if run_promtool(opts.promtool, ["check", "rules", "--lint=all", "--lint-fatal", rules_file], where):
            print(f"check.py: {case}: promtool check rules: {count} rules valid")
        test_file = opts.rule_tests.get(case)
        if test_file:
            # The tests compare labels, not the annotations' prose: strip them (check rules above
            # parsed their templates).
            bare = yaml.safe_load(yaml.safe_dump(rule["spec"]))
            for group in bare["groups"]:
                for r in group["rules"]:
                    r.pop("annotations", None)
            with open(os.path.join(work, "bare-rules.yaml"), "w") as f:
                yaml.safe_dump(bare, f, sort_keys=False)
            tests = yaml.safe_load(open(test_file, encoding="utf-8"))
            tests["rule_files"] = ["bare-rules.yaml"]
            with open(os.path.join(work, "alerts_test.yaml"), "w") as f:
                yaml.safe_dump(tests, f, sort_keys=False)
            if run_promtool(opts.promtool, ["test", "rules", os.path.join(work, "alerts_test.yaml")],
                            f"{where} ({os.path.basename(test_file)})"):
                print(f"check.py: {case}: promtool test rules {test_file}: passed")
            opts.rule_tests_run.add(case)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return count


def check_dashboard(cm, case, opts):
    """Every dashboard JSON in a ConfigMap: parses, ids and uid set, every query a valid use of
    exported metrics, every promised subject present. Returns the number of panels."""
    panels = 0
    for key, text in (cm.get("data") or {}).items():
        where = f"{case}: ConfigMap/{cm['metadata']['name']} {key}"
        if not key.endswith(".json"):
            fail(where, "a dashboard ConfigMap holds only *.json dashboards")
            continue
        try:
            dash = json.loads(text)
        except ValueError as e:
            fail(where, f"does not parse as JSON: {e}")
            continue
        for field in ("uid", "title", "panels", "schemaVersion"):
            if not dash.get(field):
                fail(where, f"no {field}")
        ids, used = [], set()
        def walk(ps):
            for p in ps:
                ids.append(p.get("id"))
                if p.get("type") != "row":
                    if not p.get("targets"):
                        fail(where, f"panel {p.get('title')!r} has no query")
                    if (p.get("datasource") or {}).get("uid") != "${datasource}":
                        fail(where, f"panel {p.get('title')!r} does not query the $datasource variable")
                walk(p.get("panels", []))
        walk(dash.get("panels", []))
        panels += len(ids)
        if len(ids) != len(set(ids)) or None in ids:
            fail(where, "panel ids must be set and unique")
        for w, expr in monitoring.dashboard_exprs(dash):
            used |= monitoring.check_expr(expr, opts.metrics, f"{where} {w}", fail)
        for var in dash.get("templating", {}).get("list", []):
            q = var.get("query")
            q = q.get("query", "") if isinstance(q, dict) else str(q or "")
            m = re.match(r"^label_values\((.*),\s*([a-zA-Z_]+)\)$", q)
            if m:
                used |= monitoring.check_expr(m.group(1), opts.metrics, f"{where} variable {var.get('name')}", fail,
                                              series_selector=True)
        for subject, metric in DASHBOARD_SUBJECTS.items():
            if metric not in used:
                fail(where, f"no panel shows {subject} ({metric})")
    return panels


def check_monitoring(by_kind, case, opts):
    """The PrometheusRules and dashboard ConfigMaps of one render; returns (alerts, panels)."""
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    metrics_services = {name for sm in by_kind.get("ServiceMonitor", []) for name, s in services.items()
                        if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])}
    alerts = sum(check_prometheus_rule(r, case, metrics_services, opts) for r in by_kind.get("PrometheusRule", []))
    panels = sum(check_dashboard(cm, case, opts) for cm in by_kind.get("ConfigMap", [])
                 if "grafana_dashboard" in (cm["metadata"].get("labels") or {}))
    return alerts, panels


def check_example(path, schemas):
    """An example workload: valid, opts in to the toposched scheduler, reads our annotations."""
    where = os.path.basename(path)
    docs = load_all(open(path, encoding="utf-8").read(), where)
    if not docs:
        fail(where, "no objects")
    for o in docs:
        w = f"{where}: {o.get('kind')}/{o.get('metadata', {}).get('name')}"
        schemas.validate(o, w)
        pod = o["spec"]["template"] if o["kind"] != "Pod" else o
        if pod["spec"].get("schedulerName") != "toposched":
            fail(w, "spec.schedulerName must be toposched (the chart's default scheduler name)")
        labels = pod.get("metadata", {}).get("labels", {})
        if "llm-d.ai/role" in labels:
            if labels["llm-d.ai/role"] not in ("prefill", "decode") or "toposched.io/pool" not in labels:
                fail(w, "a P/D pod needs llm-d.ai/role prefill|decode and toposched.io/pool")
            if not re.match(r"^[0-9]+:[0-9]+$", pod["metadata"].get("annotations", {}).get("toposched.io/pd-ratio", "")):
                fail(w, "toposched.io/pd-ratio must look like 1:2")
        for c in pod["spec"]["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
                if ref.startswith("metadata.annotations[") and not re.match(
                        r"^metadata\.annotations\['toposched\.io/(nccl-ib-hca|visible-gpus|allocation)'\]$", ref):
                    fail(w, f"env {e['name']} reads an annotation toposched does not write: {ref}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--schemas", required=True)
    parser.add_argument("--toposched", default="")
    parser.add_argument("--examples", nargs="*", default=[], help="deploy/examples/*.yaml: schema + opt-in checks")
    parser.add_argument("--promtool", default="", help="promtool binary; empty = the promtool checks are skipped")
    parser.add_argument("--rule-tests", action="append", default=[], metavar="CASE=FILE",
                        help="promtool unit tests of CASE's PrometheusRule")
    parser.add_argument("--tls", action="append", default=[], metavar="CASE=EXPECT",
                        help="what CASE must render between scheduler and extender: " + ", ".join(sorted(TLS_EXPECTATIONS)))
    parser.add_argument("cases", nargs="+")
    opts = parser.parse_args()
    opts.tls = dict(arg.split("=", 1) for arg in opts.tls)
    for case, expect in opts.tls.items():
        if expect not in TLS_EXPECTATIONS:
            parser.error(f"--tls {case}={expect}: not one of {sorted(TLS_EXPECTATIONS)}")
    opts.metrics = monitoring.exported_metrics(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if not opts.metrics:
        fail("metrics", "no metric registrations found in src/ and plugins/")
    opts.rule_tests = dict(arg.split("=", 1) for arg in opts.rule_tests)
    opts.rule_tests_run = set()
    toposched = opts.toposched if opts.toposched and os.access(opts.toposched, os.X_OK) else ""
    if os.path.isdir(opts.schemas):
        schemas = Schemas(opts.schemas)
    else:
        # As the C++ manifest tests do: without ../shared/k8s-schemas the schema check is
        # skipped (said loudly); every other check still runs.
        print(f"check.py: SKIPPED the Kubernetes schema check: no schemas at {opts.schemas}")
        schemas = NoSchemas()
    total = 0
    for arg in opts.cases:
        path, _, notes = arg.partition(":")
        count = check_case(path, notes or None, schemas, toposched, opts)
        print(f"check.py: {os.path.basename(path)[:-5]}: {count} objects")
        total += count
    for path in opts.examples:
        check_example(path, schemas)
    if opts.examples:
        print(f"check.py: {len(opts.examples)} example workload files")
    if not toposched:
        print("check.py: no toposched binary given or built: container flags not checked against --help")
    if opts.promtool:
        for case in set(opts.rule_tests) - opts.rule_tests_run:
            fail(case, f"--rule-tests names {opts.rule_tests[case]} but the case rendered no PrometheusRule")
    else:
        print("check.py: SKIPPED promtool check rules / test rules: no promtool given")
    if FAILURES:
        print(f"check.py: {len(FAILURES)} failure(s):", file=sys.stderr)
        for f in FAILURES:
            print("  " + f, file=sys.stderr)
        sys.exit(1)
    print(f"check.py: {total} objects in {len(opts.cases)} renders: all checks passed")


if __name__ == "__main__":
    main()
