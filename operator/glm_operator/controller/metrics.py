"""The operator's own Prometheus metrics (reconciles, errors, durations, plans by GPU type), and the
HTTP server of the metrics port (``/metrics``; the read-only plan pages under ``/plans``)."""

from __future__ import annotations

import contextlib
import socketserver
import threading
import wsgiref.simple_server
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from glm_operator.api.v1alpha1 import PHASES
from glm_operator.planning.placement.result import Plan

REGISTRY = CollectorRegistry()


class Pages(Protocol):
    """What the metrics port serves under /plans (``controller.pages.PlanPages``)."""

    def respond(self, path: str) -> tuple[int, str]: ...


RECONCILES = Counter(
    "glm_operator_reconciles_total", "Reconciles of GLMDeployments by result.", ["result"], registry=REGISTRY
)
for _result in ("ok", "error"):
    RECONCILES.labels(result=_result)  # both from the start: the error-ratio alert reads 0, not nothing
RECONCILE_SECONDS = Histogram(
    "glm_operator_reconcile_duration_seconds",
    "Time of one reconcile (observe, plan, apply, status).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    "glm_operator_queue_wait_seconds",
    "Time a GLMDeployment key waited on the work queue before a worker took it.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
PLANNED_REPLICAS = Gauge(
    "glm_operator_planned_replicas",
    "Replicas planned per GLMDeployment and GPU type.",
    ["namespace", "name", "gpu_product"],
    registry=REGISTRY,
)
PLAN_FITS = Gauge(
    "glm_operator_plan_fits",
    "1 when the GLMDeployment's plan fits on some GPU type, else 0.",
    ["namespace", "name"],
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    "glm_operator_api_requests_total",
    "Requests the operator sent to the apiserver (not counting watches), by HTTP method.",
    ["method"],
    registry=REGISTRY,
)
for _method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
    API_REQUESTS.labels(method=_method)  # the operator dashboard's graph shows 0, not nothing
ENQUEUED = Counter(
    "glm_operator_enqueued_total",
    "GLMDeployment keys put on the work queue, by what caused it (glmdeployment, pod, child, node, resync).",
    ["cause"],
    registry=REGISTRY,
)
FILTERED = Counter(
    "glm_operator_events_filtered_total",
    "Child watch events stored in the cache without enqueuing a reconcile: nothing a reconcile "
    "reads from the child changed (see controller.predicates), by the child's kind.",
    ["kind"],
    registry=REGISTRY,
)
WATCH_EVENTS = Counter(
    "glm_operator_watch_events_total",
    "Events received from the apiserver's watch streams (listed objects included), by resource.",
    ["resource"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "glm_operator_watch_restarts_total",
    "Times the watches stopped on their own (e.g. an optional API went away) and were started again "
    "(controller.watches).",
    registry=REGISTRY,
)
AUTOSCALER_DECISIONS = Counter(
    "glm_operator_autoscaler_decisions_total",
    "Autoscaler decisions per GLMDeployment by direction (up, down, hold, unavailable).",
    ["namespace", "name", "direction"],
    registry=REGISTRY,
)
AUTOSCALER_DIRECTIONS = ("up", "down", "hold", "unavailable")
QUEUE_DEPTH = Gauge(
    "glm_operator_observed_waiting_requests",
    "Waiting requests seen by the autoscaler per GLMDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)
# Per GLMDeployment, from the status each reconcile writes (``record``): what the dashboards and
# alerts of the chart (devtools.dashboards, devtools.alerts) join with vLLM's and the GPUs' own series.
INFO = Gauge(
    "glm_operator_glmdeployment_info",
    "1 per GLMDeployment: model_name is the served model name vLLM labels its series with; model the "
    "checkpoint or catalog id of spec.model.",
    ["namespace", "name", "model_name", "model"],
    registry=REGISTRY,
)
PHASE = Gauge(
    "glm_operator_glmdeployment_phase",
    "1 for the GLMDeployment's status.phase, 0 for the other phases.",
    ["namespace", "name", "phase"],
    registry=REGISTRY,
)
DESIRED_REPLICAS = Gauge(
    "glm_operator_desired_replicas",
    "status.desiredReplicas: spec.replicas, or the autoscaler's decision.",
    ["namespace", "name"],
    registry=REGISTRY,
)
MAX_REPLICAS = Gauge(
    "glm_operator_max_replicas",
    "Most replicas the GLMDeployment may get: spec.autoscaling.maxReplicas, else spec.replicas.",
    ["namespace", "name"],
    registry=REGISTRY,
)
READY_REPLICAS = Gauge(
    "glm_operator_ready_replicas",
    "status.readyReplicas: replicas whose vLLM server is ready.",
    ["namespace", "name"],
    registry=REGISTRY,
)
PLANNED_KV_TOKENS = Gauge(
    "glm_operator_planned_kv_cache_tokens",
    "KV-cache tokens the plan expects one replica of this GPU type to hold (status.plan kvCacheTokens).",
    ["namespace", "name", "gpu_product"],
    registry=REGISTRY,
)
REPORTED_KV_TOKENS = Gauge(
    "glm_operator_reported_kv_cache_tokens",
    "KV-cache tokens vLLM reports for one replica of this GPU type, the fewest over its pods "
    "(vllm:cache_config_info read from Prometheus: kv_cache_size_tokens, else num_gpu_blocks x block_size).",
    ["namespace", "name", "gpu_product"],
    registry=REGISTRY,
)
PLANNED_GPUS = Gauge(
    "glm_operator_planned_gpus",
    "GPUs the placed replicas of this GPU type take: replicas x GPUs per replica.",
    ["namespace", "name", "gpu_product"],
    registry=REGISTRY,
)
PLANNED_GPU_MEMORY = Gauge(
    "glm_operator_planned_gpu_memory_bytes",
    "Memory vLLM may take on each GPU of this type: its memory x gpu_memory_utilization.",
    ["namespace", "name", "gpu_product"],
    registry=REGISTRY,
)
LEADER = Gauge(
    "glm_operator_leader",
    "1 while this replica holds the Lease and reconciles (always 1 without leader election), else 0.",
    registry=REGISTRY,
)
_PER_VARIANT = (PLANNED_REPLICAS, PLANNED_KV_TOKENS, PLANNED_GPUS, PLANNED_GPU_MEMORY)
_PER_OBJECT = (PLAN_FITS, QUEUE_DEPTH, DESIRED_REPLICAS, MAX_REPLICAS, READY_REPLICAS)
_GIB = 2**30


class _Server(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


#: The plan pages fetch nothing: no script, no remote style, image or font.
PAGE_HEADERS = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"),
]


def app(pages: Pages | None = None, registry: CollectorRegistry = REGISTRY) -> Callable[..., Iterable[bytes]]:
    """The metrics port's WSGI app: ``/plans`` and below from ``pages`` (when given), else
    Prometheus' exposition of ``registry`` (``/metrics``, and any other path, as before)."""
    metrics_app = make_wsgi_app(registry)

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        if pages is not None and (path == "/plans" or path.startswith("/plans/")):
            code, html = pages.respond(path)
            body = html.encode()
            reason = "OK" if code == 200 else "Not Found"
            start_response(f"{code} {reason}", [*PAGE_HEADERS, ("Content-Length", str(len(body)))])
            return [body]
        result: Iterable[bytes] = metrics_app(environ, start_response)
        return result

    return dispatch


def serve(port: int, host: str = "0.0.0.0", pages: Pages | None = None) -> wsgiref.simple_server.WSGIServer:
    """Serve ``app(pages)`` on ``host:port`` from a daemon thread; returns the server."""
    server = wsgiref.simple_server.make_server(
        host, port, app(pages), server_class=_Server, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def _remove_series(gauge: Gauge | Counter, namespace: str, name: str) -> None:
    """Every series of ``gauge`` (or counter) whose first two labels are this GLMDeployment's."""
    for labels in list(gauge._metrics):
        if labels[0] == namespace and labels[1] == name:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


def forget(namespace: str, name: str) -> None:
    """Drop the per-object series of a deleted GLMDeployment."""
    for gauge in _PER_OBJECT:
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)
    for family in (*_PER_VARIANT, REPORTED_KV_TOKENS, INFO, PHASE, AUTOSCALER_DECISIONS):
        _remove_series(family, namespace, name)


def record(
    key: tuple[str, str],
    plan: Plan | None,
    status: Mapping[str, Any],
    model: str,
    max_replicas: int | None = None,
) -> None:
    """The per-GLMDeployment gauges from what a reconcile planned and the status now holds
    (``status``: the object's status with the reconcile's fields written over it). Series of GPU
    types the plan no longer has go away. ``max_replicas``: the most replicas the spec allows."""
    namespace, name = key
    if max_replicas is not None:
        MAX_REPLICAS.labels(namespace, name).set(max_replicas)
    _remove_series(INFO, namespace, name)
    INFO.labels(namespace, name, str(status.get("model") or ""), model).set(1)
    phase = str(status.get("phase") or "")
    for value in PHASES:
        PHASE.labels(namespace, name, value).set(1 if value == phase else 0)
    if isinstance(status.get("desiredReplicas"), int):
        DESIRED_REPLICAS.labels(namespace, name).set(status["desiredReplicas"])
    READY_REPLICAS.labels(namespace, name).set(int(status.get("readyReplicas") or 0))
    if plan is None:
        return
    PLAN_FITS.labels(namespace, name).set(1 if plan.fits else 0)
    for gauge in _PER_VARIANT:
        _remove_series(gauge, namespace, name)
    for v in plan.variants:
        PLANNED_REPLICAS.labels(namespace, name, v.gpu_product).set(v.replicas)
        PLANNED_KV_TOKENS.labels(namespace, name, v.gpu_product).set(v.kv_cache_tokens)
        PLANNED_GPUS.labels(namespace, name, v.gpu_product).set(v.replicas * v.gpus_per_replica)
        PLANNED_GPU_MEMORY.labels(namespace, name, v.gpu_product).set(
            round(v.gpu_memory_gib * v.gpu_memory_utilization * _GIB)
        )


def record_reported_kv_tokens(key: tuple[str, str], tokens: Mapping[str, int]) -> None:
    """The KV-cache tokens vLLM reports per GPU type (``controller.kv_cache``); the GLMDeployment's
    series of GPU types not in ``tokens`` go away."""
    namespace, name = key
    for gpu_product, value in tokens.items():
        REPORTED_KV_TOKENS.labels(namespace, name, gpu_product).set(value)
    # Set, then remove the others: a scrape in between never misses a series (which would reset
    # the alert's `for`).
    for labels in list(REPORTED_KV_TOKENS._metrics):
        if labels[:2] == (namespace, name) and labels[2] not in tokens:
            with contextlib.suppress(KeyError):
                REPORTED_KV_TOKENS.remove(*labels)


def forget_reported_kv_tokens(namespace: str, name: str) -> None:
    _remove_series(REPORTED_KV_TOKENS, namespace, name)


def count_autoscaler_decision(namespace: str, name: str, direction: str) -> None:
    """One decision of the autoscaler; every direction's series exists from the first one on (the
    deployment dashboard's graph shows 0, not nothing)."""
    for each in AUTOSCALER_DIRECTIONS:
        AUTOSCALER_DECISIONS.labels(namespace, name, each)
    AUTOSCALER_DECISIONS.labels(namespace, name, direction).inc()


def count_api_request(method: str) -> None:
    API_REQUESTS.labels(method=method).inc()
