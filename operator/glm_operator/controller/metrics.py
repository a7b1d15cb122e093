"""The operator's own Prometheus metrics (reconciles, errors, durations, plans by GPU type)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()

RECONCILES = Counter(
    "glm_operator_reconciles_total", "Reconciles of GLMDeployments by result.", ["result"], registry=REGISTRY
)
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
    "Autoscaler decisions by direction (up, down, hold, unavailable).",
    ["direction"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "glm_operator_observed_waiting_requests",
    "Waiting requests seen by the autoscaler per GLMDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)


def serve(port: int, host: str = "0.0.0.0") -> None:
    start_http_server(port, addr=host, registry=REGISTRY)


def forget(namespace: str, name: str) -> None:
    """Drop the per-object series of a deleted GLMDeployment."""
    for gauge in (PLAN_FITS, QUEUE_DEPTH):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)
    for labels in list(PLANNED_REPLICAS._metrics):
        if labels[0] == namespace and labels[1] == name:
            PLANNED_REPLICAS.remove(*labels)


def count_api_request(method: str) -> None:
    API_REQUESTS.labels(method=method).inc()
