"""The operator's own Prometheus metrics (reconciles, errors, durations, plans by GPU type), and the
HTTP server of the metrics port (``/metrics``; the read-only plan pages under ``/plans``)."""

from __future__ import annotations

import contextlib
import socketserver
import threading
import wsgiref.simple_server
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

REGISTRY = CollectorRegistry()


class Pages(Protocol):
    """What the metrics port serves under /plans (``controller.pages.PlanPages``)."""

    def respond(self, path: str) -> tuple[int, str]: ...


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
