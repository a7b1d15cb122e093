"""Thin kopf handlers: they only update caches and enqueue GLMDeployment keys.

Every handler is ``async def``: kopf runs it on the operator's one event loop, so the caches and
the work queue are only ever touched from that loop (a plain ``def`` handler would run in kopf's
thread pool, racing the workers). Handlers never block: no I/O, no planning.

The busy kinds (GLMDeployments, nodes, pods, Deployments, Services, PodDisruptionBudgets,
LeaderWorkerSets) are handed from the watch stream straight to the same operator methods
(``direct_deliveries``, see ``controller.watch_guard``), without kopf's per-event machinery; their
kopf handlers below stay registered, so that kopf starts and keeps those watches.

No handler reconciles by itself and none writes kopf's progress annotations or finalizers onto
the GLMDeployment (``on.event`` keeps no state), so a GitOps tool sees no drift and deleting a
GLMDeployment never waits for the operator: the garbage collector removes the children.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from glm_operator.clients.kube import GROUP, PLURAL, VERSION
from glm_operator.controller import watch_guard
from glm_operator.controller.runtime import Operator
from glm_operator.controller.watch_settings import configure_watching
from glm_operator.gateway.objects import GATEWAY_APP_NAME
from glm_operator.render import names
from glm_operator.render.monitoring import (
    POD_MONITOR_API_VERSION,
    POD_MONITOR_CRD,
    POD_MONITOR_KIND,
    POD_MONITOR_PLURAL,
)

log = logging.getLogger(__name__)
MANAGED = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
GATEWAY_DEPLOYMENT = {names.LABEL_NAME: GATEWAY_APP_NAME}


def _operator(memo: Any) -> Operator:
    op = memo.get("operator") if isinstance(memo, dict) else getattr(memo, "operator", None)
    if not isinstance(op, Operator):
        raise kopf.PermanentError("operator runtime missing from kopf memo")
    return op


def _labelled(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """kopf's ``labels=`` filter: every label present with this value."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def direct_deliveries(op: Operator) -> dict[tuple[str, str], watch_guard.Delivery]:
    """(API group, plural) -> the handler its events go to, straight from the watch stream: what
    the kopf handlers of this module (and ``handlers.gateway``'s Deployment handler) do, with
    their label filters."""

    def child(api_version: str, kind: str) -> watch_guard.Delivery:
        def deliver(event_type: str | None, obj: dict[str, Any]) -> None:
            if _labelled(obj, MANAGED):
                op.on_child(event_type, obj, api_version, kind)

        return deliver

    def deployment(event_type: str | None, obj: dict[str, Any]) -> None:
        if _labelled(obj, GATEWAY_DEPLOYMENT):
            op.gateways.on_gateway_deployment(event_type, obj)
        if _labelled(obj, MANAGED):
            op.on_child(event_type, obj, "apps/v1", "Deployment")

    return {
        (GROUP, PLURAL): op.on_glmdeployment,
        ("", "nodes"): op.on_node,
        ("", "pods"): op.on_pod,
        ("apps", "deployments"): deployment,
        ("", "services"): child("v1", "Service"),
        ("policy", "poddisruptionbudgets"): child("policy/v1", "PodDisruptionBudget"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"): child(
            "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"
        ),
    }


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    configure_watching(settings)
    op = _operator(memo)
    watch_guard.deliver_directly(direct_deliveries(op))  # before kopf starts the watches
    await op.start()


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    watch_guard.stop_delivering()
    await _operator(memo).stop()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def glmdeployment_event(event: Any, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    _operator(memo).on_glmdeployment(event.get("type"), dict(event.get("object") or {}))


@kopf.on.event("", "v1", "nodes")
async def node_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_node(event.get("type"), dict(event.get("object") or body))


@kopf.on.event("", "v1", "namespaces")
async def namespace_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_namespace(event.get("type"), dict(event.get("object") or body))


@kopf.on.event("", "v1", "pods")
async def pod_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_pod(event.get("type"), dict(event.get("object") or body))


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def deployment_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_child(event.get("type"), dict(event.get("object") or body), "apps/v1", "Deployment")


@kopf.on.event("", "v1", "services", labels=MANAGED)
async def service_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_child(event.get("type"), dict(event.get("object") or body), "v1", "Service")


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def pod_disruption_budget_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_child(
        event.get("type"), dict(event.get("object") or body), "policy/v1", "PodDisruptionBudget"
    )


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
async def leaderworkerset_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_child(
        event.get("type"), dict(event.get("object") or body), "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"
    )


# The prometheus-operator's PodMonitors (controller.pod_monitors): kopf starts this watch when the
# CRD is installed and stops it when it goes away.
@kopf.on.event("monitoring.coreos.com", "v1", POD_MONITOR_PLURAL, labels=MANAGED)
async def pod_monitor_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_child(
        event.get("type"), dict(event.get("object") or body), POD_MONITOR_API_VERSION, POD_MONITOR_KIND
    )


@kopf.on.event(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    when=lambda name, **_: name == POD_MONITOR_CRD,
)
async def pod_monitor_crd_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    _operator(memo).on_crd(event.get("type"), dict(event.get("object") or body))
