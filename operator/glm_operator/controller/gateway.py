"""The GLMGateway reconciler: observe -> desired -> apply -> status, on a work queue of its own.

- **observe** reads the GLMGateway, its Deployment's readiness and the served names of its
  namespace's GLMDeployments from what the watches cached (no apiserver request);
- **desired** is ``glm_operator.desired.gateway.compute_gateway_desired`` (pure): the objects, the
  NetworkPolicy to prune when the chart turned it off, the status and the Events of its transitions;
- **apply** goes through an ``Applier`` of its own (every child in the reconcile: the status names
  them); a child unchanged since its last apply is not sent again;
- **status** is written only when it changed, conditional on the resourceVersion it was computed
  from (a 409 retries with backoff, from the newer version), then the Events go out through the
  ``EventRecorder``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from glm_operator.api.gateway import GATEWAY_KIND
from glm_operator.clients.kube import KubeClient
from glm_operator.controller.applier import Applier
from glm_operator.controller.cache import OwnedObjects, is_known
from glm_operator.controller.clock import Clock, rfc3339
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.retry import retry_failed
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.desired.gateway import DeploymentView, ObservedGateway, compute_gateway_desired
from glm_operator.desired.status import changed
from glm_operator.gateway.network_policy import NetworkPolicySettings
from glm_operator.gateway.routes import model_source
from glm_operator.planning.supply.outages import parse_time

log = logging.getLogger(__name__)


class ChildRejected(Exception):
    """The apiserver refused a child of the GLMGateway (400, 413, 422, 500)."""


class GatewayReconciler:
    """GLMGateways on a work queue of their own, with the GLMDeployment reconciler's backoff.

    Watch events only update the caches (GLMGateway bodies, their Deployments, the served names of
    the GLMDeployments) and enqueue keys; the workers (on the leader only) reconcile one key at a
    time. A failure is retried after the per-key exponential backoff (honouring a 429's
    ``Retry-After``), logged in one line; a new leader and every resync apply every cached GLMGateway
    again (``Applier.forget``). A hand edit of a gateway's Deployment (a new
    ``metadata.generation``), its deletion, a change of its ready pods or of the served names of its
    namespace re-queues the GLMGateway. A GLMGateway's ``status.wake`` (models requested while none
    of their replicas was ready) wakes the GLMDeployments serving them (``wake``: the autoscaler's;
    None without one).
    """

    def __init__(
        self,
        *,
        api: KubeClient,
        queue: WorkQueue[Key],
        children: OwnedObjects,
        applier: Applier,
        recorder: EventRecorder,
        clock: Clock,
        image: str,
        network_policy: NetworkPolicySettings,
        wake: Callable[[Key, float], bool] | None = None,
    ) -> None:
        """``children``: the gateways' children as last applied or watched (``applier`` writes
        its answers there)."""
        self.api = api
        self.queue = queue
        self.children = children
        self.applier = applier
        self.recorder = recorder
        self.clock = clock
        self.image = image
        self.network_policy = network_policy
        self.wake = wake
        self.bodies: dict[Key, dict[str, Any]] = {}  # GLMGateway bodies, as last seen or written
        self._deployments: dict[Key, DeploymentView] = {}
        self._served: dict[Key, str] = {}  # GLMDeployment key -> its served name

    def on_gateway(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":  # owner references: the garbage collector removes the children
            self.bodies.pop(key, None)
            self._deployments.pop(key, None)
            self.children.children.pop(key, None)
            self.applier.forget(key)
            self.queue.remove(key)
            return
        if not meta.get("uid") or is_known(obj, self.bodies.get(key)):
            return  # no object yet, or the echo of this reconciler's own status write
        self.bodies[key] = dict(obj)
        self.queue.add(key)
        self._wake_models(key[0], (obj.get("status") or {}).get("wake") or [])

    def _wake_models(self, namespace: str, requests: list[Mapping[str, Any]]) -> None:
        """A gateway pod got requests for these models while none of their replicas was ready:
        wake the GLMDeployments serving them (the autoscaler ignores stale or non-zero ones)."""
        if self.wake is None:
            return
        for request in requests:
            requested_at = parse_time(request.get("requestedAt"))
            if requested_at is None:
                continue
            for (ns, name), served in sorted(self._served.items()):
                wanted = ns == namespace and served == request.get("model")
                if wanted and self.wake((ns, name), requested_at.timestamp()):
                    log.info("waking GLMDeployment %s/%s: a gateway got a request for %s", ns, name, served)

    def forget_namespace(self, namespace: str) -> None:
        """A namespace being deleted: its GLMGateways are gone."""
        for key in [k for k in self.bodies if k[0] == namespace]:
            self.on_gateway("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
        for key in [k for k in self._served if k[0] == namespace]:
            del self._served[key]

    def on_gateway_deployment(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == GATEWAY_KIND]
        if not owners:
            return
        key = (str(meta.get("namespace")), str(owners[0]["name"]))
        if event_type == "DELETED":
            self._deployments.pop(key, None)
            self.children.delete_child(key, "apps/v1", "Deployment", str(meta.get("name")))
        else:
            self.children.set_child(key, {**obj, "apiVersion": "apps/v1", "kind": "Deployment"})
            view = DeploymentView.of(obj)
            if self._deployments.get(key) == view:
                return  # a status update the gateway's status does not show
            self._deployments[key] = view
        if key in self.bodies:
            self.queue.add(key)

    def on_glmdeployment(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A GLMDeployment's served name appeared, changed or went: its namespace's gateways re-run."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        source = None if event_type == "DELETED" else model_source(obj)
        served = source.served_name if source else None
        if self._served.get(key) == served:
            return
        if served is None:
            self._served.pop(key, None)
        else:
            self._served[key] = served
        for gateway in [k for k in self.bodies if k[0] == key[0]]:
            self.queue.add(gateway)

    def served_names(self, namespace: str) -> dict[str, tuple[str, ...]]:
        """Served name -> the GLMDeployments of ``namespace`` that serve it."""
        out: dict[str, list[str]] = {}
        for (ns, name), served in sorted(self._served.items()):
            if ns == namespace:
                out.setdefault(served, []).append(name)
        return {model: tuple(deployments) for model, deployments in out.items()}

    async def reconcile(self, key: Key) -> None:
        """One reconcile from the caches; a failure is retried with backoff (one log line)."""
        body = self.bodies.get(key)
        if body is None:
            self.queue.remove(key)
            return
        try:
            await self._reconcile(key, body)
        except Exception as exc:
            retry_failed(self.queue, key, GATEWAY_KIND, exc)
            return
        self.queue.forget(key)

    async def _reconcile(self, key: Key, body: dict[str, Any]) -> None:
        desired = compute_gateway_desired(self.observe(key, body))
        current = list(self.children.children.get(key, {}).values())
        result = await self.applier.apply(
            key, desired.objects, current, tolerate_missing_pod_monitor_api=False
        )
        if result.rejected:  # not written to status (no condition says it): retried with backoff
            raise ChildRejected("; ".join(f"{r.kind} {r.name}: {r.error.line()}" for r in result.rejected))
        if desired.prune:
            await self.applier.prune(key, desired.prune)
        if changed(body.get("status") or {}, desired.status):
            version = str(body["metadata"].get("resourceVersion") or "") or None
            written = await asyncio.to_thread(
                self.api.patch_status, *key, desired.status, version, GATEWAY_KIND
            )
            if key in self.bodies and not is_known(written, self.bodies[key]):
                self.bodies[key] = written  # before the key can run again
        self.recorder.post(body, desired.events)
        if desired.objects:
            log.info("GLMGateway %s/%s applied", *key)

    def observe(self, key: Key, body: Mapping[str, Any]) -> ObservedGateway:
        return ObservedGateway(
            body=body,
            image=self.image,
            now=rfc3339(self.clock.now()),
            network_policy=self.network_policy,
            deployment=self._deployments.get(key),
            served=self.served_names(key[0]),
        )
