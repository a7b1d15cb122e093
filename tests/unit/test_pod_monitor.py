"""The PodMonitor per GLMDeployment: rendering, the --pod-monitor modes, pruning, and the check that
the labels its relabelling writes are the ones the autoscaler's PromQL selects on (so the two
cannot drift apart)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from glm_operator.clients import prometheus as prometheus_client
from glm_operator.commands.run import config_from_args
from glm_operator.controller import config as operator_config
from glm_operator.controller.pod_monitors import PodMonitorMode, pod_monitor_wanted
from glm_operator.desired import compute_desired
from glm_operator.render import names
from glm_operator.render.monitoring import (
    METRICS_PATH,
    POD_MONITOR_API_VERSION,
    SCRAPE_TARGET_LABELS,
    VLLM_SERIES_LABELS,
    render_pod_monitor,
)
from glm_operator.render.objects import render_deployment, render_leaderworkerset

from .test_desired import body, observe
from .test_render import make_ctx

# `label="value"`, `label=~"..."`, `label!="..."` inside a PromQL selector
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')


def selected_labels(promql: str) -> set[str]:
    """Label names the selectors of a PromQL expression match on."""
    return {
        m.group(1) for selector in re.findall(r"\{([^{}]*)\}", promql) for m in _MATCHER.finditer(selector)
    }


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_renders_a_pod_monitor_owned_by_the_glmdeployment() -> None:
    ctx = make_ctx()
    pm = render_pod_monitor(ctx, interval_seconds=15)
    assert pm["apiVersion"] == POD_MONITOR_API_VERSION and pm["kind"] == "PodMonitor"
    assert pm["metadata"]["name"] == names.service_name("glm-air")
    assert pm["metadata"]["namespace"] == "llm"
    (owner,) = pm["metadata"]["ownerReferences"]
    assert owner["uid"] == ctx.owner.uid and owner["kind"] == "GLMDeployment" and owner["controller"] is True
    assert pm["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY  # the operator's watch
    assert pm["spec"]["selector"] == {"matchLabels": names.service_selector("glm-air")}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == METRICS_PATH and endpoint["interval"] == "15s"
    assert {
        "sourceLabels": ["__meta_kubernetes_namespace"],
        "targetLabel": "namespace",
        "action": "replace",
    } in endpoint["relabelings"]
    assert "interval" not in render_pod_monitor(ctx)["spec"]["podMetricsEndpoints"][0]


def test_selects_the_serving_pods_by_their_port_name_and_not_the_headless_workers() -> None:
    pm = render_pod_monitor(make_ctx())
    selector = pm["spec"]["selector"]["matchLabels"]
    port = pm["spec"]["podMetricsEndpoints"][0]["port"]
    pod = render_deployment(make_ctx())["spec"]["template"]
    assert _matches(selector, pod["metadata"]["labels"])
    assert port in [p["name"] for p in pod["spec"]["containers"][0]["ports"]]

    lws = render_leaderworkerset(make_ctx(pipeline_parallel_size=2, gpus_per_replica=2, nodes_per_replica=2))
    template = lws["spec"]["leaderWorkerTemplate"]
    assert _matches(selector, template["leaderTemplate"]["metadata"]["labels"])
    assert not _matches(selector, template["workerTemplate"]["metadata"]["labels"])
    # Another GLMDeployment's pods in the same namespace are not scraped twice.
    other = render_deployment(make_ctx(deployment_name="other", owner=make_ctx().owner))
    assert not _matches(selector, other["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize(
    "query",
    [
        operator_config.DEFAULT_WAITING_QUERY,
        operator_config.DEFAULT_RUNNING_QUERY,
        prometheus_client.DEFAULT_WAITING_QUERY,
        prometheus_client.DEFAULT_RUNNING_QUERY,
        operator_config.DEFAULT_KV_CACHE_QUERY,
    ],
)
def test_the_autoscaler_queries_select_only_labels_the_scrape_writes_or_vllm_emits(query: str) -> None:
    """Each label the default queries filter on is either written by the PodMonitor's relabelling
    or put on the series by vLLM itself; `namespace` must come from the relabelling."""
    used = selected_labels(prometheus_client.render_query(query, namespace="llm", model="glm-4.5-air"))
    assert used == {"namespace", "model_name"}, used  # the parser sees the real matchers
    endpoint = render_pod_monitor(make_ctx())["spec"]["podMetricsEndpoints"][0]
    written = {r["targetLabel"] for r in endpoint["relabelings"] if r.get("action", "replace") == "replace"}
    assert written == set(SCRAPE_TARGET_LABELS)
    assert used <= written | VLLM_SERIES_LABELS, used - written - VLLM_SERIES_LABELS
    assert "namespace" in written


def test_the_kv_cache_query_joins_on_labels_the_scrape_writes() -> None:
    """vLLM's cache_config_info has no model_name: the query finds a model's pods by the labels
    the PodMonitor writes (namespace, pod), which vLLM's own series never carry."""
    joins = re.findall(r"\bon \(([^)]*)\)", prometheus_client.DEFAULT_KV_CACHE_QUERY)
    assert [set(j.replace(" ", "").split(",")) for j in joins] == [{"namespace", "pod"}]
    assert {"namespace", "pod"} <= set(SCRAPE_TARGET_LABELS)


def test_label_parser_finds_matchers() -> None:
    assert selected_labels('sum(rate(x{a="1", b=~"2"}[5m])) / y{c!="3"}') == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("mode", "served", "wanted"),
    [
        (PodMonitorMode.AUTO, True, True),
        (PodMonitorMode.AUTO, False, False),
        (PodMonitorMode.ON, False, True),
        (PodMonitorMode.ON, True, True),
        (PodMonitorMode.OFF, True, False),
        (PodMonitorMode.OFF, False, False),
    ],
)
def test_modes(mode: PodMonitorMode, served: bool, wanted: bool) -> None:
    assert pod_monitor_wanted(mode, served) is wanted


def test_run_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from glm_operator.commands import run

    def parse(*argv: str) -> Any:
        parser = argparse.ArgumentParser()
        run.register(parser.add_subparsers())
        return config_from_args(parser.parse_args(["run", *argv]))

    assert parse().pod_monitor is PodMonitorMode.AUTO
    assert parse("--pod-monitor", "off").pod_monitor is PodMonitorMode.OFF
    monkeypatch.setenv("GLM_OPERATOR_POD_MONITOR", "on")
    assert parse().pod_monitor is PodMonitorMode.ON
    with pytest.raises(SystemExit):
        parse("--pod-monitor", "yes")


L4_SPEC: dict[str, Any] = {
    "model": {"id": "zai-org/glm-4-9b-chat"},
    "contextLength": 8192,
    "gpu": {"products": ["L4"]},
}


def test_compute_desired_adds_the_pod_monitor_when_wanted() -> None:
    d = compute_desired(observe(body(**L4_SPEC), pod_monitor=True))
    (pm,) = [o for o in d.objects if o["kind"] == "PodMonitor"]
    assert pm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert "interval" not in pm["spec"]["podMetricsEndpoints"][0]
    assert d.prune == ()
    scaled = body(**L4_SPEC, autoscaling={"minReplicas": 1, "maxReplicas": 2, "intervalSeconds": 20})
    (pm,) = [
        o for o in compute_desired(observe(scaled, pod_monitor=True)).objects if o["kind"] == "PodMonitor"
    ]
    assert pm["spec"]["podMetricsEndpoints"][0]["interval"] == "20s"


def test_compute_desired_prunes_the_pod_monitor_when_not_wanted() -> None:
    existing = {"apiVersion": POD_MONITOR_API_VERSION, "kind": "PodMonitor", "metadata": {"name": "g"}}
    d = compute_desired(observe(body(**L4_SPEC), pod_monitor=False, pod_monitors=[existing]))
    assert not [o for o in d.objects if o["kind"] == "PodMonitor"]
    assert d.prune == ((POD_MONITOR_API_VERSION, "PodMonitor", "g"),)
    kept = compute_desired(observe(body(**L4_SPEC), pod_monitor=True, pod_monitors=[existing]))
    assert kept.prune == ()


def test_a_refused_pod_monitor_says_how_to_fix_it() -> None:
    """--pod-monitor=on where the API is missing: the apiserver's 404 becomes ChildRejected with a
    fix about the CRD or the flag, not about spec.serving."""
    from glm_operator.clients.kube import ApiErrorSummary
    from glm_operator.controller.applier import _pod_monitor_api_missing
    from glm_operator.desired.status import with_rejections

    not_found = ApiErrorSummary(404, "NotFound", "the server could not find the requested resource")
    assert _pod_monitor_api_missing({"kind": "PodMonitor"}, not_found)
    assert not _pod_monitor_api_missing({"kind": "Deployment"}, not_found)
    observed = observe(body(**L4_SPEC))
    status = with_rejections(
        observed, {"conditions": []}, [("PodMonitor", "g", not_found.line())], "PodMonitor"
    )
    (degraded,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert degraded["reason"] == "ChildRejected"
    assert "--pod-monitor=auto or off" in degraded["message"] and "spec.serving" not in degraded["message"]


def test_crd_serves_reads_established_and_served_versions() -> None:
    from glm_operator.controller.discovery import crd_serves

    crd: dict[str, Any] = {
        "spec": {"group": "monitoring.coreos.com", "versions": [{"name": "v1", "served": True}]},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }
    assert crd_serves(crd, POD_MONITOR_API_VERSION)
    assert not crd_serves({**crd, "status": {}}, POD_MONITOR_API_VERSION)  # just created
    not_served = {**crd, "spec": {**crd["spec"], "versions": [{"name": "v1", "served": False}]}}
    assert not crd_serves(not_served, POD_MONITOR_API_VERSION)
    assert not crd_serves(crd, "monitoring.coreos.com/v1alpha1")
