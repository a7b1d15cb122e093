"""Thin kopf handlers for GLMGateway: the leader applies the gateway's objects.

Separate from the GLMDeployment work queue: a gateway has no plan, only a render and an apply.
A replica that is not the leader waits for leadership, so a newly elected leader applies every
gateway from the events kopf queued. A hand edit of the gateway's Deployment (a new
``metadata.generation``) or its deletion re-applies the GLMGateway it belongs to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from glm_operator.clients.kube import GROUP, VERSION
from glm_operator.controller.gateway import apply_gateway, sync_image
from glm_operator.gateway.objects import GATEWAY_APP_NAME
from glm_operator.handlers.watches import _operator
from glm_operator.render import names

log = logging.getLogger(__name__)
RETRIES = 5

Key = tuple[str, str]
_gateways: dict[Key, dict[str, Any]] = {}  # last seen GLMGateway bodies
_deployment_generations: dict[Key, int] = {}  # last seen generation of each gateway Deployment


async def _apply(memo: Any, body: dict[str, Any]) -> None:
    op = _operator(memo)
    await op.wait_for_leadership()
    for attempt in range(RETRIES):
        try:
            await asyncio.to_thread(apply_gateway, op.api, body, sync_image())
            return
        except Exception as err:  # never crash the operator: back off, then leave it to the next event
            delay = 2.0 * 2**attempt
            log.warning(
                "GLMGateway %s not applied (%s); retry in %.0fs", body["metadata"]["name"], err, delay
            )
            await asyncio.sleep(delay)


@kopf.on.event(GROUP, VERSION, "glmgateways")
async def glmgateway_event(event: Any, memo: Any, **_: Any) -> None:
    body = dict(event.get("object") or {})
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if event.get("type") == "DELETED":
        _gateways.pop(key, None)
        return  # owner references: the garbage collector removes the children
    if not meta.get("uid"):
        return
    _gateways[key] = body
    await _apply(memo, body)


@kopf.on.event("apps", "v1", "deployments", labels={names.LABEL_NAME: GATEWAY_APP_NAME})
async def gateway_deployment_event(event: Any, memo: Any, **_: Any) -> None:
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "GLMGateway"]
    if not owners:
        return
    key = (str(meta.get("namespace")), str(owners[0]["name"]))
    body = _gateways.get(key)
    generation = int(meta.get("generation") or 0)
    if event.get("type") != "DELETED" and _deployment_generations.get(key) == generation:
        return  # a status update
    _deployment_generations[key] = generation
    if body is not None:
        await _apply(memo, body)
