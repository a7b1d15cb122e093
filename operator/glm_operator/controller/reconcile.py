"""One level-based reconcile of a GLMDeployment: observe, compute (pure), execute.

Observe reads the GLMDeployment, its children and pods from the apiserver (nodes and GPU usage
come from the watch-fed cache); ``compute_desired`` decides; execute server-side-applies the
wanted objects, prunes the unwanted, writes status only when it changed, and posts Events.
Every step is idempotent, so a reconcile interrupted at any point (operator killed) is finished
by the next one without duplicates or orphans.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from glm_operator.clients.kube import API_VERSION
from glm_operator.controller import metrics
from glm_operator.controller.desired import WORKLOAD_KINDS, Desired, Observed, compute_desired
from glm_operator.planning.conditions import MetricsStatus
from glm_operator.render import names

if TYPE_CHECKING:
    from glm_operator.controller.runtime import Operator

log = logging.getLogger(__name__)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


async def observe(op: Operator, namespace: str, name: str) -> Observed | None:
    selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_DEPLOYMENT}={name}"
    kinds = [(v, k) for v, k in WORKLOAD_KINDS if k != "LeaderWorkerSet" or op.lws_available]
    # The GLMDeployment, its workloads and its pods are independent reads: issue them together.
    body, pods, *workloads = await asyncio.gather(
        asyncio.to_thread(op.api.get, API_VERSION, "GLMDeployment", namespace, name),
        asyncio.to_thread(op.api.list, "v1", "Pod", namespace, selector),
        *(asyncio.to_thread(op.api.list, v, k, namespace, selector) for v, k in kinds),
    )
    if body is None or body.get("metadata", {}).get("deletionTimestamp"):
        return None
    uid = str(body["metadata"].get("uid", ""))
    children: list[dict[str, Any]] = []
    for (api_version, kind), items in zip(kinds, workloads, strict=True):
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        children += [c for c in items if _owned_by(c, uid)]
    if op.autoscaler is not None:
        metrics_status = op.autoscaler.metrics_status((namespace, name))
    else:
        metrics_status = MetricsStatus(
            False,
            "PrometheusNotConfigured",
            "spec.autoscaling is set but the operator has no Prometheus URL (glm-operator run "
            "--prometheus-url, chart value prometheus.url); replicas stay at autoscaling.minReplicas",
        )
    return Observed(
        body=body,
        nodes=list(op.cache.nodes.values()),
        gpus_used=op.cache.gpus_used(exclude_owner=(namespace, name)),
        children=children,
        pods=pods,
        default_image=op.config.default_image,
        now=now_rfc3339(),
        metrics=metrics_status if body.get("spec", {}).get("autoscaling") else None,
        lws_available=op.lws_available,
    )


def _status_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


async def execute(op: Operator, observed: Observed, desired: Desired) -> None:
    meta = observed.body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    await asyncio.gather(
        *(asyncio.to_thread(op.api.apply, obj) for obj in desired.objects),
        *(asyncio.to_thread(op.api.delete, v, k, namespace, child) for v, k, child in desired.prune),
    )
    old_status = dict(observed.body.get("status") or {})
    if _status_changed(old_status, desired.status):
        await asyncio.to_thread(op.api.patch_status, namespace, name, desired.status)
    for event in desired.events:
        try:
            await asyncio.to_thread(
                op.api.create_event,
                observed.body,
                reason=event.reason,
                message=event.message,
                type_=event.type,
            )
        except Exception as exc:  # an Event is best effort; never fail the reconcile for it
            log.info("event %s on %s/%s not posted: %s", event.reason, namespace, name, exc)
    if desired.plan is not None:
        metrics.PLAN_FITS.labels(namespace, name).set(1 if desired.plan.fits else 0)
        for v in desired.plan.variants:
            metrics.PLANNED_REPLICAS.labels(namespace, name, v.gpu_product).set(v.replicas)


async def reconcile(op: Operator, namespace: str, name: str) -> bool:
    """Bring one GLMDeployment to its desired state. False when it no longer exists."""
    observed = await observe(op, namespace, name)
    if observed is None:
        return False
    desired = compute_desired(observed)
    await execute(op, observed, desired)
    return True
