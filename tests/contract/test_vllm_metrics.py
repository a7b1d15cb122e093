"""The autoscaler's metrics contract with the real vLLM (the default image's release): the series
its PromQL reads exist, and vLLM labels them with ``model_name`` = the served model name the
operator renders. With the PodMonitor's relabelling (``namespace``; tests/unit/test_pod_monitor.py),
every label the queries select on is accounted for. vLLM's KV-cache size is the labels of
``vllm:cache_config_info`` (no ``model_name``), which the operator reads (monitoring.kv_cache)."""

from __future__ import annotations

import re
from typing import Any

from devtools import alerts, dashboards
from devtools import series as monitoring_series
from devtools.vllm_flags import probe, vllm_python

from glm_operator.clients.prometheus import (
    DEFAULT_KV_CACHE_QUERY,
    DEFAULT_RUNNING_QUERY,
    DEFAULT_WAITING_QUERY,
    render_query,
)
from glm_operator.monitoring.kv_cache import tokens_of
from glm_operator.render.monitoring import SCRAPE_TARGET_LABELS, VLLM_SERIES_LABELS
from tests.harness.vllm_emulator import VLLM_SERIES, CacheConfig

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


#: What vLLM 0.33's engine sets in its CacheConfig once the KV cache is allocated (as the
#: probe sets them before the logger logs the initialised engine).
INITIALISED = {"num_gpu_blocks": 2271, "kv_cache_size_tokens": 36336, "kv_cache_max_concurrency": 4.44}


def test_vllm_registers_every_series_the_dashboards_and_alerts_read() -> None:
    """The chart's dashboards and alerts (devtools) and the operator's own queries
    read these vLLM series, by ``model_name`` (but the info gauge, which has none); the vLLM emulator
    exposes exactly these names (tests/unit/test_monitoring_series.py)."""
    exprs = [a.expr for a in alerts.ALERTS] + [q for view in dashboards.VIEWS for q in view.queries()]
    exprs += [DEFAULT_WAITING_QUERY, DEFAULT_RUNNING_QUERY, DEFAULT_KV_CACHE_QUERY]
    names = sorted(monitoring_series.vllm_names(exprs))
    # the emulator's names (a histogram's _sum and _count aside) are exactly these
    assert names == sorted(n for n in VLLM_SERIES if not n.endswith(("_sum", "_count")))
    argv, served = served_argv()
    found: dict[str, list[dict[str, Any]]] = probe(
        {
            "op": "metrics",
            "argv": argv,
            "config": catalog_config(MODEL, argv[0]),
            "names": names,
            "cache_config": INITIALISED,
        },
        vllm_python(),
    )
    print(f"\nvLLM series the monitoring and the operator read: { {n: len(v) for n, v in found.items()} }")
    for name in names:
        assert found[name], f"vLLM registers no series {name}"
        if name == monitoring_series.VLLM_CACHE_CONFIG_INFO:
            assert not any("model_name" in labels for labels in found[name]), found[name]
            continue
        assert any(labels.get("model_name") == served for labels in found[name]), (name, found[name])


def test_vllm_reports_its_kv_cache_size_in_the_labels_the_operator_reads() -> None:
    """vLLM's own vllm:cache_config_info of an initialised engine: num_gpu_blocks, block_size and
    kv_cache_size_tokens as the operator parses them, and the emulator's label names are vLLM's."""
    argv, _ = served_argv()
    name = monitoring_series.VLLM_CACHE_CONFIG_INFO

    def info(cache_config: dict[str, Any]) -> list[dict[str, str]]:
        found: dict[str, list[dict[str, str]]] = probe(
            {"op": "metrics", "argv": argv, "config": catalog_config(MODEL, argv[0]), "names": [name],
             "cache_config": cache_config},
            vllm_python(),
        )  # fmt: skip
        return found[name]

    (labels,) = info(INITIALISED)
    print(f"\nvLLM's {name}: {labels}")
    assert labels["num_gpu_blocks"] == "2271" and labels["kv_cache_size_tokens"] == "36336"
    assert labels["engine"] == "0" and int(labels["block_size"]) > 0
    assert tokens_of(labels) == 36336
    assert set(CacheConfig().labels()) <= set(labels), set(CacheConfig().labels()) - set(labels)
    assert not set(labels) & set(SCRAPE_TARGET_LABELS)  # the scrape's pod and namespace join it

    # A release or engine that leaves kv_cache_size_tokens unset ("None"): blocks x block size.
    (labels,) = info({"num_gpu_blocks": 2271})
    assert labels["kv_cache_size_tokens"] == "None"
    assert tokens_of(labels) == 2271 * int(labels["block_size"])
