"""One level-based reconcile of a GLMDeployment: observe, compute (pure), execute.

Observe reads the GLMDeployment, its children, its pods, the nodes and GPU usage from the
watch-fed caches (no apiserver request); ``compute_desired`` decides, in a thread pool and
bounded in time, so one huge spec never stalls the event loop; execute server-side-applies the
wanted objects, prunes the unwanted, writes status only when it changed (conditional on the
resourceVersion it was computed from), and posts Events; the status write and the Events after
it are ``Outcome.finish``, which the work queue runs as a tail without holding a worker. A child
the apiserver refuses (422 invalid, 500) makes the GLMDeployment Degraded/ChildRejected with the
apiserver's message and field; the caller retries it with backoff.
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
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glm_operator.clients.kube import ApiErrorSummary, summarize_api_error
from glm_operator.controller import metrics
from glm_operator.controller.cache import spec_planned
from glm_operator.controller.desired import WORKLOAD_KIND_NAMES, Desired, Event, Observed, compute_desired
from glm_operator.controller.pod_monitors import PodMonitorMode
from glm_operator.controller.predicates import child_version
from glm_operator.planning.conditions import MetricsStatus, set_condition
from glm_operator.render.monitoring import POD_MONITOR_KIND

if TYPE_CHECKING:
    from glm_operator.controller.runtime import Operator

log = logging.getLogger(__name__)


_NOW: tuple[int, str] = (0, "")  # the last second formatted (every reconcile reads the time)


def now_rfc3339() -> str:
    global _NOW
    second = int(time.time())
    if _NOW[0] != second:
        _NOW = (second, dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _NOW[1]


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def observe(op: Operator, namespace: str, name: str) -> tuple[Observed, list[dict[str, Any]]] | None:
    """What ``compute_desired`` reads, plus the GLMDeployment's current Services (for execute).

    Everything comes from the watch-fed caches (no apiserver request), read on the event loop;
    the result is a snapshot the planner can use in another thread.
    """
    key = (namespace, name)
    body = op.cache.owned.glmdeployments.get(key)
    if body is None or body.get("metadata", {}).get("deletionTimestamp"):
        return None
    uid = str(body["metadata"].get("uid", ""))
    kinds = WORKLOAD_KIND_NAMES if op.lws_available else WORKLOAD_KIND_NAMES - {"LeaderWorkerSet"}
    children = [c for c in op.cache.owned.children_of(key, kinds) if _owned_by(c, uid)]
    # The GLMDeployment-wide children (one each): compared with what is wanted, never pruned.
    services = [
        c for c in op.cache.owned.children_of(key, {"Service", "PodDisruptionBudget"}) if _owned_by(c, uid)
    ]
    pod_monitors = [c for c in op.cache.owned.children_of(key, {POD_MONITOR_KIND}) if _owned_by(c, uid)]
    if op.autoscaler is not None:
        metrics_status = op.autoscaler.metrics_status(key)
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
        gpus_used=op.cache.gpus_used(exclude_owner=key),
        children=children,
        pods=op.cache.owned.pods_of(key),
        default_image=op.config.default_image,
        now=now_rfc3339(),
        metrics=metrics_status if body.get("spec", {}).get("autoscaling") else None,
        lws_available=op.lws_available,
        node_grace_seconds=op.config.node_grace_seconds,
        elastic=op.nodepools.elastic_input(op.config),
        pod_monitor=op.pod_monitor_wanted,
        pod_monitors=pod_monitors,
    ), [*services, *pod_monitors]


def object_digest(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def desired_with_digests(observed: Observed) -> Desired:
    """``compute_desired`` and the digest of each object it wants, both in the planning thread: a
    sorted JSON dump of every child was the largest part of an apply's time on the event loop."""
    desired = compute_desired(observed)
    return dataclasses.replace(desired, digests=tuple(object_digest(obj) for obj in desired.objects))


def _status_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


class PlanningTimeout(Exception):
    """Planning one GLMDeployment took longer than its bound."""


@dataclass(frozen=True)
class Rejection:
    """A child the apiserver refused (422 invalid, 400, 500): what it said and where."""

    kind: str
    name: str
    error: ApiErrorSummary


REJECTED_STATUSES = frozenset({400, 413, 422, 500})
SLOW_APPLY_SECONDS = 0.2  # an apply still running after this finishes in the background (a reconcile
# of a new GLMDeployment holds its worker about this long plus its status write: with 32 workers,
# 0.5 s made 200 GLMDeployments created in 5 s wait up to 2.5 s for a worker)


def _pod_monitor_api_missing(obj: Mapping[str, Any], summary: ApiErrorSummary) -> bool:
    """A PodMonitor refused because the apiserver does not serve the API (any more): 404, or 403
    while its CRD is being deleted."""
    if obj.get("kind") != POD_MONITOR_KIND:
        return False
    return summary.status == 404 or (summary.status == 403 and "terminating" in summary.message)


@dataclass(frozen=True)
class Outcome:
    """A reconcile whose children are applied and pruned. ``finish`` writes the status (when
    ``status_changed``) and then posts the Events: only the apiserver is waited on there, so the
    work queue runs it as a tail, without holding a worker (see ``workqueue``)."""

    rejected: list[Rejection]
    status_changed: bool
    finish: Callable[[], Awaitable[None]]


async def execute(
    op: Operator, observed: Observed, services: list[dict[str, Any]], desired: Desired
) -> list[Rejection]:
    """Apply, prune, write status, post Events. Returns the children the apiserver rejected."""
    outcome = await apply_children(op, observed, services, desired)
    await outcome.finish()
    return outcome.rejected


async def apply_children(
    op: Operator, observed: Observed, services: list[dict[str, Any]], desired: Desired
) -> Outcome:
    """Apply and prune; the status write and the Events are left to ``Outcome.finish``."""
    meta = observed.body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    key = (namespace, name)
    existing = {
        (c["kind"], c["metadata"]["name"]): child_version(dict(c)) for c in [*observed.children, *services]
    }
    to_apply = []
    absent: set[tuple[str, str, str]] = set()  # workloads not in the cache: created with POST
    digests = desired.digests or tuple(object_digest(obj) for obj in desired.objects)
    for obj, digest in zip(desired.objects, digests, strict=True):
        memo_key = (namespace, obj["kind"], obj["metadata"]["name"])
        if memo_key in op.pending_applies:
            continue  # its apply is still on the wire; when it returns the key is reconciled again
        current = existing.get((obj["kind"], obj["metadata"]["name"]))
        if current is None and obj["kind"] in WORKLOAD_KIND_NAMES:
            absent.add(memo_key)
        if current is None or op.applied.get(memo_key) != (digest, current):
            to_apply.append((memo_key, digest, obj))
    # The workloads go first: they start the long path (scheduling, image pull, model load), and
    # on a loaded apiserver every concurrent apply slows the others; the Service, PDB and
    # PodMonitor follow (nothing uses them before a pod is Ready, minutes later). All of them
    # share one budget of SLOW_APPLY_SECONDS; what is still running then (a Service waiting for
    # its ClusterIP on a busy apiserver) finishes in the background and does not hold the worker.
    # The companions (Service, PDB, PodMonitor) have a lane of their own with a few threads
    # (queued ones hold no connection); of the workloads at most ``max_pending_applies`` run in
    # the background, beyond that a reconcile waits for its workloads: a slow apiserver slows the
    # operator instead of piling up.
    # A routine reconcile waits already at ``routine_pending_applies``: the last quarter is kept
    # for new specs, so a burst of them is not held behind a resync's re-applies.
    to_apply.sort(key=lambda item: item[2]["kind"] not in WORKLOAD_KIND_NAMES)
    urgent = not spec_planned(observed.body)
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + SLOW_APPLY_SECONDS
    limit = op.max_pending_applies if urgent else op.routine_pending_applies
    # A workload not created yet is POSTed: on the apiserver one etcd write where an apply of an
    # absent object makes two (see clients.managed_fields); the Service and the others are applied.
    first = [
        op.submit_apply(obj, create=memo_key in absent)
        for memo_key, _, obj in to_apply
        if obj["kind"] in WORKLOAD_KIND_NAMES
    ]
    if first and op.pending_workload_applies() >= limit:
        metrics.APPLY_BACKPRESSURE.labels(lane="urgent" if urgent else "routine").inc()
        await asyncio.wait(first)
    elif first and len(first) < len(to_apply):
        await asyncio.wait(first, timeout=SLOW_APPLY_SECONDS)
    tasks = first + [op.submit_apply(obj) for _, _, obj in to_apply[len(first) :]]
    if tasks:
        # A companion held behind other GLMDeployments' workload writes is not waited for: it
        # would only spend the budget and delay this status write.
        sent = [task for task in tasks if not op.was_held(task)]
        if sent:
            await asyncio.wait(sent, timeout=max(0.0, deadline - loop.time()))
        metrics.observe_step(urgent, "apply", loop.time() - started)
    rejected: list[Rejection] = []
    failure: BaseException | None = None
    pending = False
    for (memo_key, digest, obj), task in zip(to_apply, tasks, strict=True):
        if not task.done():
            pending = True
            # Reconcile again when it lands if this reconcile's status or prune waited for it: a
            # workload whose status counts replicas this reconcile did not see (not a new one),
            # or anything while children are to be pruned.
            requeue = bool(desired.prune)
            workload = obj["kind"] in WORKLOAD_KIND_NAMES
            op.track_pending_apply(key, memo_key, digest, task, requeue, requeue_if_changed=workload)
            continue
        result = task.exception() or task.result()
        if isinstance(result, BaseException):
            summary = summarize_api_error(result)
            if _pod_monitor_api_missing(obj, summary) and op.config.pod_monitor is PodMonitorMode.AUTO:
                # The CRD went away since discovery was asked: not the GLMDeployment's fault.
                log.info("%s/%s: PodMonitor not applied (%s)", namespace, name, summary.line())
                op.pod_monitor_api_missing()
            elif summary.status in REJECTED_STATUSES or _pod_monitor_api_missing(obj, summary):
                rejected.append(Rejection(obj["kind"], obj["metadata"]["name"], summary))
            else:
                failure = failure or result
            continue
        op.applied[memo_key] = (digest, child_version(result))
        op.cache.owned.set_child(key, result)  # the next reconcile sees what was just written
    if failure is not None:
        raise failure
    # Never prune while a replacement was refused (a refused PodMonitor replaces no workload) or is
    # on its way.
    if all(r.kind == POD_MONITOR_KIND for r in rejected) and not pending:
        await asyncio.gather(
            *(
                asyncio.to_thread(op.api.delete, av, kind, namespace, child)
                for av, kind, child in desired.prune
            )
        )
        for av, kind, child in desired.prune:
            op.cache.owned.delete_child(key, av, kind, child)
    status = own_status_fields(observed.body, desired.status, autoscaler_running=op.autoscaler is not None)
    if rejected:
        status = with_rejections(observed, status, rejected)
    changed = _status_changed(dict(observed.body.get("status") or {}), status)

    async def finish() -> None:
        if changed:
            started = loop.time()
            written = await asyncio.to_thread(
                op.api.patch_status, namespace, name, status, str(meta.get("resourceVersion") or "") or None
            )
            metrics.observe_step(urgent, "status", loop.time() - started)
            op.cache.owned.set_glmdeployment(written)  # before the key can run again
        events = list(desired.events)
        if rejected and changed:
            events += [Event("Warning", "ChildRejected", _rejection_message(r)) for r in rejected]
        op.post_events(observed.body, events)
        if desired.plan is not None:
            metrics.PLAN_FITS.labels(namespace, name).set(1 if desired.plan.fits else 0)
            for v in desired.plan.variants:
                metrics.PLANNED_REPLICAS.labels(namespace, name, v.gpu_product).set(v.replicas)

    return Outcome(rejected, changed, finish)


def own_status_fields(
    body: Mapping[str, Any], status: dict[str, Any], autoscaler_running: bool
) -> dict[str, Any]:
    """The status fields reconcile writes: with ``spec.autoscaling`` the autoscaler is the only
    writer of ``desiredReplicas`` (and ``autoscaler``), so a reconcile working from an older read
    can never revert its decision. Without a running autoscaler (no Prometheus configured),
    reconcile writes them itself, so ``desiredReplicas`` still shows the replica count in use."""
    if autoscaler_running and (body.get("spec") or {}).get("autoscaling"):
        return {k: v for k, v in status.items() if k not in AUTOSCALER_FIELDS}
    return status


AUTOSCALER_FIELDS = frozenset({"desiredReplicas", "autoscaler"})


def _rejection_message(r: Rejection) -> str:
    return f"the apiserver rejected {r.kind} {r.name}: {r.error.line()}"[:MAX_EVENT_MESSAGE]


MAX_EVENT_MESSAGE = 1000


def with_rejections(observed: Observed, status: dict[str, Any], rejected: list[Rejection]) -> dict[str, Any]:
    """Degraded=True, reason ChildRejected, with the apiserver's own message and field."""
    generation = int(observed.body["metadata"].get("generation") or 0)
    fixes = []
    if any(r.kind != POD_MONITOR_KIND for r in rejected):
        fixes.append(
            "Fix the spec field that renders into it (spec.serving: env, resources, tolerations, "
            "nodeSelector, image)."
        )
    if any(r.kind == POD_MONITOR_KIND for r in rejected):
        fixes.append(
            "PodMonitor: install the prometheus-operator CRDs (monitoring.coreos.com/v1), or run the "
            "operator with --pod-monitor=auto or off (chart value prometheus.podMonitor)."
        )
    message = "; ".join(_rejection_message(r) for r in rejected) + ". " + " ".join(fixes)
    conditions = set_condition(
        status.get("conditions") or [], "Degraded", "True", "ChildRejected", message, generation, observed.now
    )
    return {**status, "phase": "Failed", "conditions": conditions}


async def plan(op: Operator, observed: Observed) -> Desired:
    """``compute_desired`` in the planning thread pool, bounded in time, off the event loop."""
    meta = observed.body["metadata"]
    key = (str(meta["namespace"]), str(meta["name"]))
    bound = op.config.planning_timeout_seconds
    if key in op.slow_plans:  # its last plan still runs in a thread: do not start a second one
        raise PlanningTimeout(f"planning is still running after more than {bound:.0f} s")
    urgent = not spec_planned(observed.body)
    slow = bool(((observed.body.get("spec") or {}).get("model") or {}).get("config"))  # inline config
    future = asyncio.wrap_future(
        op.planning_pool.submit(desired_with_digests, observed, urgent=urgent, slow=slow)
    )
    started = asyncio.get_running_loop().time()
    try:
        desired = await asyncio.wait_for(asyncio.shield(future), bound)
        metrics.observe_step(urgent, "plan", asyncio.get_running_loop().time() - started)
        return desired
    except TimeoutError as exc:
        op.slow_plans.add(key)
        future.add_done_callback(lambda _: op.slow_plans.discard(key))
        raise PlanningTimeout(
            f"planning took longer than {bound:.0f} s (is spec.model.config huge?)"
        ) from exc


WARM_UP_SPEC = {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192}


def warm_up_planner(default_image: str) -> Desired:
    """Plan and render one small made-up GLMDeployment: loads the catalogs and compiles the
    templates (about 1.5 s of CPU on a loaded machine) at start-up, not in the first reconcile."""
    body = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "warm-up", "namespace": "warm-up", "uid": "warm-up", "generation": 1},
        "spec": WARM_UP_SPEC,
    }
    node = {
        "metadata": {"name": "warm-up", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return compute_desired(
        Observed(
            body=body,
            nodes=[node],
            gpus_used={},
            children=[],
            pods=[],
            default_image=default_image,
            now=now_rfc3339(),
        )
    )


async def reconcile(op: Operator, namespace: str, name: str) -> list[Rejection] | None:
    """Bring one GLMDeployment to its desired state. None when it no longer exists; else the
    children the apiserver rejected (the caller retries those with backoff)."""
    outcome = await reconcile_children(op, namespace, name)
    if outcome is None:
        return None
    await outcome.finish()
    return outcome.rejected


async def reconcile_children(op: Operator, namespace: str, name: str) -> Outcome | None:
    """``reconcile`` up to the status write, which is left to ``Outcome.finish``; None when the
    GLMDeployment no longer exists."""
    found = observe(op, namespace, name)
    if found is None:
        return None
    observed, services = found
    desired = await plan(op, observed)
    outcome = await apply_children(op, observed, services, desired)
    if desired.requeue_after is not None:  # a node grace period ends: no watch event will say so
        asyncio.get_running_loop().call_later(desired.requeue_after, op.queue.add, (namespace, name))
    return outcome
