"""The autoscaler's metrics contract with the real vLLM (the default image's release): the series
its PromQL reads exist, and vLLM labels them with ``model_name`` = the served model name the
operator renders. With the PodMonitor's relabelling (``namespace``; tests/unit/test_pod_monitor.py),
every label the queries select on is accounted for."""

from __future__ import annotations

import re
from typing import Any

from glm_operator.clients.prometheus import DEFAULT_RUNNING_QUERY, DEFAULT_WAITING_QUERY, render_query
from glm_operator.commands.vllm_flags import probe, vllm_python
from glm_operator.monitoring import alerts, dashboards
from glm_operator.monitoring import series as monitoring_series
from glm_operator.render.monitoring import SCRAPE_TARGET_LABELS, VLLM_SERIES_LABELS
from tests.harness.vllm_emulator import VLLM_SERIES

from ..unit.test_pod_monitor import selected_labels
from .matrix import FIXTURE_NODES, argvs_of, catalog_config, desired_for

MODEL = "zai-org/glm-4-9b-chat"


def served_argv() -> tuple[list[str], str]:
    """The vLLM argv the operator renders for MODEL on an L4, and its served model name."""
    desired = desired_for(
        {"model": {"id": MODEL}, "contextLength": 8192, "gpu": {"products": ["L4"]}}, FIXTURE_NODES
    )
    (rendered, *_) = list(argvs_of("glm-4-9b", desired, MODEL))
    argv = list(rendered.argv)
    return argv, argv[argv.index("--served-model-name") + 1]


def test_vllm_labels_the_queue_series_the_autoscaler_reads_with_the_served_model_name() -> None:
    argv, served = served_argv()
    queries = [
        render_query(q, namespace="llm", model=served) for q in (DEFAULT_WAITING_QUERY, DEFAULT_RUNNING_QUERY)
    ]
    series = sorted({name for q in queries for name in re.findall(r"\b(vllm:[a-z_:]+)\s*\{", q)})
    assert series == ["vllm:num_requests_running", "vllm:num_requests_waiting"]

    found: dict[str, list[dict[str, Any]]] = probe(
        {"op": "metrics", "argv": argv, "config": catalog_config(MODEL, argv[0]), "names": series},
        vllm_python(),
    )
    print(f"\nvLLM series the autoscaler reads, with vLLM's labels: {found}")
    for name in series:
        assert found[name], f"vLLM registers no series {name}"
        for labels in found[name]:
            assert set(labels) >= VLLM_SERIES_LABELS, (name, labels)
            assert labels["model_name"] == served, (name, labels)
            assert not set(labels) & set(SCRAPE_TARGET_LABELS), (name, labels)  # the scrape's own
    for query in queries:
        assert selected_labels(query) <= VLLM_SERIES_LABELS | set(SCRAPE_TARGET_LABELS)


def test_vllm_registers_every_series_the_dashboards_and_alerts_read() -> None:
    """The chart's dashboards and alerts (glm_operator.monitoring) read these vLLM series, by
    ``model_name``; the vLLM emulator exposes exactly these names (tests/unit/test_monitoring_series.py)."""
    exprs = [a.expr for a in alerts.ALERTS] + [q for view in dashboards.VIEWS for q in view.queries()]
    names = sorted(monitoring_series.vllm_names(exprs))
    # the emulator's names (a histogram's _sum and _count aside) are exactly these
    assert names == sorted(n for n in VLLM_SERIES if not n.endswith(("_sum", "_count")))
    argv, served = served_argv()
    found: dict[str, list[dict[str, Any]]] = probe(
        {"op": "metrics", "argv": argv, "config": catalog_config(MODEL, argv[0]), "names": names},
        vllm_python(),
    )
    print(f"\nvLLM series the dashboards and alerts read: { {n: len(v) for n, v in found.items()} }")
    for name in names:
        assert found[name], f"vLLM registers no series {name}"
        assert any(labels.get("model_name") == served for labels in found[name]), (name, found[name])
