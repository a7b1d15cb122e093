"""Server-side apply of an owner's children (a GLMDeployment's, a GLMGateway's), and their pruning.

One field manager (``glm-operator``) with ``force``: the operator owns every field it renders. The
workloads (Deployments, LeaderWorkerSets) are applied in the reconcile, which waits for them: they
start the long path (scheduling, image pull, model load), and the status speaks of them. A workload
the caches have not seen yet is POSTed rather than applied: one write on the apiserver where an
apply of an absent object makes two (``KubeClient.create_or_apply``).

The companions (Service, PodDisruptionBudget, PodMonitor) of a GLMDeployment go to a **lane** of
``COMPANION_WRITERS`` background writers, and the reconcile does not wait for them. Nothing uses
them before a pod is Ready, minutes later, and a Service's ClusterIP allocation is slow under
load: in the controller bench (200 GLMDeployments created at once) a Service apply took 2.9 s on
the apiserver, and reconciles that waited for it held the workers, so the next specs' Deployments
waited up to 15 s for a worker (apply -> child p99 15.5 s without the lane;
benchmarks/README.md). A companion
refused by the apiserver is reported by the owner's next reconcile (the lane enqueues it); any
other failure re-adds the owner with backoff. Without the lane (``companion_lane=False``, the
GLMGateways': their status names every child) every child is applied in the reconcile.

A child whose rendered form is the one last applied, and which still carries the version that apply
returned (a workload's ``metadata.generation``: spec edits by hand bump it; a Service's
``resourceVersion``), is not sent again: the apiserver would answer a no-op, and a resync or a pod
event would cost one request per child. A deleted or hand-edited child is re-applied on its watch
event; drift the version does not show (a label edited by hand) is repaired by the periodic resync,
which forgets these digests (``forget``), as does a new leader term.

The apiserver refusing a child (400, 413, 422, 500) is a ``Rejection``: the reconciler reports it in
status (Degraded/ChildRejected) and retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.clients.kube import ApiErrorSummary, KubeClient, summarize_api_error
from glm_operator.controller.cache import OwnedObjects
from glm_operator.controller.predicates import child_version
from glm_operator.controller.workqueue import Key
from glm_operator.desired.model import WORKLOAD_KIND_NAMES, ChildRef
from glm_operator.render.monitoring import POD_MONITOR_KIND

REJECTED_STATUSES = frozenset({400, 413, 422, 500})


@dataclass(frozen=True)
class Rejection:
    """A child the apiserver refused: what it said and where."""

    kind: str
    name: str
    error: ApiErrorSummary


@dataclass(frozen=True)
class ApplyResult:
    rejected: tuple[Rejection, ...] = ()  # workloads the apiserver refused


def object_digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _pod_monitor_api_missing(obj: Mapping[str, Any], summary: ApiErrorSummary) -> bool:
    """A PodMonitor refused because the apiserver does not serve the API (any more): 404, or 403
    while its CRD is being deleted."""
    if obj.get("kind") != POD_MONITOR_KIND:
        return False
    return summary.status == 404 or (summary.status == 403 and "terminating" in summary.message)


COMPANION_WRITERS = 4  # companion applies on the wire at once
COMPANION_HOLD_SECONDS = 30.0  # longest a companion (or an Event) waits for workload writes to end


@dataclass
class _Companion:
    """A companion waiting in the lane (the newest rendering wins while it waits)."""

    owner: Key
    obj: dict[str, Any]
    digest: str
    tolerate_missing_pod_monitor_api: bool


class Applier:
    def __init__(
        self,
        api: KubeClient,
        children: OwnedObjects,
        *,
        companion_lane: bool = True,
        on_companion_rejected: Callable[[Key], None] = lambda owner: None,
        on_companion_failed: Callable[[Key, BaseException], None] = lambda owner, exc: None,
        on_pod_monitor_api_missing: Callable[[], None] = lambda: None,
    ) -> None:
        """``children``: where each answer goes, so the next reconcile sees what was written.
        ``on_companion_rejected(owner)``: a companion was refused (reconcile the owner to report
        it); ``on_companion_failed(owner, exc)``: another failure (retry the owner with backoff)."""
        self.api = api
        self.children = children
        self.companion_lane = companion_lane
        self.on_companion_rejected = on_companion_rejected
        self.on_companion_failed = on_companion_failed
        self.on_pod_monitor_api_missing = on_pod_monitor_api_missing
        # owner -> (kind, name) -> (digest of the object last applied, the version the apply returned)
        self._applied: dict[Key, dict[tuple[str, str], tuple[str, str]]] = {}
        self._lane: asyncio.Queue[tuple[Key, str, str]] | None = None  # made by ``start``
        self._waiting: dict[tuple[Key, str, str], _Companion] = {}  # queued or on the wire
        self._rejected: dict[Key, dict[tuple[str, str], Rejection]] = {}  # refused companions
        self._writers: list[asyncio.Task[None]] = []
        self._workload_writes = 0  # workload applies on the wire now
        self._workloads_idle = asyncio.Event()
        self._workloads_idle.set()

    def start(self) -> None:
        """Start the lane's writers on the running loop."""
        self._lane = asyncio.Queue()
        self._workloads_idle = asyncio.Event()  # of the running loop
        if self._workload_writes == 0:
            self._workloads_idle.set()
        for ref in self._waiting:  # what an earlier run of the lane left queued
            self._lane.put_nowait(ref)
        self._writers = [
            asyncio.create_task(self._write_companions(), name=f"companion-writer-{i}")
            for i in range(COMPANION_WRITERS)
        ]

    def stop(self) -> list[asyncio.Task[None]]:
        """Cancel the lane's writers (what is queued is applied by the next leader's reconciles)."""
        for task in self._writers:
            task.cancel()
        return self._writers

    async def sent(self) -> None:
        """Return once every queued companion has been sent (or has failed)."""
        while self._waiting:
            await asyncio.sleep(0.05)

    def forget(self, owner: Key | None = None) -> None:
        """Forget what was applied (of one owner): its next reconcile sends every child again."""
        if owner is None:
            self._applied.clear()
        else:
            self._applied.pop(owner, None)
            self._rejected.pop(owner, None)

    def rejected_companions(self, owner: Key) -> list[Rejection]:
        """Companions of ``owner`` the apiserver refused when the lane last sent them."""
        return list(self._rejected.get(owner, {}).values())

    async def apply(
        self,
        owner: Key,
        objects: Sequence[dict[str, Any]],
        current: Sequence[Mapping[str, Any]],
        *,
        tolerate_missing_pod_monitor_api: bool,
    ) -> ApplyResult:
        """Apply the workloads of ``objects`` (without the lane: every child) and queue the
        companions; ``current``: the owner's children as cached."""
        versions = {(c["kind"], c["metadata"]["name"]): child_version(c) for c in current}
        memo = self._applied.setdefault(owner, {})
        workloads = []
        for obj in objects:
            ref = (obj["kind"], obj["metadata"]["name"])
            digest = object_digest(obj)
            version = versions.get(ref)
            if version is not None and memo.get(ref) == (digest, version):
                continue
            if obj["kind"] in WORKLOAD_KIND_NAMES or not self.companion_lane:
                workloads.append((obj, digest, version is None and obj["kind"] in WORKLOAD_KIND_NAMES))
            else:
                self._queue_companion(_Companion(owner, obj, digest, tolerate_missing_pod_monitor_api))
        self._workload_writes += len(workloads)
        if workloads:
            self._workloads_idle.clear()
        try:
            results = await asyncio.gather(
                *(asyncio.to_thread(self.api.create_or_apply if create else self.api.apply, obj)
                  for obj, _, create in workloads),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            self._workload_writes -= len(workloads)
            if self._workload_writes == 0:
                self._workloads_idle.set()
        rejected: list[Rejection] = []
        failure: BaseException | None = None
        for (obj, digest, _), result in zip(workloads, results, strict=True):
            if isinstance(result, BaseException):
                summary = summarize_api_error(result)
                if summary.status in REJECTED_STATUSES:
                    rejected.append(Rejection(obj["kind"], obj["metadata"]["name"], summary))
                else:
                    failure = failure or result
                continue
            memo[(obj["kind"], obj["metadata"]["name"])] = (digest, child_version(result))
            self.children.set_child(owner, result)  # the next reconcile sees what was written
        if failure is not None:
            raise failure
        return ApplyResult(tuple(rejected))

    # -- the companion lane ---------------------------------------------------------------------
    def _queue_companion(self, job: _Companion) -> None:
        ref = (job.owner, job.obj["kind"], job.obj["metadata"]["name"])
        waiting = self._waiting.get(ref)
        self._waiting[ref] = job
        if waiting is None:
            assert self._lane is not None, "Applier.start() was not called"
            self._lane.put_nowait(ref)

    async def after_workload_writes(self) -> None:
        """Return once no workload write is on the wire, or after COMPANION_HOLD_SECONDS: in a burst
        of new GLMDeployments the apiserver serves the workloads, which start the long path, before
        the writes nothing waits for (companions, Events)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._workloads_idle.wait(), COMPANION_HOLD_SECONDS)

    async def _write_companions(self) -> None:
        assert self._lane is not None
        while True:
            ref = await self._lane.get()
            job = self._waiting.get(ref)
            if job is None:
                continue
            await self.after_workload_writes()
            job = self._waiting.get(ref) or job  # the newest rendering, if it changed meanwhile
            try:
                result = await asyncio.to_thread(self.api.apply, job.obj)
            except Exception as exc:
                self._companion_failed(job, exc)
            else:
                self._companion_applied(job, result)
            finally:
                if self._waiting.get(ref) is job:
                    del self._waiting[ref]
                else:  # rendered again while on the wire: send the newer one
                    self._lane.put_nowait(ref)

    def _companion_applied(self, job: _Companion, result: dict[str, Any]) -> None:
        ref = (job.obj["kind"], job.obj["metadata"]["name"])
        self._applied.setdefault(job.owner, {})[ref] = (job.digest, child_version(result))
        self.children.set_child(job.owner, result)
        if self._rejected.get(job.owner, {}).pop(ref, None) is not None:
            self.on_companion_rejected(job.owner)  # the next reconcile clears ChildRejected

    def _companion_failed(self, job: _Companion, exc: BaseException) -> None:
        summary = summarize_api_error(exc)
        ref = (job.obj["kind"], job.obj["metadata"]["name"])
        if _pod_monitor_api_missing(job.obj, summary) and job.tolerate_missing_pod_monitor_api:
            self.on_pod_monitor_api_missing()  # the CRD went away since discovery was asked
        elif summary.status in REJECTED_STATUSES or _pod_monitor_api_missing(job.obj, summary):
            self._rejected.setdefault(job.owner, {})[ref] = Rejection(ref[0], ref[1], summary)
            self.on_companion_rejected(job.owner)
        else:
            self.on_companion_failed(job.owner, exc)

    async def idle(self) -> None:
        """Return once the lane is empty (tests; a shut-down does not wait for it)."""
        while self._waiting:
            await asyncio.sleep(0)

    # -- prune ----------------------------------------------------------------------------------
    async def prune(self, owner: Key, children: Sequence[ChildRef]) -> None:
        namespace = owner[0]
        await asyncio.gather(
            *(asyncio.to_thread(self.api.delete, api_version, kind, namespace, name)
              for api_version, kind, name in children)
        )  # fmt: skip
        for api_version, kind, name in children:
            self.children.delete_child(owner, api_version, kind, name)
            self._applied.get(owner, {}).pop((kind, name), None)
