"""Server-side apply of a GLMDeployment's children, and their pruning.

One field manager (``glm-operator``) with ``force``: the operator owns every field it renders. The
workloads (Deployments, LeaderWorkerSets) go first: they start the long path (scheduling, image
pull, model load); the Service, PodDisruptionBudget and PodMonitor follow (nothing uses them before a
pod is Ready, minutes later). A workload the caches have not seen yet is POSTed rather than applied:
one write on the apiserver where an apply of an absent object makes two (``KubeClient.create_or_apply``).

A child whose rendered form is the one last applied, and which still carries the version that apply
returned (a workload's ``metadata.generation``: spec edits by hand bump it; a Service's
``resourceVersion``), is not sent again: the apiserver would answer a no-op, and a resync or a pod
event would cost one request per child. A deleted or hand-edited child is re-applied on its watch
event; drift the version does not show (a label edited by hand) is repaired by the periodic resync,
which forgets these digests (``forget``), as does a new leader term.

The apiserver refusing a child (400, 413, 422, 500) is a ``Rejection``: the reconciler reports it in
status (Degraded/ChildRejected) and retries with backoff. Any other failure is raised.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.clients.kube import ApiErrorSummary, KubeClient, summarize_api_error
from glm_operator.controller.cache import ClusterCache
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
    rejected: tuple[Rejection, ...] = ()
    pod_monitor_api_missing: bool = False  # a PodMonitor refused because its API is not served


def object_digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _pod_monitor_api_missing(obj: Mapping[str, Any], summary: ApiErrorSummary) -> bool:
    """A PodMonitor refused because the apiserver does not serve the API (any more): 404, or 403
    while its CRD is being deleted."""
    if obj.get("kind") != POD_MONITOR_KIND:
        return False
    return summary.status == 404 or (summary.status == 403 and "terminating" in summary.message)


class Applier:
    def __init__(self, api: KubeClient, cache: ClusterCache) -> None:
        self.api = api
        self.cache = cache
        # owner -> (kind, name) -> (digest of the object last applied, the version the apply returned)
        self._applied: dict[Key, dict[tuple[str, str], tuple[str, str]]] = {}

    def forget(self, owner: Key | None = None) -> None:
        """Forget what was applied (of one owner): its next reconcile sends every child again."""
        if owner is None:
            self._applied.clear()
        else:
            self._applied.pop(owner, None)

    async def apply(
        self,
        owner: Key,
        objects: Sequence[dict[str, Any]],
        current: Sequence[Mapping[str, Any]],
        *,
        tolerate_missing_pod_monitor_api: bool,
    ) -> ApplyResult:
        """Apply ``objects`` (workloads first); ``current``: the owner's children as cached."""
        versions = {(c["kind"], c["metadata"]["name"]): child_version(c) for c in current}
        memo = self._applied.setdefault(owner, {})
        sends = []
        for obj in objects:
            ref = (obj["kind"], obj["metadata"]["name"])
            digest = object_digest(obj)
            version = versions.get(ref)
            if version is not None and memo.get(ref) == (digest, version):
                continue
            sends.append((obj, digest, version is None and obj["kind"] in WORKLOAD_KIND_NAMES))
        workloads = [s for s in sends if s[0]["kind"] in WORKLOAD_KIND_NAMES]
        companions = [s for s in sends if s[0]["kind"] not in WORKLOAD_KIND_NAMES]
        rejected: list[Rejection] = []
        missing = False
        for batch in (workloads, companions):
            results = await asyncio.gather(
                *(asyncio.to_thread(self.api.create_or_apply if create else self.api.apply, obj)
                  for obj, _, create in batch),
                return_exceptions=True,
            )  # fmt: skip
            failure: BaseException | None = None
            for (obj, digest, _), result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    summary = summarize_api_error(result)
                    if _pod_monitor_api_missing(obj, summary) and tolerate_missing_pod_monitor_api:
                        missing = True  # the CRD went away since discovery was asked
                    elif summary.status in REJECTED_STATUSES or _pod_monitor_api_missing(obj, summary):
                        rejected.append(Rejection(obj["kind"], obj["metadata"]["name"], summary))
                    else:
                        failure = failure or result
                    continue
                memo[(obj["kind"], obj["metadata"]["name"])] = (digest, child_version(result))
                self.cache.owned.set_child(owner, result)  # the next reconcile sees what was written
            if failure is not None:
                raise failure
        return ApplyResult(tuple(rejected), missing)

    async def prune(self, owner: Key, children: Sequence[ChildRef]) -> None:
        namespace = owner[0]
        await asyncio.gather(
            *(asyncio.to_thread(self.api.delete, api_version, kind, namespace, name)
              for api_version, kind, name in children)
        )  # fmt: skip
        for api_version, kind, name in children:
            self.cache.owned.delete_child(owner, api_version, kind, name)
            self._applied.get(owner, {}).pop((kind, name), None)
