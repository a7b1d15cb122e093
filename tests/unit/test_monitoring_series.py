"""Every metric the chart's alerts and dashboards read is one something exposes: vLLM's names are
the vLLM emulator's (and the contract test checks them against vLLM's own; the emulator exposes
besides only what the operator's own queries read), the operator's are
registered by controller.metrics, the gateway's by the sync process; DCGM's and HAProxy's are the
exporters' names (the live test, tests/integration/test_monitoring_live.py, scrapes stand-ins)."""

from __future__ import annotations

import re

from devtools import alerts, dashboards, series

from glm_operator.clients import prometheus
from glm_operator.controller import metrics
from tests.harness.vllm_emulator import VLLM_SERIES


def all_exprs() -> list[str]:
    exprs = [a.expr for a in alerts.ALERTS]
    for view in dashboards.VIEWS:
        exprs += view.queries() + [v.query for v in view.variables]
    return exprs


#: What the operator itself queries (the autoscaler, the KV-cache reader).
OPERATOR_QUERIES = [
    prometheus.DEFAULT_WAITING_QUERY,
    prometheus.DEFAULT_RUNNING_QUERY,
    prometheus.DEFAULT_KV_CACHE_QUERY,
]


def operator_sample_names() -> set[str]:
    names = set()
    for family in metrics.REGISTRY.collect():
        names.add(family.name)
        names |= {f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_sum", "_count")}
    return names


def test_every_selector_is_a_known_metric() -> None:
    known = {value for key, value in vars(series).items() if key.isupper() and isinstance(value, str)}
    for expr in all_exprs() + OPERATOR_QUERIES:
        assert series.metric_names(expr) <= known, expr
        # nothing else is selected: a bare identifier before { or [ is one of ours
        for name in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*[{\[]", expr):
            assert name in known or name.startswith("$"), (name, expr)


def test_vllm_names_are_the_emulators() -> None:
    used = series.vllm_names(all_exprs() + OPERATOR_QUERIES)
    assert used <= set(VLLM_SERIES), used - set(VLLM_SERIES)
    # and the emulator exposes nothing the monitoring or the operator does not read (besides a
    # histogram's sum/count)
    exposed = {n for n in VLLM_SERIES if not n.endswith(("_sum", "_count"))}
    assert exposed == used
    assert series.VLLM_CACHE_CONFIG_INFO in used - series.vllm_names(all_exprs())  # the operator's only


def test_operator_names_are_registered() -> None:
    used = {n for e in all_exprs() for n in series.metric_names(e) if n.startswith("glm_operator_")}
    assert used <= operator_sample_names(), used - operator_sample_names()


def test_alerts_name_their_fix() -> None:
    assert len({a.name for a in alerts.ALERTS}) == len(alerts.ALERTS)
    for alert in alerts.ALERTS:
        assert alert.runbook and alert.summary and alert.description, alert.name
        assert alert.severity in ("info", "warning", "critical")


def test_dashboards_have_unique_uids_and_ref_ids() -> None:
    assert len({v.uid for v in dashboards.VIEWS}) == 5
    for view in dashboards.VIEWS:
        board = dashboards.build(view)
        for panel in board["panels"]:
            ref_ids = [t["refId"] for t in panel.get("targets", [])]
            assert len(set(ref_ids)) == len(ref_ids) and all(ref_ids), (view.uid, panel["title"])
