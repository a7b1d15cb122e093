"""Apply the objects of one GLMGateway (a separate, small step next to the GLMDeployment reconcile),
from a work queue of its own (``GatewayReconciler``), and write its status.

Rendering is pure (``glm_operator.gateway.objects``), and so is the status
(``glm_operator.gateway.status``: conditions Ready, KeysLoaded, RoutesResolved and the Events of
their transitions); this applies the objects with server-side apply, then writes
``status.observedGeneration``, the Service name, the conditions and the counts. An invalid spec
(which the CRD schema normally rejects first) sets every condition False with reason InvalidSpec
naming the field, and posts a Warning Event, never an exception.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from glm_operator.api.gateway import GATEWAY_KIND, GLMGatewaySpec
from glm_operator.api.v1alpha1 import API_VERSION
from glm_operator.clients.kube import KubeClient, object_path
from glm_operator.controller.retry import retry_failed
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.gateway.network_policy import NetworkPolicySettings, network_policy_name, parse_metrics_from
from glm_operator.gateway.objects import gateway_name, render_gateway
from glm_operator.gateway.routes import model_source
from glm_operator.gateway.status import GatewayObserved, gateway_status
from glm_operator.planning.supply.outages import parse_time

log = logging.getLogger(__name__)

DEFAULT_SYNC_IMAGE = "ghcr.io/glm-operator/glm-operator:latest"


def sync_image() -> str:
    """Image of the gateway's sync sidecar: the operator's own image (the chart sets it)."""
    return os.environ.get("GLM_OPERATOR_GATEWAY_SYNC_IMAGE") or DEFAULT_SYNC_IMAGE


def network_policy_settings() -> NetworkPolicySettings:
    """The chart's ``gateway.networkPolicy`` values, from the environment it sets; a bad value stops
    the operator at start with the chart value named."""
    enabled = os.environ.get("GLM_OPERATOR_GATEWAY_NETWORK_POLICY", "true").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"gateway.networkPolicy.enabled: {enabled!r}; set true or false")
    metrics_from = os.environ.get("GLM_OPERATOR_GATEWAY_METRICS_FROM")
    if metrics_from is None:
        return NetworkPolicySettings(enabled=enabled == "true")
    return NetworkPolicySettings(enabled=enabled == "true", metrics_from=parse_metrics_from(metrics_from))


@dataclass(frozen=True)
class DeploymentView:
    """What the status reads of a gateway's Deployment."""

    generation: int
    ready_replicas: int
    rollout_stalled: bool

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> DeploymentView:
        status = obj.get("status") or {}
        stalled = any(
            c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions") or []
        )
        return cls(
            generation=int((obj.get("metadata") or {}).get("generation") or 0),
            ready_replicas=int(status.get("readyReplicas") or 0),
            rollout_stalled=stalled,
        )


def _spec_error(err: ValidationError) -> str:
    return "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


def apply_gateway(
    api: KubeClient,
    body: Mapping[str, Any],
    image: str,
    *,
    network_policy: NetworkPolicySettings | None = None,
    deployment: DeploymentView | None = None,
    served: Mapping[str, tuple[str, ...]] | None = None,
    previous: list[dict[str, Any]] | None = None,
    now: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    """Render and apply one GLMGateway's children, then write its status; returns the conditions
    written. ``previous``: the conditions last written (else the body's)."""
    meta = body["metadata"]
    raw_spec = body.get("spec") or {}
    spec_error = None
    try:
        spec: GLMGatewaySpec | None = GLMGatewaySpec.model_validate(raw_spec)
    except ValidationError as err:
        spec, spec_error = None, _spec_error(err)
    network_policy = network_policy or NetworkPolicySettings()
    if spec is not None:
        for obj in render_gateway(body, spec, image, network_policy):
            api.apply(obj)
        if not network_policy.enabled:  # turned off in the chart: the one applied before goes
            api.delete(
                "networking.k8s.io/v1", "NetworkPolicy", meta["namespace"], network_policy_name(meta["name"])
            )
    api_keys = raw_spec.get("apiKeys") or {}
    observed = GatewayObserved(
        namespace=meta["namespace"],
        name=meta["name"],
        generation=int(meta.get("generation") or 0),
        deployment=gateway_name(meta["name"]),
        secret_name=spec.api_keys.secret_name if spec else str(api_keys.get("secretName", "")),
        secret_key=spec.api_keys.key if spec else str(api_keys.get("key", "")),
        spec_error=spec_error,
        replicas=spec.replicas if spec else 0,
        deployment_seen=deployment is not None,
        ready_replicas=deployment.ready_replicas if deployment else 0,
        rollout_stalled=deployment.rollout_stalled if deployment else False,
        served=served or {},
        allow_lists=tuple((c.name, tuple(c.models)) for c in spec.clients) if spec else (),
    )
    if previous is None:
        previous = list((body.get("status") or {}).get("conditions") or [])
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = gateway_status(observed, previous, stamp)
    status: dict[str, Any] = {
        "observedGeneration": meta.get("generation"),
        "service": gateway_name(meta["name"]),
        "conditions": result.conditions,
        **result.fields,
    }
    if status != {k: (body.get("status") or {}).get(k) for k in status}:
        path = object_path(API_VERSION, GATEWAY_KIND, meta["namespace"], meta["name"]) + "/status"
        api.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
    for event in result.events:
        api.create_event(body, reason=event.reason, message=event.message, type_=event.type)
    if spec is not None:
        log.info("GLMGateway %s/%s applied", meta["namespace"], meta["name"])
    return result.conditions


class GatewayReconciler:
    """GLMGateways on a work queue of their own, with the GLMDeployment reconciler's backoff.

    Watch events only update the caches (GLMGateway bodies, their Deployments' readiness, the
    served names of the GLMDeployments) and enqueue keys; the workers (on the leader only) apply
    one key at a time. A failed apply is retried after the per-key exponential backoff (honouring a
    429's ``Retry-After``), logged in one line; a new leader re-applies every cached GLMGateway. A
    hand edit of a gateway's Deployment (a new ``metadata.generation``), its deletion, a change of
    its ready pods or of the served names of its namespace re-queues the GLMGateway.
    """

    def __init__(
        self,
        api: KubeClient,
        queue: WorkQueue[Key],
        image: str | None = None,
        network_policy: NetworkPolicySettings | None = None,
    ) -> None:
        self.api = api
        self.queue = queue
        self.image = image or sync_image()
        self.network_policy = network_policy or network_policy_settings()
        #: The autoscaler's ``wake(key, requested_at)`` (the manager sets it; None without one).
        self.wake: Callable[[Key, float], bool] | None = None
        self.bodies: dict[Key, dict[str, Any]] = {}  # last seen GLMGateway bodies
        self._deployments: dict[Key, DeploymentView] = {}
        self._served: dict[Key, str] = {}  # GLMDeployment key -> its served name
        self._conditions: dict[Key, tuple[int, list[dict[str, Any]]]] = {}  # last written, by generation

    def on_gateway(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":  # owner references: the garbage collector removes the children
            self.bodies.pop(key, None)
            self._deployments.pop(key, None)
            self._conditions.pop(key, None)
            self.queue.remove(key)
            return
        if not meta.get("uid"):
            return
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
        else:
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
        """Apply one GLMGateway from the cache; a failure is retried with backoff (one log line)."""
        body = self.bodies.get(key)
        if body is None:
            self.queue.remove(key)
            return
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        written = self._conditions.get(key)
        previous = written[1] if written and written[0] == generation else None
        try:
            conditions = await asyncio.to_thread(
                apply_gateway,
                self.api,
                body,
                self.image,
                network_policy=self.network_policy,
                deployment=self._deployments.get(key),
                served=self.served_names(key[0]),
                previous=previous,
            )
        except Exception as exc:
            retry_failed(self.queue, key, GATEWAY_KIND, exc)
            return
        self._conditions[key] = (generation, conditions)
        self.queue.forget(key)
