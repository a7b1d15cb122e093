"""One level-based reconcile of a GLMDeployment: observe, compute (pure), execute.

Observe reads the GLMDeployment, its children and pods from the apiserver (nodes and GPU usage
come from the watch-fed cache); ``compute_desired`` decides; execute server-side-applies the
wanted objects, prunes the unwanted, writes status only when it changed, and posts Events.
An object whose rendered form is the one this process last applied successfully, and which
still carries the version that apply returned (``metadata.generation`` of a workload: spec
edits by hand bump it; ``resourceVersion`` of a Service), is not sent again (the apiserver
would answer a no-op). A deleted or hand-edited child is therefore re-applied on its watch
event; drift the version does not show (a label edited by hand) is repaired by the periodic
resync, which forgets these digests. Every step is idempotent, so a reconcile
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


async def observe(op: Operator, namespace: str, name: str) -> tuple[Observed, list[dict[str, Any]]] | None:
    """What ``compute_desired`` reads, plus the GLMDeployment's current Services (for execute)."""
    selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_DEPLOYMENT}={name}"
    kinds = [(v, k) for v, k in WORKLOAD_KINDS if k != "LeaderWorkerSet" or op.lws_available]
    # The GLMDeployment, its workloads and its pods are independent reads: issue them together.
    body, pods, services, *workloads = await asyncio.gather(
        asyncio.to_thread(op.api.get, API_VERSION, "GLMDeployment", namespace, name),
        asyncio.to_thread(op.api.list, "v1", "Pod", namespace, selector),
        asyncio.to_thread(op.api.list, "v1", "Service", namespace, selector),
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
    for svc in services:
        svc.setdefault("apiVersion", "v1")
        svc.setdefault("kind", "Service")
    services = [s for s in services if _owned_by(s, uid)]
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
    ), services


def object_digest(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _status_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


def child_version(obj: dict[str, Any]) -> str:
    """What changes when somebody else edits a child: a workload's generation, a Service's version."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") == "Service":
        return str(meta.get("resourceVersion", ""))
    return str(meta.get("generation", ""))


async def execute(op: Operator, observed: Observed, services: list[dict[str, Any]], desired: Desired) -> None:
    meta = observed.body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    existing = {
        (c["kind"], c["metadata"]["name"]): child_version(dict(c)) for c in [*observed.children, *services]
    }
    to_apply = []
    for obj in desired.objects:
        key = (namespace, obj["kind"], obj["metadata"]["name"])
        digest = object_digest(obj)
        current = existing.get((obj["kind"], obj["metadata"]["name"]))
        if current is None or op.applied.get(key) != (digest, current):
            to_apply.append((key, digest, obj))
    results = await asyncio.gather(
        *(asyncio.to_thread(op.api.apply, obj) for _, _, obj in to_apply),
        *(asyncio.to_thread(op.api.delete, v, k, namespace, child) for v, k, child in desired.prune),
    )
    for (key, digest, _), result in zip(to_apply, results, strict=False):
        op.applied[key] = (digest, child_version(result))
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
    found = await observe(op, namespace, name)
    if found is None:
        return False
    observed, services = found
    desired = compute_desired(observed)
    await execute(op, observed, services, desired)
    return True
