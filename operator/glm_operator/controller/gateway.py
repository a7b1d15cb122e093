"""Apply the objects of one GLMGateway (a separate, small step next to the GLMDeployment reconcile),
from a work queue of its own (``GatewayReconciler``).

Rendering is pure (``glm_operator.gateway.objects``); this applies the result with server-side
apply and records ``status.observedGeneration`` and the Service name. An invalid spec (which the
CRD schema normally rejects first) becomes a Warning Event naming the field, never an exception.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from glm_operator.api.gateway import GATEWAY_KIND, GLMGatewaySpec
from glm_operator.api.v1alpha1 import API_VERSION
from glm_operator.clients.kube import KubeClient, object_path
from glm_operator.controller.retry import retry_failed
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.gateway.objects import gateway_name, render_gateway

log = logging.getLogger(__name__)

DEFAULT_SYNC_IMAGE = "ghcr.io/glm-operator/glm-operator:latest"


def sync_image() -> str:
    """Image of the gateway's sync sidecar: the operator's own image (the chart sets it)."""
    return os.environ.get("GLM_OPERATOR_GATEWAY_SYNC_IMAGE") or DEFAULT_SYNC_IMAGE


def apply_gateway(api: KubeClient, body: Mapping[str, Any], image: str) -> bool:
    """Render and apply one GLMGateway's children; False (and a Warning Event) for an invalid spec."""
    meta = body["metadata"]
    try:
        spec = GLMGatewaySpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        fields = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        api.create_event(
            body, reason="InvalidSpec", message=f"GLMGateway not applied: {fields}", type_="Warning"
        )
        return False
    for obj in render_gateway(body, spec, image):
        api.apply(obj)
    status = {"observedGeneration": meta.get("generation"), "service": gateway_name(meta["name"])}
    path = object_path(API_VERSION, GATEWAY_KIND, meta["namespace"], meta["name"]) + "/status"
    api.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
    log.info("GLMGateway %s/%s applied", meta["namespace"], meta["name"])
    return True


class GatewayReconciler:
    """GLMGateways on a work queue of their own, with the GLMDeployment reconciler's backoff.

    Watch events only update the cache of GLMGateway bodies and enqueue keys; the workers (on the
    leader only) apply one key at a time. A failed apply is retried after the per-key exponential
    backoff (honouring a 429's ``Retry-After``), logged in one line; a new leader re-applies every
    cached GLMGateway. A hand edit of a gateway's Deployment (a new ``metadata.generation``) or its
    deletion re-queues the GLMGateway it belongs to.
    """

    def __init__(self, api: KubeClient, queue: WorkQueue[Key], image: str | None = None) -> None:
        self.api = api
        self.queue = queue
        self.image = image or sync_image()
        self.bodies: dict[Key, dict[str, Any]] = {}  # last seen GLMGateway bodies
        self._deployment_generations: dict[Key, int] = {}

    def on_gateway(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":  # owner references: the garbage collector removes the children
            self.bodies.pop(key, None)
            self._deployment_generations.pop(key, None)
            self.queue.remove(key)
            return
        if not meta.get("uid"):
            return
        self.bodies[key] = dict(obj)
        self.queue.add(key)

    def forget_namespace(self, namespace: str) -> None:
        """A namespace being deleted: its GLMGateways are gone."""
        for key in [k for k in self.bodies if k[0] == namespace]:
            self.on_gateway("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})

    def on_gateway_deployment(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == GATEWAY_KIND]
        if not owners:
            return
        key = (str(meta.get("namespace")), str(owners[0]["name"]))
        generation = int(meta.get("generation") or 0)
        if event_type != "DELETED" and self._deployment_generations.get(key) == generation:
            return  # a status update
        self._deployment_generations[key] = generation
        if key in self.bodies:
            self.queue.add(key)

    async def reconcile(self, key: Key) -> None:
        """Apply one GLMGateway from the cache; a failure is retried with backoff (one log line)."""
        body = self.bodies.get(key)
        if body is None:
            self.queue.remove(key)
            return
        try:
            await asyncio.to_thread(apply_gateway, self.api, body, self.image)
        except Exception as exc:
            retry_failed(self.queue, key, GATEWAY_KIND, exc)
            return
        self.queue.forget(key)
