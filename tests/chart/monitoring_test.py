#!/usr/bin/env python3
"""Tests of tests/chart/monitoring.py, the PromQL checker the chart tests rely on: each case is an
expression and the failures it must (or must not) produce, so a checker that lets a misuse
through fails here. Run by tests/chart/run.sh; by hand: python3 tests/chart/monitoring_test.py."""
import os
import unittest

import monitoring

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# A registry in the shape exported_metrics() returns.
METRICS = {
    "toposched_binds_total": ("counter", {"outcome"}),
    "toposched_kube_leader": ("gauge", set()),
    "toposched_request_duration_seconds": ("histogram", {"verb"}),
}


def failures(expr, allow_prometheus=False):
    out = []
    monitoring.check_expr(expr, METRICS, "expr", lambda where, message: out.append(message), allow_prometheus)
    return out


class CheckExpr(unittest.TestCase):
    CASES = [
        # (name, expression, a substring of each expected failure; [] = valid)
        ("counter through rate", 'sum by (outcome) (rate(toposched_binds_total{job="j", outcome="bound"}[5m]))', []),
        ("counter through increase, aggregation after", "sum(increase(toposched_binds_total[1h])) by (outcome)", []),
        ("counter read raw", "toposched_binds_total > 0", ["must be read through rate()"]),
        ("counter under sum only", "sum(toposched_binds_total)", ["not sum"]),
        ("gauge raw", 'sum by (namespace, job) (toposched_kube_leader{job="j"}) < 1', []),
        ("gauge under rate", "rate(toposched_kube_leader[5m])", ["a gauge has no rate"]),
        ("histogram quantile", "histogram_quantile(0.99, sum by (verb, le) (rate(toposched_request_duration_seconds_bucket[5m])))", []),
        ("histogram mean", "rate(toposched_request_duration_seconds_sum[5m]) / rate(toposched_request_duration_seconds_count[5m])", []),
        ("histogram by its family name", "toposched_request_duration_seconds", ["has no series of that name"]),
        ("bucket without quantile", "sum(rate(toposched_request_duration_seconds_bucket[5m]))", ["outside histogram_quantile"]),
        ("unknown metric", "rate(toposched_bind_total[5m])", ["not a metric the code exports"]),
        ("unknown label matcher", 'rate(toposched_binds_total{result="ok"}[5m])', ["has no label 'result'"]),
        ("le on a non-bucket series", 'rate(toposched_binds_total{le="1"}[5m])', ["has no label 'le'"]),
        ("grouping by a label no metric has", "sum by (verb) (rate(toposched_binds_total[5m]))", ["grouping by 'verb'"]),
        ("target labels are always there", 'sum by (pod) (toposched_kube_leader{namespace="n", instance="i"})', []),
        ("Grafana variables", 'sum by (outcome) (rate(toposched_binds_total{namespace="$namespace"}[$__rate_interval]))', []),
        ("no metric at all", "vector(1)", ["names no metric"]),
        ("up only in alerts", 'sum by (job) (up{job="j"}) < 1', ["not a metric"]),
    ]

    def test_cases(self):
        for name, expr, expected in self.CASES:
            with self.subTest(name):
                got = failures(expr)
                self.assertEqual(len(got), len(expected), got)
                for want, message in zip(expected, got):
                    self.assertIn(want, message)

    def test_series_selectors_skip_the_type_rules(self):
        got = []
        monitoring.check_expr('toposched_binds_total{namespace="$namespace", verb="x"}', METRICS, "var",
                              lambda where, message: got.append(message), series_selector=True)
        self.assertEqual(len(got), 1, got)  # the label is still checked, the raw counter is fine
        self.assertIn("has no label 'verb'", got[0])

    def test_up_allowed_in_alerts(self):
        self.assertEqual(failures('sum by (job) (up{job="j"}) < 1 or absent(up{job="j"})', allow_prometheus=True), [])


class ExportedMetrics(unittest.TestCase):
    def test_reads_the_registrations_of_the_sources(self):
        metrics = monitoring.exported_metrics(ROOT)
        # Registered in src/extender/service.cc and src/kube/kube_source.cc, with these labels.
        self.assertEqual(metrics["toposched_requests_total"], ("counter", {"verb", "code"}))
        self.assertEqual(metrics["toposched_request_duration_seconds"], ("histogram", {"verb"}))
        self.assertEqual(metrics["toposched_bind_to_ready_seconds"], ("histogram", set()))
        self.assertEqual(metrics["toposched_kube_leader"], ("gauge", set()))
        self.assertEqual(metrics["toposched_kube_restore_errors_total"], ("counter", set()))
        self.assertNotIn("name", metrics)  # Registry's own declarations are not registrations


if __name__ == "__main__":
    unittest.main()
