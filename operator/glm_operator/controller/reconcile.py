"""One level-based reconcile of a GLMDeployment: observe, compute (pure), execute.

Observe reads the GLMDeployment, its children and pods from the apiserver (nodes and GPU usage
come from the watch-fed cache); ``compute_desired`` decides; execute server-side-applies the
wanted objects, prunes the unwanted, writes status only when it changed, and posts Events.
An object whose rendered form is the one this process last applied successfully is not sent
again (the apiserver would answer a no-op); the periodic resync forgets these digests, so drift
made by hand is repaired within one resync period. Every step is idempotent, so a reconcile
interrupted at any point (operator killed) is finished by the next one without duplicates or
orphans.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
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
        node_grace_seconds=op.config.node_grace_seconds,
    )


def object_digest(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _status_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


async def execute(op: Operator, observed: Observed, desired: Desired) -> None:
    meta = observed.body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    existing = {(c["kind"], c["metadata"]["name"]) for c in observed.children}
    to_apply = []
    for obj in desired.objects:
        key = (namespace, obj["kind"], obj["metadata"]["name"])
        digest = object_digest(obj)
        workload_missing = obj["kind"] != "Service" and (obj["kind"], obj["metadata"]["name"]) not in existing
        if op.applied.get(key) != digest or workload_missing:
            to_apply.append((key, digest, obj))
    await asyncio.gather(
        *(asyncio.to_thread(op.api.apply, obj) for _, _, obj in to_apply),
        *(asyncio.to_thread(op.api.delete, v, k, namespace, child) for v, k, child in desired.prune),
    )
    for key, digest, _ in to_apply:
        op.applied[key] = digest
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
    if desired.requeue_after is not None:  # a node grace period ends: no watch event will say so
        asyncio.get_running_loop().call_later(desired.requeue_after, op.queue.add, (namespace, name))
    return True
