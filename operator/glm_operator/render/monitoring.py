"""The PodMonitor (monitoring.coreos.com/v1) that makes Prometheus scrape a GLMDeployment's vLLM pods.

The built-in autoscaler's PromQL selects vLLM's queue series by ``namespace`` and ``model_name``
(``glm_operator.clients.prometheus``). vLLM labels its own series with ``model_name`` (the served
model name); ``namespace`` must come from the scrape: the PodMonitor relabels the pod's namespace
from Kubernetes service discovery (``__meta_kubernetes_namespace``) into it explicitly, rather than
relying on the prometheus-operator's implicit target labels. ``SCRAPE_TARGET_LABELS`` lists what the
relabelling writes, so a test can check it against the labels the queries use.

Pure: renders a dict, no I/O. Like the Service, it uses only GLMDeployment-level fields of the
context, so any variant's context renders the same object.
"""

from __future__ import annotations

from typing import Any

import yaml

from glm_operator.render import names
from glm_operator.render.context import WorkloadContext
from glm_operator.render.objects import owner_references, template_environment

POD_MONITOR_API_VERSION = "monitoring.coreos.com/v1"
POD_MONITOR_KIND = "PodMonitor"
POD_MONITOR_PLURAL = "podmonitors"
POD_MONITOR_CRD = f"{POD_MONITOR_PLURAL}.monitoring.coreos.com"
# vLLM's OpenAI server serves Prometheus metrics on its API port (the container port "http").
METRICS_PORT_NAME = "http"
METRICS_PATH = "/metrics"

# target label <- Kubernetes service-discovery meta label
SCRAPE_TARGET_LABELS: dict[str, str] = {
    "namespace": "__meta_kubernetes_namespace",
    "pod": "__meta_kubernetes_pod_name",
}
# Labels vLLM puts on its own series (not written by the scrape).
VLLM_SERIES_LABELS = frozenset({"model_name"})


def relabelings() -> list[dict[str, Any]]:
    return [
        {"sourceLabels": [source], "targetLabel": target, "action": "replace"}
        for target, source in SCRAPE_TARGET_LABELS.items()
    ]


def pod_monitor_name(deployment_name: str) -> str:
    return names.service_name(deployment_name)


def render_pod_monitor(ctx: WorkloadContext, *, interval_seconds: int | None = None) -> dict[str, Any]:
    """The PodMonitor of the whole GLMDeployment; ``interval_seconds`` sets the scrape interval
    (the autoscaler's interval, so each decision reads a fresh sample), None: Prometheus' own."""
    text = (
        template_environment()
        .get_template("podmonitor.yaml.j2")
        .render(
            api_version=POD_MONITOR_API_VERSION,
            name=pod_monitor_name(ctx.deployment_name),
            namespace=ctx.namespace,
            labels={**dict(ctx.labels), **names.service_labels(ctx.deployment_name)},
            owner_references=owner_references(ctx),
            selector=names.service_selector(ctx.deployment_name),
            port_name=METRICS_PORT_NAME,
            path=METRICS_PATH,
            interval=None if interval_seconds is None else f"{int(interval_seconds)}s",
            relabelings=relabelings(),
        )
    )
    obj = yaml.safe_load(text)
    if not isinstance(obj, dict):
        raise ValueError("podmonitor.yaml.j2 did not render to a mapping")
    return obj
